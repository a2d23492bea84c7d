"""One driver for the speculative tests of every family: verify T tokens, compare every output with the fp64
sequential truth (and the snapshot path), commit random accepted counts."""

from __future__ import annotations

import torch

from mamba2_cases import rel_err
from trtllm_replayssm.ops.slots import commit_reference, snapshot_commit_reference


def run_spec(pool, T, steps, make_inputs, verify, snapshot_verify, truth_step, tol, batch=3, wrong_commit=False,
             check=True):
    """make_inputs(batch) -> tuple of [batch, T, ...] tensors; verify(pool, *inputs, slot_idx=) -> y;
    snapshot_verify(state, snapshots, *inputs, slot_idx=) -> y; truth_step(state64, row inputs at token i)
    -> (y64, state64). Returns the worst output error against the truth."""
    slots_n = pool.num_slots
    truth = pool.checkpoint.double().clone()
    snap_state = pool.checkpoint.clone()
    snapshots = torch.zeros(slots_n, T, *snap_state.shape[1:])
    worst = 0.0
    for step in range(steps):
        slots = torch.randperm(slots_n)[:batch].to(torch.int32)
        slots[step % batch] = -1  # a padding row, at a different row each step
        inputs = make_inputs(batch)
        y = verify(pool, *inputs, slot_idx=slots)
        y_snap = snapshot_verify(snap_state, snapshots, *inputs, slot_idx=slots)
        accepted = torch.randint(1, T + 1, (batch,))
        for b, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            st = truth[s:s + 1]
            for i in range(T):
                yi, st = truth_step(st, [t[b:b + 1, i].double() for t in inputs])
                worst = max(worst, rel_err(y[b, i], yi[0]))
                if check:
                    assert rel_err(y[b, i], y_snap[b, i]) < tol, "replay and snapshot paths disagree"
                if i == int(accepted[b]) - 1:
                    truth[s] = st[0]
        commit = torch.where(accepted < T, accepted + 1, accepted) if wrong_commit else accepted
        commit_reference(pool, commit, slot_idx=slots)
        snapshot_commit_reference(snap_state, snapshots, accepted, slot_idx=slots)
    return worst
