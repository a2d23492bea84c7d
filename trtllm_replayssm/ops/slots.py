"""Batch rows to pool slots, shared by every family's references, and the speculative commit (pool generic)."""

from __future__ import annotations


def live_rows(slot_idx, batch, num_slots, pad_slot_id=-1):
    """(batch row, slot) pairs of the rows that are not padding (slot_idx None: row b uses slot b)."""
    idx = list(range(batch)) if slot_idx is None else [int(s) for s in slot_idx.tolist()]
    return [(b, s) for b, s in enumerate(idx) if s != pad_slot_id and 0 <= s < num_slots]


def check_spec_window(L: int, T: int) -> None:
    if L < 2 * T:
        raise ValueError(f"buffer_len={L} must be >= 2T={2 * T} for speculative decoding with T={T}")


def commit_reference(pool, accepted, slot_idx=None, pad_slot_id=-1):
    """Speculative commit: history += accepted[b] for every non-padding row (accepted: ints 1..T)."""
    for b, s in live_rows(slot_idx, accepted.shape[0], pool.num_slots, pad_slot_id):
        h, _ = pool.window(s)
        pool.set_cursor(s, h + int(accepted[b]))


def snapshot_commit_reference(state, snapshots, accepted, slot_idx=None, pad_slot_id=-1):
    """The conventional speculative path's commit: state[slot] := snapshots[slot, accepted - 1]."""
    for b, s in live_rows(slot_idx, accepted.shape[0], state.shape[0], pad_slot_id):
        state[s] = snapshots[s, int(accepted[b]) - 1]
