"""One driver for the speculative tests of every family: verify T tokens, compare every output with the fp64
sequential truth (and the snapshot path), commit random accepted counts."""

from __future__ import annotations

import torch

from mamba2_cases import rel_err, worst as worst_of
from mamba2_spec_cases import bits
from trtllm_replayssm.ops.slots import commit_reference, snapshot_commit, snapshot_commit_reference


def advance_truth(truth, slots, accepted, T, step, on_output):
    """For every live row: run the sequential truth over the window's T tokens from the slot's committed state
    (step(state, row, token) -> (y, state)), report each output (on_output(row, token, y)), and keep the state
    after the accepted tokens as the slot's new committed state."""
    for b, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        st = truth[s:s + 1]
        for i in range(T):
            yi, st = step(st, b, i)
            on_output(b, i, yi[0])
            if i == int(accepted[b]) - 1:
                truth[s] = st[0]


def run_spec(pool, T, steps, make_inputs, verify, snapshot_verify, truth_step, tol, batch=3, wrong_commit=False,
             check=True):
    """make_inputs(batch) -> tuple of [batch, T, ...] tensors; verify(pool, *inputs, slot_idx=) -> y;
    snapshot_verify(state, snapshots, *inputs, slot_idx=) -> y; truth_step(state64, row inputs at token i)
    -> (y64, state64). Returns the worst output error against the truth (NaN if any output is NaN)."""
    slots_n = pool.num_slots
    truth = pool.checkpoint.double().clone()
    snap_state = pool.checkpoint.clone()
    snapshots = torch.zeros(slots_n, T, *snap_state.shape[1:])
    worst = [0.0]

    def check_output(b, i, y_true):
        worst[0] = worst_of(worst[0], rel_err(y[b, i], y_true))
        if check:
            assert rel_err(y[b, i], y_snap[b, i]) < tol, "replay and snapshot paths disagree"

    for step in range(steps):
        slots = torch.randperm(slots_n)[:batch].to(torch.int32)
        slots[step % batch] = -1  # a padding row, at a different row each step
        inputs = make_inputs(batch)
        y = verify(pool, *inputs, slot_idx=slots)
        y_snap = snapshot_verify(snap_state, snapshots, *inputs, slot_idx=slots)
        accepted = torch.randint(1, T + 1, (batch,))
        advance_truth(truth, slots, accepted, T,
                      lambda st, b, i: truth_step(st, [t[b:b + 1, i].double() for t in inputs]), check_output)
        commit = torch.where(accepted < T, accepted + 1, accepted) if wrong_commit else accepted
        commit_reference(pool, commit, slot_idx=slots)
        snapshot_commit_reference(snap_state, snapshots, accepted, slot_idx=slots)
    return worst[0]


def worst_against_truth(pool, truth, T, steps, make_inputs, verify, snapshot_verify, truth_step, device,
                        wrong_commit=False, batch=6):
    """The ops (kernels on CUDA) against the fp64 sequential truth, with the snapshot path run beside them from
    the same committed states: random accepted counts each step, both paths committed by their ops.
    make_inputs(batch) -> [batch, T, ...] tensors; verify(pool, inputs, slot_idx) and
    snapshot_verify(state, snapshots, inputs, slot_idx) -> y; truth_step(state64, rows, b, i) -> (y64, state64)
    with rows the inputs in fp64 on the CPU. Returns the worst errors: replay and snapshot against the truth, and
    replay against snapshot (NaN where an output is NaN). wrong_commit: the replay pool commits one token too many where a < T."""
    from mamba2_cases import slot_map
    from trtllm_replayssm.ops.slots import snapshot_commit, spec_commit

    snap_state = truth.float().to(device)
    snapshots = torch.empty(pool.num_slots, T, *snap_state.shape[1:], device=device)
    worst = {"replay": 0.0, "snapshot": 0.0, "paths": 0.0}
    for _ in range(steps):
        slots = slot_map(batch, pool.num_slots, n_pad=1, device=device)
        inputs = make_inputs(batch)
        y = verify(pool, inputs, slots).cpu()
        y_snap = snapshot_verify(snap_state, snapshots, inputs, slots).cpu()
        accepted = torch.randint(1, T + 1, (batch,), dtype=torch.int32)
        rows = [t.double().cpu() for t in inputs]

        def on_output(b, i, y_true):
            worst["replay"] = worst_of(worst["replay"], rel_err(y[b, i], y_true))
            worst["snapshot"] = worst_of(worst["snapshot"], rel_err(y_snap[b, i], y_true))
            worst["paths"] = worst_of(worst["paths"], rel_err(y[b, i], y_snap[b, i]))

        advance_truth(truth, slots.cpu(), accepted, T, lambda st, b, i: truth_step(st, rows, b, i), on_output)
        commit = torch.where(accepted < T, accepted + 1, accepted) if wrong_commit else accepted
        spec_commit(pool, commit.to(device), slot_idx=slots, window=T)
        snapshot_commit(snap_state, snapshots, accepted.to(device), slot_idx=slots)
    return worst


def check_snapshot_step(step, state, snaps, ref_state, ref_snaps, before_state, before_snaps, slots, out, y_ref, tol):
    """After one snapshot verify (kernel: state, snaps, out; reference: ref_state, ref_snaps, y_ref; the buffers as
    they were before it: before_state, before_snaps): outputs of live rows follow the reference and padding rows'
    outputs stay poisoned, the state is untouched, live slots' snapshots are complete and follow the reference, other
    slots' are untouched. Then commits random accepted counts (kernel and reference) and checks that exactly the
    accepted snapshot became each live slot's state."""
    live = slots >= 0
    used = slots[live].long()
    assert not torch.isnan(out[live]).any() and torch.isnan(out[~live]).all(), f"step {step}: y coverage"
    assert rel_err(out[live], y_ref[live]) < tol, f"step {step}: y off the reference"
    assert torch.equal(bits(state), bits(before_state)), f"step {step}: the verify wrote the state"
    assert not torch.isnan(snaps[used]).any(), f"step {step}: snapshots of live slots not fully written"
    assert rel_err(snaps[used], ref_snaps[used]) < tol, f"step {step}: snapshots off the reference"
    unused = [s for s in range(snaps.shape[0]) if s not in set(used.tolist())]
    assert torch.equal(bits(snaps[unused]), bits(before_snaps[unused])), f"step {step}: unused snapshots written"
    T = snaps.shape[1]
    accepted = torch.randint(1, T + 1, (slots.shape[0],), dtype=torch.int32, device=slots.device)
    expect = state.clone()
    for b, s in enumerate(slots.tolist()):
        if s >= 0:
            expect[s] = snaps[s, int(accepted[b]) - 1]
    snapshot_commit(state, snaps, accepted, slot_idx=slots)
    snapshot_commit_reference(ref_state, ref_snaps, accepted, slot_idx=slots)
    assert torch.equal(bits(state), bits(expect)), f"step {step}: the commit did not copy the accepted snapshot"
    assert rel_err(state, ref_state) < tol, f"step {step}: state off the reference after commit"
