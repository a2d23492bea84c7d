"""The SSM mixers' gated RMSNorm: per group of `group_size` consecutive elements of a row, an RMS normalisation
with a SiLU gate, in the two orders of the supported models (A: y's dtype; rA: a rounding to A):

    gate first (Nemotron-H MambaRMSNormGated):  h = y * silu(gate);  out = weight * rA(h * rsqrt(mean(h^2) + eps))
    norm first (Qwen3.5 gated RMSNorm):          out = rA(weight * rA(y * rsqrt(mean(y^2) + eps)) * silu(gate))

in fp32 arithmetic, with `weight * rA(.)` done in A when the weight is in A (a second rounding) and in fp32 when
the weight is fp32. The reference below is that specification, written as transformers writes the two modules
(a test checks that it equals them bit for bit).

`gated_rmsnorm` runs the fused kernel on CUDA tensors (current stream, no synchronisation, capturable in a CUDA
graph) and the reference elsewhere; its result is the module's cast to y's dtype. Both validate first and touch
nothing on error; the kernel's limits apply on both devices: y, gate and out in fp32, fp16 or bf16 (one dtype),
weight in that dtype or fp32, group sizes multiples of GATED_RMSNORM_GROUP_MULTIPLE up to
GATED_RMSNORM_MAX_GROUP_SIZE dividing the last dimension, last dimensions contiguous (rows may be strided, e.g. a
slice of a projection's output).
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from trtllm_replayssm.config import (DTYPE_CODES, GATED_RMSNORM_GROUP_MULTIPLE, GATED_RMSNORM_MAX_GROUP_SIZE,
                                     dtype_name)
from trtllm_replayssm.ops import norm_kernels as kernels
from trtllm_replayssm.ops.validate import check as _check

__all__ = ["gated_rmsnorm", "gated_rmsnorm_reference", "kernel_applies"]


def gated_rmsnorm_reference(y, gate, weight, eps, group_size, norm_before_gate, compute_dtype=torch.float32):
    """y, gate [..., D]; weight [D]; D a multiple of group_size. Returns what the module returns: gate first, in
    weight's and y's promoted dtype; norm first, in y's dtype. compute_dtype=float64 keeps the roundings to y's
    dtype (and the product in it when the weight has that dtype) and does everything else in fp64 (the oracle)."""
    input_dtype = y.dtype
    *lead, D = y.shape
    x = y.to(compute_dtype)
    if not norm_before_gate:
        x = x * F.silu(gate.to(compute_dtype))
    x = x.reshape(*lead, D // group_size, group_size)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    n = x.reshape(*lead, D).to(input_dtype)
    # weight * n: in y's dtype when the weight has it (the module's rounding), else in the compute dtype.
    x = weight * n if weight.dtype == input_dtype else weight.to(compute_dtype) * n.to(compute_dtype)
    if not norm_before_gate:
        return x
    return (x.to(compute_dtype) * F.silu(gate.to(compute_dtype))).to(input_dtype)


# ---- the op: validation, then the kernel (CUDA) or the reference (elsewhere) ----

_DTYPES = ", ".join(dtype_name(d) for d in DTYPE_CODES)


def _shape(t):
    return tuple(getattr(t, "shape", ()))


def _rows(name, t, D):
    """t [..., D] as a [rows, D] view: the leading dimensions must collapse into one row stride."""
    try:
        return t.view(-1, D)
    except RuntimeError:
        raise ValueError(f"{name} of shape {_shape(t)} and strides {t.stride()} is not a view of rows of {D} "
                         f"elements (its leading dimensions must collapse into one row stride)") from None


def _check_tensor(name, t, y):
    _check(isinstance(t, torch.Tensor) and _shape(t) == _shape(y),
           f"{name} has shape {_shape(t)}, expected y's {_shape(y)}")
    _check(t.device == y.device, f"{name} is on {t.device}, expected {y.device}")
    _check(t.dtype == y.dtype, f"{name} has dtype {dtype_name(t.dtype)}, expected y's {dtype_name(y.dtype)}")
    _check(t.numel() == 0 or t.stride(-1) == 1,
           f"{name} must be contiguous in its last dimension (stride {t.stride(-1)})")


def _check_args(y, gate, weight, eps, group_size, norm_before_gate, out):
    """Every check of the op; returns the [rows, D] views of y, gate and out (out None: to be allocated)."""
    _check(isinstance(y, torch.Tensor) and y.dim() >= 1, f"y must be a tensor [..., D], got {_shape(y)}")
    _check(y.dtype in DTYPE_CODES, f"y has dtype {dtype_name(y.dtype)}; supported: {_DTYPES}")
    _check(y.numel() == 0 or y.stride(-1) == 1, f"y must be contiguous in its last dimension (stride {y.stride(-1)})")
    D = y.shape[-1]
    _check_tensor("gate", gate, y)
    _check(isinstance(weight, torch.Tensor) and _shape(weight) == (D,),
           f"weight has shape {_shape(weight)}, expected ({D},) (y's last dimension)")
    _check(weight.device == y.device, f"weight is on {weight.device}, expected {y.device}")
    _check(weight.dtype in (torch.float32, y.dtype),
           f"weight has dtype {dtype_name(weight.dtype)}; supported: fp32 or y's dtype ({dtype_name(y.dtype)})")
    _check(weight.is_contiguous(), "weight must be contiguous")
    _check(isinstance(group_size, numbers.Integral) and not isinstance(group_size, bool)
           and group_size % GATED_RMSNORM_GROUP_MULTIPLE == 0 and 0 < group_size <= GATED_RMSNORM_MAX_GROUP_SIZE,
           f"group_size={group_size!r} is not supported (supported: multiples of {GATED_RMSNORM_GROUP_MULTIPLE} "
           f"up to {GATED_RMSNORM_MAX_GROUP_SIZE})")
    _check(D % group_size == 0, f"group_size={group_size} does not divide y's last dimension {D}")
    _check(isinstance(eps, numbers.Real) and not isinstance(eps, bool) and math.isfinite(eps)
           and torch.tensor(float(eps), dtype=torch.float32).item() > 0,
           f"eps={eps!r} must be positive and finite (in fp32)")
    _check(isinstance(norm_before_gate, bool),
           f"norm_before_gate must be a bool (True: Qwen3.5's order, False: Nemotron-H's), got {norm_before_gate!r}")
    y2, gate2 = _rows("y", y, D), _rows("gate", gate, D)
    _check(y2.shape[0] * (D // group_size) < 2 ** 31,
           f"{y2.shape[0]} rows of {D // group_size} groups exceed the kernel's 2^31-1 groups per call")
    if out is None:
        return y2, gate2, None
    _check_tensor("out", out, y)
    out2 = _rows("out", out, D)
    _check(out2.shape[0] <= 1 or out2.stride(0) >= D,
           f"out's rows overlap (row stride {out2.stride(0)} < {D} elements)")
    return y2, gate2, out2


def gated_rmsnorm(y, gate, weight, eps, group_size, norm_before_gate, out=None):
    """The gated RMSNorm over groups of `group_size` of the last dimension. y, gate [..., D] (one dtype; rows may
    be strided); weight [D] (y's dtype or fp32); norm_before_gate: False for Nemotron-H's order (gate first),
    True for Qwen3.5's. out: y's shape and dtype, or None (allocated). WRITTEN: out. Returns out, which holds the
    module's result cast to y's dtype."""
    y2, gate2, out2 = _check_args(y, gate, weight, eps, group_size, norm_before_gate, out)
    if out is None:
        out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
        out2 = out.view(-1, y.shape[-1])
    if y2.shape[0] == 0:
        return out
    if y.is_cuda:
        p = kernels.fill_params(y2, gate2, weight, out2, float(eps), int(group_size), norm_before_gate)
        kernels.launch(p, y.device)
    else:
        out2.copy_(gated_rmsnorm_reference(y2, gate2, weight, eps, group_size, norm_before_gate).to(y.dtype))
    return out


def kernel_applies(y, gate, weight, group_size) -> bool:
    """Whether gated_rmsnorm runs these tensors on the fused kernel: CUDA tensors of one supported dtype, a weight
    in that dtype or fp32, a supported group size, and a kernel library that has the norm."""
    return (isinstance(y, torch.Tensor) and y.is_cuda and y.dtype in DTYPE_CODES and gate.dtype == y.dtype
            and weight.dtype in (torch.float32, y.dtype) and group_size % GATED_RMSNORM_GROUP_MULTIPLE == 0
            and 0 < group_size <= GATED_RMSNORM_MAX_GROUP_SIZE and kernels.available())
