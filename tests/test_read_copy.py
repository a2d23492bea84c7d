"""Read copies: layout and bytes, the recurrence unaffected by the read copy (bit for bit), outputs within the
format's error, bad combinations refused, and the drift tool on a short run."""

import pytest
import torch

from mamba2_cases import layer_params, rel_err, step_inputs, worst
from read_copy_checks import read_copy_tol
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.drift import run_drift
from trtllm_replayssm.ops.mamba2 import replay_decode
from trtllm_replayssm.pool import Mamba2StatePool

SHAPE = Mamba2LayerShape(4, 64, 64, 2)
FORMATS = ["none", "fp16", "bf16", "fp8", "nvfp4"]


def test_read_copy_bytes_by_hand():
    H, P, N = 4, 64, 64
    b = {f: Mamba2StatePool(SHAPE, 1, ReplayConfig(16, "fp32", "bf16", f)).bytes_per_slot() for f in FORMATS}
    assert "read_state" not in b["none"]
    assert b["bf16"]["read_state"] == H * P * N * 2
    assert b["fp8"]["read_state"] == H * P * N and b["fp8"]["read_scale"] == H * P * 4
    assert b["nvfp4"]["read_state"] == H * P * N // 2 and b["nvfp4"]["read_block_scale"] == H * P * N // 16
    assert b["nvfp4"]["read_scale"] == H * P // 4 * 4  # one fp32 per 4 state rows


def test_checkpoint_identical_whatever_the_read_copy():
    """The read copy never feeds the recurrence: after many steps past several flushes, every format leaves
    the same checkpoint bit for bit."""
    A, D, dt_bias = layer_params(SHAPE, "cpu")
    S_init = torch.randn(3, 4, 64, 64)
    pools = {}
    for f in FORMATS:
        pools[f] = Mamba2StatePool(SHAPE, 3, ReplayConfig(5, "fp32", "fp32", f, latency_route_bytes=0))
        for s in range(3):
            pools[f].reset_slot(s, S_init[s])
    outs = {f: [] for f in FORMATS}
    for _ in range(23):
        x, dt, B, C, z = step_inputs(SHAPE, 3, torch.float32, "cpu")
        for f in FORMATS:
            outs[f].append(replay_decode(pools[f], x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias))
    for f in FORMATS[1:]:
        assert torch.equal(pools[f].checkpoint, pools["none"].checkpoint), f
    # Outputs of a read copy differ by its rounding only: within the format's bound, larger for narrower formats.
    errs = {f: worst(*(rel_err(a, b) for a, b in zip(outs[f], outs["none"]))) for f in FORMATS[1:]}
    assert all(errs[f] < read_copy_tol(f) for f in errs), errs
    assert 0 < errs["fp16"] < errs["bf16"] < errs["fp8"] < errs["nvfp4"], errs


@pytest.mark.parametrize("state, fmt, match", [
    ("bf16", "bf16", "read_format=bf16 is not narrower than state_dtype=bf16"),
    ("fp16", "fp16", "not narrower"),
    ("fp32", "int4", "read_format='int4' is not supported"),
])
def test_rejects_pointless_read_copies(state, fmt, match):
    with pytest.raises(ValueError, match=match):
        Mamba2StatePool(SHAPE, 1, ReplayConfig(16, state, "bf16", fmt))


def test_drift_short_run_orders_the_configurations():
    errors = run_drift(120, SHAPE, batch=2, buffer_len=8, seed=1,
                       configs=("replay fp32", "replay fp32 + nvfp4 reads", "shared nvfp4 checkpoint"))
    mean = {k: sum(v[-40:]) / 40 for k, v in errors.items()}
    assert mean["replay fp32"] < 1e-5
    assert mean["replay fp32 + nvfp4 reads"] < mean["shared nvfp4 checkpoint"]


def test_gdn_checkpoint_identical_whatever_the_read_copy():
    """GDN: the corrected update u reads the checkpoint (it feeds the recurrence); only y = S q reads the copy."""
    from test_gdn_reference import step_inputs as gdn_inputs
    from trtllm_replayssm.config import GdnLayerShape
    from trtllm_replayssm.ops.gdn.replay_reference import gdn_replay_decode_reference
    from trtllm_replayssm.pool import GdnStatePool

    shape = GdnLayerShape(2, 4, 64, 64)
    S_init = torch.randn(2, 4, 64, 64) * 0.5
    pools = {f: GdnStatePool(shape, 2, ReplayConfig(4, "fp32", "fp32", f, latency_route_bytes=0)) for f in FORMATS}
    for p in pools.values():
        for s in range(2):
            p.reset_slot(s, S_init[s])
    ys = {f: [] for f in FORMATS}
    for _ in range(11):
        q, k, v, g, beta = gdn_inputs(shape, 2)
        for f, p in pools.items():
            ys[f].append(gdn_replay_decode_reference(p, q, k, v, g, beta))
    for f in FORMATS[1:]:
        assert torch.equal(pools[f].checkpoint, pools["none"].checkpoint), f
        assert torch.equal(pools[f].ring_u, pools["none"].ring_u), f
        err = worst(*(rel_err(a, b) for a, b in zip(ys[f], ys["none"])))
        assert 0 < err < read_copy_tol(f), f"{f}: y off the no-copy run by {err}"
