"""GDN ops: raw gating follows the fp64 recurrence with its own gates, raw and precomputed gating agree, replay
equals conventional at L=1, errors name the problem."""

import pytest
import torch

from mamba2_cases import rel_err
from oracle import gdn_raw_token
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.gdn.reference import gdn_gating
from trtllm_replayssm.pool import GdnStatePool

SHAPE = GdnLayerShape(2, 4, 64, 64)


def raw_inputs(n=3):
    return dict(q=torch.randn(n, 2, 64), k=torch.randn(n, 2, 64), v=torch.randn(n, 4, 64), a=torch.randn(n, 4),
                b=torch.randn(n, 4), A_log=torch.rand(4) - 1, dt_bias=torch.randn(4))


def test_raw_gating_equals_precomputed_and_l1_anchor():
    """Anchored by the fp64 recurrence of tests/oracle.py (its own gating and q / k preparation); fp32 arithmetic
    over 3 steps stays within 1e-5 of it (measured ~1e-7)."""
    pools = [GdnStatePool(SHAPE, 3, ReplayConfig(1, "fp32", "fp32")) for _ in range(2)]
    state = torch.zeros(3, 4, 64, 64)
    truth = torch.zeros(3, 4, 64, 64, dtype=torch.float64)
    for _ in range(3):
        inp = raw_inputs()
        q, k, v = inp.pop("q"), inp.pop("k"), inp.pop("v")
        g, beta = gdn_gating(inp["a"], inp["b"], inp["A_log"], inp["dt_bias"])
        y_raw = gdn_replay_decode(pools[0], q, k, v, **inp)
        step = gdn_raw_token(inp["A_log"], inp["dt_bias"])
        y_true = torch.empty(v.shape, dtype=torch.float64)
        for row in range(3):
            y_true[row], truth[row] = step(truth[row], q[row], k[row], v[row], inp["a"][row], inp["b"][row])
        assert 0 < rel_err(y_raw, y_true) < 1e-5
        y_pre = gdn_replay_decode(pools[1], q, k, v, g=g, beta=beta)
        y_conv = gdn_conventional_decode(state, SHAPE, q, k, v, g=g, beta=beta)
        assert torch.equal(y_raw, y_pre) and torch.equal(y_pre, y_conv)
    assert torch.equal(pools[0].checkpoint, state)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(q=d["q"][:, :1]), r"q has shape \(3, 1, 64\)"),
    (lambda d: d.pop("A_log"), "either g and beta, or all of a, b, A_log and dt_bias"),
    (lambda d: d.update(a=torch.randn(3, 4, 64)), r"a has shape \(3, 4, 64\)"),
    (lambda d: d.update(slot_idx=torch.tensor([0, 1, 2])), "slot_idx must be int32"),
    (lambda d: d.update(a=torch.randn(3, 4, device="meta")), "a is on meta, expected cpu"),
    (lambda d: d.update({n: torch.cat([d[n], d[n][:2]]) for n in ("q", "k", "v", "a", "b")}),
     "batch=5 exceeds the 3 state slots and no slot_idx was given"),
])
def test_rejects_bad_input(mutate, match):
    pool = GdnStatePool(SHAPE, 3, ReplayConfig(4, "fp32", "fp32"))
    d = raw_inputs()
    mutate(d)
    with pytest.raises(ValueError, match=match):
        gdn_replay_decode(pool, d.pop("q"), d.pop("k"), d.pop("v"), **d)

