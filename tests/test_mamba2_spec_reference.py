"""CPU tests of the Mamba-2 speculative references: verify + commit over >= 40 steps of random accepted counts
against the fp64 sequential recurrence, equality with the snapshot path, and a deliberately wrong commit."""

import pytest
import torch

from mamba2_cases import layer_params
from spec_harness import run_spec
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2.reference import mamba2_step
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.pool import Mamba2StatePool

SHAPE = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=2)


def window_inputs(batch, T):
    H, P, N, G = SHAPE.nheads, SHAPE.head_dim, SHAPE.dstate, SHAPE.ngroups
    return (torch.randn(batch, T, H, P), torch.randn(batch, T, H) * 0.5, torch.randn(batch, T, G, N),
            torch.randn(batch, T, G, N), torch.randn(batch, T, H, P))


def run(T, L, steps, **kw):
    pool = Mamba2StatePool(SHAPE, 6, ReplayConfig(L, torch.float32, torch.float32))
    pool.checkpoint.normal_()
    A, D, dt_bias = layer_params(SHAPE, "cpu")

    def verify(pool, x, dt, B, C, z, slot_idx):
        return replay_verify_reference(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slot_idx)

    def snapshot(state, snaps, x, dt, B, C, z, slot_idx):
        return snapshot_verify_reference(state, snaps, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slot_idx)

    def truth(st, row):
        x, dt, B, C, z = row
        return mamba2_step(st, x, dt, A.double(), B, C, D.double(), z, dt_bias.double())

    return run_spec(pool, T, steps, lambda b: window_inputs(b, T), verify, snapshot, truth, tol=2e-5, batch=4, **kw)


@pytest.mark.parametrize("T, L", [(2, 4), (2, 7), (4, 8), (4, 20), (8, 16), (8, 24)])
def test_verify_commit_matches_recurrence_over_40_steps(T, L):
    """fp32 replay against fp64 truth, every draft output, 40 steps (several flushes at these L)."""
    assert run(T, L, steps=40) < 2e-5


def test_off_by_one_commit_is_caught():
    assert run(4, 12, steps=12, check=False) < 2e-5
    assert run(4, 12, steps=12, wrong_commit=True, check=False) > 1e-3


def test_ring_must_hold_two_windows():
    pool = Mamba2StatePool(SHAPE, 2, ReplayConfig(7, torch.float32, torch.float32))
    A, _, _ = layer_params(SHAPE, "cpu")
    x, dt, B, C, z = window_inputs(2, 4)
    with pytest.raises(ValueError, match="buffer_len=7 must be >= 2T=8"):
        replay_verify_reference(pool, x, dt, B, C, A)
