"""Binding of the Gated DeltaNet speculative verify kernels (ReplaySSM verify and the snapshot path): fills
rssm_gdn_verify_params (one host function) and calls the C ABI on the current CUDA stream. No synchronisation,
no allocation: usable inside CUDA graph capture. The commits are family independent (ops/commit_kernels.py)."""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES, READ_FORMAT_CODES

SNAPSHOT, REPLAY = 0, 1  # rssm_gdn_mode: CONVENTIONAL (the snapshot path), REPLAY

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
_STRIDES = (("q", ("batch", "token", "head")), ("k", ("batch", "token", "head")), ("v", ("batch", "token", "head")),
            ("g", ("batch", "token")), ("beta", ("batch", "token")), ("y", ("batch", "token", "head")))


class GdnVerifyParams(ctypes.Structure):
    """Mirror of rssm_gdn_verify_params (plugins/include/replayssm/gdn/spec_params.h), field for field; every
    pointer as c_void_p. The size is checked against the library on every call."""

    _fields_ = [(n, _i32) for n in ("batch", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "window",
                                    "buffer_len", "num_slots", "pad_slot_id", "mode", "state_dtype", "act_dtype")]
    _fields_ += [(n, _ptr) for n in ("state", "ring_u", "ring_k", "ring_g", "cursor", "snapshots", "slot_idx",
                                     "q", "k", "v", "g", "beta", "y")]
    _fields_ += [(f"{n}_{d}_stride", _i64) for n, dims in _STRIDES for d in dims]
    _fields_ += [("read_format", _i32), ("read_state", _ptr), ("read_scale", _ptr)]


def fill_params(mode, state, q, k, v, g, beta, y, slot_idx=None, pad_slot_id=-1, *, ring_u=None, ring_k=None,
                ring_g=None, cursor=None, buffer_len=0, snapshots=None, read_format="none", read_state=None,
                read_scale=None) -> GdnVerifyParams:
    """The params of one verify. state [slots, HV, V, K] (the pool's checkpoint in replay); q, k [b, T, H, K]
    prepared, v, y [b, T, HV, V] (act dtype); g, beta [b, T, HV] fp32, heads contiguous; strides are taken from the
    tensors (in elements). read_format (a key of READ_FORMAT_CODES) with its buffers read_state / read_scale (replay
    only; the pool's buffers of the same names): y reads the copy for S0 q, folding rows rewrite it."""
    p = GdnVerifyParams()
    p.batch, p.window, p.num_k_heads, p.head_k_dim = q.shape[0], q.shape[1], q.shape[2], q.shape[3]
    p.num_v_heads, p.head_v_dim = v.shape[2], v.shape[3]
    p.buffer_len, p.num_slots, p.pad_slot_id, p.mode = buffer_len, state.shape[0], pad_slot_id, mode
    p.state_dtype, p.act_dtype = DTYPE_CODES[state.dtype], DTYPE_CODES[v.dtype]
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "y": y}
    for name, t in (("state", state), ("ring_u", ring_u), ("ring_k", ring_k), ("ring_g", ring_g),
                    ("cursor", cursor), ("snapshots", snapshots), ("slot_idx", slot_idx), *tensors.items(),
                    ("read_state", read_state), ("read_scale", read_scale)):
        setattr(p, name, None if t is None else t.data_ptr())
    p.read_format = READ_FORMAT_CODES[read_format]
    for name, dims in _STRIDES:
        for d, s in zip(dims, tensors[name].stride()):
            setattr(p, f"{name}_{d}_stride", s)
    return p


def launch(p: GdnVerifyParams, device: torch.device) -> None:
    """Validates and launches one verify on torch.cuda.current_stream(device); returns without waiting."""
    lib = _lib.require("rssm_gdn_verify")
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(lib.rssm_gdn_verify(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)), "rssm_gdn_verify")


def validate(p: GdnVerifyParams) -> None:
    """The library's checks of sizes, dtypes, pointers and strides, without a launch (no GPU needed)."""
    lib = _lib.require("rssm_gdn_verify")
    _lib.check(lib.rssm_gdn_verify_validate(ctypes.byref(p), ctypes.sizeof(p)), "rssm_gdn_verify_validate")


def abi_size_matches() -> bool:
    return _lib.require("rssm_gdn_verify").rssm_gdn_verify_params_size() == ctypes.sizeof(GdnVerifyParams)
