"""Batch rows to pool slots, shared by every family's references, and the speculative commit (pool generic)."""

from __future__ import annotations

import torch

from trtllm_replayssm.config import dtype_name
from trtllm_replayssm.ops import commit_kernels
from trtllm_replayssm.ops.validate import check


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


def _check_accepted(accepted, slot_idx, batch_limit, device):
    """accepted: int32 [b] on `device`; slot_idx: None or int32 [b] on `device`. Returns b."""
    check(isinstance(accepted, torch.Tensor) and accepted.dim() == 1, "accepted must be a tensor of shape [batch]")
    b = accepted.shape[0]
    check(accepted.dtype == torch.int32, f"accepted has dtype {dtype_name(accepted.dtype)}, expected int32")
    check(accepted.device == device, f"accepted is on {accepted.device}, expected {device} (the pool's device)")
    check(accepted.is_contiguous(), "accepted must be contiguous")
    if slot_idx is None:
        check(b <= batch_limit, f"batch={b} exceeds the pool's {batch_limit} slots and no slot_idx was given")
    else:
        check(isinstance(slot_idx, torch.Tensor) and tuple(slot_idx.shape) == (b,),
              f"slot_idx has shape {tuple(getattr(slot_idx, 'shape', ()))}, expected ({b},)")
        check(slot_idx.dtype == torch.int32, f"slot_idx has dtype {dtype_name(slot_idx.dtype)}, expected int32")
        check(slot_idx.device == device, f"slot_idx is on {slot_idx.device}, expected {device}")
        check(slot_idx.is_contiguous(), "slot_idx must be contiguous")
    return b


def spec_commit(pool, accepted, slot_idx=None, *, window, pad_slot_id=-1):
    """ReplaySSM speculative commit on any family's pool: history += accepted[b] in every replica of every head of
    each non-padding row's slot. accepted: device int32 [b], values 1..window; window: T of the verify just run.

    CUDA: one kernel, counts read on the device (no host sync, capturable in a CUDA graph); out-of-range counts
    are clamped to 0..window and the history to at most L - window (common/spec_params.h), so a bad count never
    indexes outside the ring. CPU: commit_reference (counts taken as given).
    """
    check(isinstance(window, int) and window >= 1, f"window={window!r} must be a positive int (tokens per verify)")
    check_spec_window(pool.buffer_len, window)
    _check_accepted(accepted, slot_idx, pool.num_slots, pool.device)
    if pool.device.type != "cuda":
        return commit_reference(pool, accepted, slot_idx, pad_slot_id)
    p = commit_kernels.spec_commit_params(pool.cursor, accepted, slot_idx, window, pool.buffer_len, pad_slot_id)
    commit_kernels.launch_spec_commit(p, pool.device)


def snapshot_commit(state, snapshots, accepted, slot_idx=None, pad_slot_id=-1):
    """The snapshot path's commit on any family: state[slot] := snapshots[slot, accepted[b] - 1] for every
    non-padding row (state [slots, ...], snapshots [slots, T, ...] of the same dtype, both contiguous).

    CUDA: one copy kernel, counts read on the device (clamped to 1..T). CPU: snapshot_commit_reference.
    """
    check(isinstance(state, torch.Tensor) and isinstance(snapshots, torch.Tensor), "state and snapshots must be tensors")
    want = (state.shape[0], snapshots.shape[1] if snapshots.dim() > 1 else -1, *state.shape[1:])
    check(snapshots.dim() == state.dim() + 1 and tuple(snapshots.shape) == want,
          f"snapshots has shape {tuple(snapshots.shape)}, expected (slots, T, *state.shape[1:]) = {want}")
    check(snapshots.dtype == state.dtype, f"snapshots has dtype {dtype_name(snapshots.dtype)}, expected "
                                          f"{dtype_name(state.dtype)} (the state's)")
    check(snapshots.device == state.device, f"snapshots is on {snapshots.device}, expected {state.device}")
    check(state.is_contiguous() and snapshots.is_contiguous(), "state and snapshots must be contiguous")
    _check_accepted(accepted, slot_idx, state.shape[0], state.device)
    if state.device.type != "cuda":
        return snapshot_commit_reference(state, snapshots, accepted, slot_idx, pad_slot_id)
    p = commit_kernels.snapshot_commit_params(state, snapshots, accepted, slot_idx, pad_slot_id)
    commit_kernels.launch_snapshot_commit(p, state.device)
