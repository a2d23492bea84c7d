"""CPU tests of the GDN / KDA speculative references: >= 40 steps of random accepted counts against the fp64
sequential recurrence, equality with the snapshot path, a deliberately wrong commit."""

import pytest
import torch

from mamba2_cases import rel_err
from test_gdn_reference import step_inputs
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn.reference import gdn_step
from trtllm_replayssm.ops.gdn.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import commit_reference, snapshot_commit_reference
from trtllm_replayssm.pool import GdnStatePool


def window_inputs(shape, batch, T):
    parts = [step_inputs(shape, batch) for _ in range(T)]
    return [torch.stack([p[i] for p in parts], dim=1) for i in range(5)]  # q, k, v, g, beta with a T dim


def run(shape, T, L, steps, wrong_commit=False, check=True):
    slots_n, batch = 5, 3
    pool = GdnStatePool(shape, slots_n, ReplayConfig(L, torch.float32, torch.float32))
    pool.checkpoint.normal_()
    truth = pool.checkpoint.double().clone()
    snap_state = pool.checkpoint.clone()
    snapshots = torch.zeros(slots_n, T, *snap_state.shape[1:])
    worst = 0.0
    for step in range(steps):
        slots = torch.randperm(slots_n)[:batch].to(torch.int32)
        slots[step % batch] = -1
        q, k, v, g, beta = window_inputs(shape, batch, T)
        y = replay_verify_reference(pool, q, k, v, g, beta, slot_idx=slots)
        y_snap = snapshot_verify_reference(snap_state, snapshots, q, k, v, g, beta, slot_idx=slots)
        accepted = torch.randint(1, T + 1, (batch,))
        for b, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            st = truth[s:s + 1]
            for i in range(T):
                yi, st = gdn_step(st, q[b:b + 1, i].double(), k[b:b + 1, i].double(), v[b:b + 1, i].double(),
                                  g[b:b + 1, i].double(), beta[b:b + 1, i].double())
                worst = max(worst, rel_err(y[b, i], yi[0]))
                if check:
                    assert rel_err(y[b, i], y_snap[b, i]) < 5e-5, "replay and snapshot paths disagree"
                if i == int(accepted[b]) - 1:
                    truth[s] = st[0]
        commit = torch.where(accepted < T, accepted + 1, accepted) if wrong_commit else accepted
        commit_reference(pool, commit, slot_idx=slots)
        snapshot_commit_reference(snap_state, snapshots, accepted, slot_idx=slots)
    return worst


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("T, L", [(2, 4), (4, 9), (4, 20)])
def test_verify_commit_matches_recurrence_over_40_steps(per_channel, T, L):
    shape = GdnLayerShape(2, 4, 64, 64, per_channel_decay=per_channel)
    assert run(shape, T, L, steps=40) < 5e-5


def test_off_by_one_commit_is_caught():
    shape = GdnLayerShape(2, 4, 64, 64)
    assert run(shape, 4, 12, steps=10, check=False) < 5e-5
    assert run(shape, 4, 12, steps=10, wrong_commit=True, check=False) > 1e-3
