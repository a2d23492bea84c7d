"""Binding of the causal conv1d kernels: fills rssm_conv1d_params (one host function) and calls the C ABI on the
current CUDA stream. No synchronisation, no allocation: usable inside CUDA graph capture.

Libraries built before the conv1d kernels lack the rssm_conv1d* symbols: importing this module still works, and
calls raise a KernelError saying to rebuild.
"""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES

UPDATE, VERIFY, COMMIT = 0, 1, 2  # rssm_conv1d_mode

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


class Conv1dParams(ctypes.Structure):
    """Mirror of rssm_conv1d_params (plugins/include/replayssm/conv1d/params.h), field for field; every pointer
    as c_void_p. The size is checked against the library on every call."""

    _fields_ = [(n, _i32) for n in ("mode", "batch", "channels", "kernel_size", "num_tokens", "num_slots",
                                    "pad_slot_id", "state_dtype", "act_dtype", "weight_dtype", "silu")]
    _fields_ += [(n, _ptr) for n in ("state", "slot_idx", "accepted", "x", "weight", "bias", "y")]
    _fields_ += [(n, _i64) for n in ("state_slot_stride", "state_channel_stride", "x_batch_stride",
                                     "x_token_stride", "y_batch_stride", "y_token_stride")]


def _ptr_of(t):
    return None if t is None else t.data_ptr()


def fill_params(mode, state, batch, kernel_size, num_tokens=1, x=None, weight=None, bias=None, y=None, silu=True,
                slot_idx=None, accepted=None, pad_slot_id=-1) -> Conv1dParams:
    """The params of one launch. state: update [slots, C, k-1], verify / commit windows [slots, C, k-1+T];
    x, y: update [b, C], verify [b, T, C]; weight [C, k], bias [C]; accepted [b] int32 (commit). Strides are
    taken from the tensors (in elements)."""
    p = Conv1dParams()
    p.mode, p.batch, p.channels, p.kernel_size, p.num_tokens = mode, batch, state.shape[1], kernel_size, num_tokens
    p.num_slots, p.pad_slot_id, p.silu = state.shape[0], pad_slot_id, int(silu)
    p.state_dtype = DTYPE_CODES[state.dtype]
    if x is not None:
        p.act_dtype, p.weight_dtype = DTYPE_CODES[x.dtype], DTYPE_CODES[weight.dtype]
    for name, t in (("state", state), ("slot_idx", slot_idx), ("accepted", accepted), ("x", x),
                    ("weight", weight), ("bias", bias), ("y", y)):
        setattr(p, name, _ptr_of(t))
    p.state_slot_stride, p.state_channel_stride = state.stride(0), state.stride(1)
    for name, t in (("x", x), ("y", y)):
        if t is not None:
            setattr(p, f"{name}_batch_stride", t.stride(0))
            setattr(p, f"{name}_token_stride", t.stride(1) if t.dim() == 3 else 0)
    return p


def launch(p: Conv1dParams, device: torch.device) -> None:
    """Validates and launches on torch.cuda.current_stream(device); returns without waiting."""
    lib = _lib.require("rssm_conv1d")
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(lib.rssm_conv1d(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)), "rssm_conv1d")


def validate(p: Conv1dParams) -> None:
    """The library's checks of sizes, dtypes, pointers and strides, without a launch (no GPU needed)."""
    lib = _lib.require("rssm_conv1d_validate")
    _lib.check(lib.rssm_conv1d_validate(ctypes.byref(p), ctypes.sizeof(p)), "rssm_conv1d_validate")


def abi_size_matches() -> bool:
    return _lib.require("rssm_conv1d_params_size").rssm_conv1d_params_size() == ctypes.sizeof(Conv1dParams)
