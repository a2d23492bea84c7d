"""CPU tests of the Mamba-2 speculative references: verify + commit over >= 40 steps of random accepted counts
against the fp64 sequential recurrence, equality with the snapshot path, and a deliberately wrong commit."""

import pytest
import torch

from mamba2_cases import layer_params, rel_err
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2.reference import mamba2_step
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import commit_reference, snapshot_commit_reference
from trtllm_replayssm.pool import Mamba2StatePool

SHAPE = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=2)


def window_inputs(batch, T):
    H, P, N, G = SHAPE.nheads, SHAPE.head_dim, SHAPE.dstate, SHAPE.ngroups
    return (torch.randn(batch, T, H, P), torch.randn(batch, T, H) * 0.5, torch.randn(batch, T, G, N),
            torch.randn(batch, T, G, N), torch.randn(batch, T, H, P))


def run(T, L, steps, wrong_commit=False, check=True):
    """Drives verify/commit with random accepted counts; returns the worst output error against fp64."""
    slots_n, batch = 6, 4
    pool = Mamba2StatePool(SHAPE, slots_n, ReplayConfig(L, torch.float32, torch.float32))
    pool.checkpoint.normal_()
    A, D, dt_bias = layer_params(SHAPE, "cpu")
    truth = pool.checkpoint.double().clone()
    snap_state = pool.checkpoint.clone()
    snapshots = torch.zeros(slots_n, T, *snap_state.shape[1:])
    worst = 0.0
    for step in range(steps):
        slots = torch.randperm(slots_n)[:batch].to(torch.int32)
        slots[step % batch] = -1  # a padding row, at a different row each step
        x, dt, B, C, z = window_inputs(batch, T)
        y = replay_verify_reference(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        y_snap = snapshot_verify_reference(snap_state, snapshots, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias,
                                           slot_idx=slots)
        accepted = torch.randint(1, T + 1, (batch,))
        for b, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            st = truth[s:s + 1]
            for i in range(T):
                yi, st = mamba2_step(st, x[b:b + 1, i].double(), dt[b:b + 1, i].double(), A.double(),
                                     B[b:b + 1, i].double(), C[b:b + 1, i].double(), D.double(),
                                     z[b:b + 1, i].double(), dt_bias.double())
                worst = max(worst, rel_err(y[b, i], yi[0]))
                if check:
                    assert rel_err(y[b, i], y_snap[b, i]) < 2e-5, "replay and snapshot paths disagree"
                if i == int(accepted[b]) - 1:
                    truth[s] = st[0]
        wrong = accepted.clone()
        if wrong_commit:
            wrong = torch.where(accepted < T, accepted + 1, accepted)  # off by one where it can be
        commit_reference(pool, wrong, slot_idx=slots)
        snapshot_commit_reference(snap_state, snapshots, accepted, slot_idx=slots)
    return worst


@pytest.mark.parametrize("T, L", [(2, 4), (2, 7), (4, 8), (4, 20), (8, 16), (8, 24)])
def test_verify_commit_matches_recurrence_over_40_steps(T, L):
    """fp32 replay against fp64 truth, every draft output, 40 steps (several flushes at these L)."""
    assert run(T, L, steps=40) < 2e-5


def test_off_by_one_commit_is_caught():
    assert run(4, 12, steps=12, check=False) < 2e-5
    assert run(4, 12, steps=12, wrong_commit=True, check=False) > 1e-3


def test_ring_must_hold_two_windows():
    pool = Mamba2StatePool(SHAPE, 2, ReplayConfig(7, torch.float32, torch.float32))
    A, D, dt_bias = layer_params(SHAPE, "cpu")
    x, dt, B, C, z = window_inputs(2, 4)
    with pytest.raises(ValueError, match="buffer_len=7 must be >= 2T=8"):
        replay_verify_reference(pool, x, dt, B, C, A)
