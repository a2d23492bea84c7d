"""Binding of the gated RMSNorm kernel: fills rssm_gated_rmsnorm_params (one host function) and calls the C ABI on
the current CUDA stream. No synchronisation, no allocation: usable inside CUDA graph capture.

Libraries built before the norm kernel lack the rssm_gated_rmsnorm* symbols: importing this module still works,
`available()` says False, and calls raise a KernelError saying to rebuild.
"""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


class GatedRmsNormParams(ctypes.Structure):
    """Mirror of rssm_gated_rmsnorm_params (plugins/include/replayssm/norm/params.h), field for field; every
    pointer as c_void_p. The size is checked against the library on every call."""

    _fields_ = [(n, _i32) for n in ("rows", "num_groups", "group_size", "act_dtype", "weight_dtype",
                                    "norm_before_gate")]
    _fields_ += [("eps", ctypes.c_float)]
    _fields_ += [(n, _ptr) for n in ("y", "gate", "weight", "out")]
    _fields_ += [(n, _i64) for n in ("y_row_stride", "gate_row_stride", "out_row_stride")]


def fill_params(y, gate, weight, out, eps, group_size, norm_before_gate) -> GatedRmsNormParams:
    """The params of one launch over 2-d views: y, gate, out [rows, D] (last dimension contiguous, any row stride),
    weight [D]; D = num_groups * group_size. Strides in elements."""
    p = GatedRmsNormParams()
    p.rows, p.num_groups, p.group_size = y.shape[0], y.shape[1] // group_size, group_size
    p.act_dtype, p.weight_dtype = DTYPE_CODES[y.dtype], DTYPE_CODES[weight.dtype]
    p.norm_before_gate, p.eps = int(norm_before_gate), eps
    p.y, p.gate, p.weight, p.out = y.data_ptr(), gate.data_ptr(), weight.data_ptr(), out.data_ptr()
    p.y_row_stride, p.gate_row_stride, p.out_row_stride = y.stride(0), gate.stride(0), out.stride(0)
    return p


def launch(p: GatedRmsNormParams, device: torch.device) -> None:
    """Validates and launches on torch.cuda.current_stream(device); returns without waiting."""
    lib = _lib.require("rssm_gated_rmsnorm")
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(lib.rssm_gated_rmsnorm(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)),
               "rssm_gated_rmsnorm")


def validate(p: GatedRmsNormParams) -> None:
    """The library's checks of sizes, dtypes, pointers and strides, without a launch (no GPU needed)."""
    lib = _lib.require("rssm_gated_rmsnorm_validate")
    _lib.check(lib.rssm_gated_rmsnorm_validate(ctypes.byref(p), ctypes.sizeof(p)), "rssm_gated_rmsnorm_validate")


def available() -> bool:
    """Whether the kernel library is there and has the gated RMSNorm."""
    return _lib.available() and _lib.has_symbol(_lib.load(), "rssm_gated_rmsnorm")


def abi_size_matches() -> bool:
    return _lib.require("rssm_gated_rmsnorm_params_size").rssm_gated_rmsnorm_params_size() == \
        ctypes.sizeof(GatedRmsNormParams)
