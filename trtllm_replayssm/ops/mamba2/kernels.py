"""Binding of the Mamba-2 decode kernels: fills rssm_mamba2_decode_params (one host function) and calls the
C ABI on the current CUDA stream. No synchronisation, no allocation: usable inside CUDA graph capture."""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES, READ_FORMAT_CODES

CONVENTIONAL, REPLAY = 0, 1

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


class Mamba2DecodeParams(ctypes.Structure):
    """Mirror of rssm_mamba2_decode_params (plugins/include/replayssm/mamba2/params.h); the size is checked
    against the library on every call."""

    _fields_ = [(n, _i32) for n in ("batch", "nheads", "head_dim", "dstate", "ngroups", "buffer_len",
                                    "num_slots", "pad_slot_id", "mode", "state_dtype", "act_dtype",
                                    "dt_softplus")]
    _fields_ += [(n, _ptr) for n in ("state", "ring_x", "ring_B", "ring_dt", "cursor", "slot_idx", "x", "dt",
                                     "B", "C", "z", "A", "D", "dt_bias", "y")]
    _fields_ += [(n, _i64) for n in ("x_batch_stride", "x_head_stride", "dt_batch_stride", "dt_head_stride",
                                     "B_batch_stride", "B_group_stride", "C_batch_stride", "C_group_stride",
                                     "z_batch_stride", "z_head_stride", "y_batch_stride", "y_head_stride")]
    _fields_ += [("read_format", _i32), ("read_state", _ptr), ("read_scale", _ptr), ("read_block_scale", _ptr)]
    _fields_ += [("latency_route_bytes", _i64)]


def _ptr_of(t):
    return None if t is None else t.data_ptr()


def _strides2(t):
    return (0, 0) if t is None else (t.stride(0), t.stride(1))


def fill_params(mode, state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, pad_slot_id, y,
                ring_x=None, ring_B=None, ring_dt=None, cursor=None, buffer_len=1, read_format="none",
                read_state=None, read_scale=None, read_block_scale=None,
                latency_route_bytes=0) -> Mamba2DecodeParams:
    """read_format (a key of READ_FORMAT_CODES) with its buffers read_state / read_scale / read_block_scale
    (replay only; the pool's buffers of the same names): the output-only route reads the copy, flush rows
    rewrite it. latency_route_bytes: the latency route's limit (replay only; params.h, config.py)."""
    p = Mamba2DecodeParams()
    p.batch, p.nheads, p.head_dim = x.shape[0], x.shape[1], x.shape[2]
    p.dstate, p.ngroups = B.shape[2], B.shape[1]
    p.buffer_len, p.num_slots, p.pad_slot_id, p.mode = buffer_len, state.shape[0], pad_slot_id, mode
    p.state_dtype, p.act_dtype = DTYPE_CODES[state.dtype], DTYPE_CODES[x.dtype]
    p.dt_softplus = int(bool(dt_softplus))
    for name, t in (("state", state), ("ring_x", ring_x), ("ring_B", ring_B), ("ring_dt", ring_dt),
                    ("cursor", cursor), ("slot_idx", slot_idx), ("x", x), ("dt", dt), ("B", B), ("C", C),
                    ("z", z), ("A", A), ("D", D), ("dt_bias", dt_bias), ("y", y), ("read_state", read_state),
                    ("read_scale", read_scale), ("read_block_scale", read_block_scale)):
        setattr(p, name, _ptr_of(t))
    p.read_format = READ_FORMAT_CODES[read_format]
    p.latency_route_bytes = latency_route_bytes
    for name, t in (("x", x), ("dt", dt), ("B", B), ("C", C), ("z", z), ("y", y)):
        s0, s1 = _strides2(t)
        setattr(p, f"{name}_batch_stride", s0)
        setattr(p, f"{name}_{'group' if name in ('B', 'C') else 'head'}_stride", s1)
    return p


def launch(p: Mamba2DecodeParams, device: torch.device) -> None:
    lib = _lib.load()
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(lib.rssm_mamba2_decode(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)),
               "rssm_mamba2_decode")


def validate(p: Mamba2DecodeParams) -> None:
    lib = _lib.load()
    _lib.check(lib.rssm_mamba2_decode_validate(ctypes.byref(p), ctypes.sizeof(p)), "rssm_mamba2_decode_validate")


def abi_size_matches() -> bool:
    return _lib.load().rssm_mamba2_decode_params_size() == ctypes.sizeof(Mamba2DecodeParams)
