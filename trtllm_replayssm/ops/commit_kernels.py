"""Binding of the speculative commit kernels shared by every family (plugins/include/replayssm/common/
spec_commit.cuh): the ReplaySSM cursor move and the snapshot path's restore. Accepted counts stay on the device;
no synchronisation, no allocation: usable inside CUDA graph capture."""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


class SpecCommitParams(ctypes.Structure):
    """Mirror of rssm_spec_commit_params (plugins/include/replayssm/common/spec_params.h)."""

    _fields_ = [(n, _i32) for n in ("batch", "nheads", "num_slots", "pad_slot_id", "window", "buffer_len")]
    _fields_ += [(n, _ptr) for n in ("cursor", "accepted", "slot_idx")]


class SnapshotCommitParams(ctypes.Structure):
    """Mirror of rssm_snapshot_commit_params (plugins/include/replayssm/common/spec_params.h)."""

    _fields_ = [(n, _i32) for n in ("batch", "num_slots", "pad_slot_id", "window")]
    _fields_ += [("state_bytes", _i64)]
    _fields_ += [(n, _ptr) for n in ("state", "snapshots", "accepted", "slot_idx")]


def _ptr_of(t):
    return None if t is None else t.data_ptr()


def spec_commit_params(cursor, accepted, slot_idx, window, buffer_len, pad_slot_id) -> SpecCommitParams:
    p = SpecCommitParams()
    p.batch, p.nheads, p.num_slots = accepted.shape[0], cursor.shape[1], cursor.shape[0]
    p.pad_slot_id, p.window, p.buffer_len = pad_slot_id, window, buffer_len
    p.cursor, p.accepted, p.slot_idx = _ptr_of(cursor), _ptr_of(accepted), _ptr_of(slot_idx)
    return p


def snapshot_commit_params(state, snapshots, accepted, slot_idx, pad_slot_id) -> SnapshotCommitParams:
    p = SnapshotCommitParams()
    p.batch, p.num_slots, p.pad_slot_id, p.window = accepted.shape[0], state.shape[0], pad_slot_id, snapshots.shape[1]
    p.state_bytes = state[0].numel() * state.element_size() if state.shape[0] else 0
    p.state, p.snapshots, p.accepted, p.slot_idx = (_ptr_of(state), _ptr_of(snapshots), _ptr_of(accepted),
                                                    _ptr_of(slot_idx))
    return p


def _call(name: str, p, device) -> None:
    lib = _lib.require(name)
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(getattr(lib, name)(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)), name)


def _validate(name: str, p) -> None:
    lib = _lib.require(name)
    _lib.check(getattr(lib, f"{name}_validate")(ctypes.byref(p), ctypes.sizeof(p)), f"{name}_validate")


def launch_spec_commit(p: SpecCommitParams, device) -> None:
    _call("rssm_spec_commit", p, device)


def launch_snapshot_commit(p: SnapshotCommitParams, device) -> None:
    _call("rssm_snapshot_commit", p, device)


def validate_spec_commit(p: SpecCommitParams) -> None:
    _validate("rssm_spec_commit", p)


def validate_snapshot_commit(p: SnapshotCommitParams) -> None:
    _validate("rssm_snapshot_commit", p)


def abi_sizes_match() -> bool:
    lib = _lib.require("rssm_spec_commit")
    return (lib.rssm_spec_commit_params_size() == ctypes.sizeof(SpecCommitParams)
            and lib.rssm_snapshot_commit_params_size() == ctypes.sizeof(SnapshotCommitParams))
