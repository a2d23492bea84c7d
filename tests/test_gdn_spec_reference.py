"""CPU tests of the GDN / KDA speculative references: >= 40 steps of random accepted counts against the fp64
sequential recurrence, equality with the snapshot path, a deliberately wrong commit."""

import pytest
import torch

from spec_harness import run_spec
from test_gdn_reference import step_inputs
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn.reference import gdn_step
from trtllm_replayssm.ops.gdn.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.pool import GdnStatePool


def window_inputs(shape, batch, T):
    parts = [step_inputs(shape, batch) for _ in range(T)]
    return [torch.stack([p[i] for p in parts], dim=1) for i in range(5)]  # q, k, v, g, beta with a T dim


def run(shape, T, L, steps, **kw):
    pool = GdnStatePool(shape, 5, ReplayConfig(L, torch.float32, torch.float32))
    pool.checkpoint.normal_()
    return run_spec(pool, T, steps, lambda b: window_inputs(shape, b, T), replay_verify_reference,
                    snapshot_verify_reference, lambda st, row: gdn_step(st, *row), tol=5e-5, **kw)


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("T, L", [(2, 4), (4, 9), (4, 20)])
def test_verify_commit_matches_recurrence_over_40_steps(per_channel, T, L):
    shape = GdnLayerShape(2, 4, 64, 64, per_channel_decay=per_channel)
    assert run(shape, T, L, steps=40) < 5e-5


def test_off_by_one_commit_is_caught():
    shape = GdnLayerShape(2, 4, 64, 64)
    assert run(shape, 4, 12, steps=10, check=False) < 5e-5
    assert run(shape, 4, 12, steps=10, wrong_commit=True, check=False) > 1e-3
