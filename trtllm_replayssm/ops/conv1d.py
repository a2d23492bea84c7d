"""The causal depthwise conv1d in front of the SSM mixers (kernel k, channels C), decode and speculative
references. Its state is the last k-1 inputs; ReplaySSM leaves it unchanged for standard decode, and
speculative decoding needs the same rollback as the SSM state.

    y = silu(sum_i w[:, i] * window[:, i] + bias)   window = last k-1 committed inputs, then the new input

Speculative layout: a per-slot window buffer of k-1+T inputs [C, k-1+T]: positions 0..k-2 hold the committed
history, the verify writes the T tokens behind it, and the commit keeps the last k-1 inputs of the committed
history plus the accepted tokens (a shift by the accepted count).

Layouts follow transformers' causal_conv1d_update (Nemotron-H, Qwen3.5): weight [C, k] (the depthwise
nn.Conv1d weight squeezed), optional bias [C], SiLU as the activation flag, state [slots, C, k-1] (the last k-1
inputs, oldest first). Arithmetic is fp32 whatever the dtypes; inputs are stored in the state dtype.

The ops (conv1d_update, conv1d_verify, conv1d_commit) run the kernels on CUDA tensors (current stream, no
synchronisation, capturable in a CUDA graph) and the references below on CPU tensors. Both validate first and
touch nothing on error; the kernel's limits apply on both devices so that what runs on CPU runs on GPU:
k in CONV1D_KERNEL_SIZES, T in 1..CONV1D_MAX_TOKENS, state / x in fp32, fp16 or bf16, weight and bias in fp32 or
x's dtype, innermost dimensions contiguous. Slot indices of one call must be distinct (not checked: that would
need the values on the host). docs/conv1d.md has the I/O contract.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trtllm_replayssm.config import CONV1D_KERNEL_SIZES, CONV1D_MAX_TOKENS, DTYPE_CODES, PAD_SLOT_ID, dtype_name
from trtllm_replayssm.ops import conv1d_kernels as kernels
from trtllm_replayssm.ops.slots import live_rows
from trtllm_replayssm.ops.validate import check as _check

__all__ = ["conv1d_update", "conv1d_verify", "conv1d_commit", "conv1d_step", "conv1d_update_reference",
           "conv1d_verify_reference", "conv1d_commit_reference"]


def conv1d_step(state, x, weight, bias=None, activation=True):
    """state [b, C, k-1], x [b, C], weight [C, k] -> (y [b, C], new state). Inputs unchanged."""
    window = torch.cat([state, x[..., None]], dim=-1)
    y = (window * weight).sum(-1)
    if bias is not None:
        y = y + bias
    return (F.silu(y) if activation else y), window[..., 1:]


def conv1d_verify_reference(windows, x, weight, bias=None, activation=True, slot_idx=None, pad_slot_id=-1,
                            out=None):
    """windows [slots, C, k-1+T] (history in the first k-1 positions); x [b, T, C]. Writes the T inputs behind
    the history and returns y [b, T, C] (padding rows of `out` untouched)."""
    T = x.shape[1]
    k1 = weight.shape[-1] - 1
    if windows.shape[-1] != k1 + T:
        raise ValueError(f"conv window holds {windows.shape[-1]} inputs, expected k-1+T = {k1 + T}")
    y = torch.empty_like(x) if out is None else out
    for b, s in live_rows(slot_idx, x.shape[0], windows.shape[0], pad_slot_id):
        windows[s, :, k1:] = x[b].transpose(0, 1).to(windows.dtype)
        for i in range(T):
            yi, _ = conv1d_step(windows[s, :, i:k1 + i][None].float(), x[b, i][None].float(), weight.float(),
                                None if bias is None else bias.float(), activation)
            y[b, i] = yi[0].to(y.dtype)
    return y


def conv1d_update_reference(state, x, weight, bias=None, activation=True, slot_idx=None, pad_slot_id=-1,
                            out=None):
    """The standard decode step over a pool: state [slots, C, k-1] (the rows' slots shifted by one in place);
    x [b, C]. Returns y [b, C] (padding rows of `out` untouched). fp32 arithmetic, as the verify."""
    y = torch.empty_like(x) if out is None else out
    for b, s in live_rows(slot_idx, x.shape[0], state.shape[0], pad_slot_id):
        yb, new = conv1d_step(state[s][None].float(), x[b][None].float(), weight.float(),
                              None if bias is None else bias.float(), activation)
        y[b] = yb[0].to(y.dtype)
        state[s] = new[0].to(state.dtype)
    return y


def conv1d_commit_reference(windows, accepted, kernel_size, slot_idx=None, pad_slot_id=-1):
    """Keeps the last k-1 inputs of (history + accepted tokens) as the new history (a shift by the accepted
    count). Rows whose count is outside 1..T are left untouched, as the kernel leaves them (it reads the counts on
    the device and cannot raise; a count of 0, nothing accepted, would be the identity anyway)."""
    k1 = kernel_size - 1
    T = windows.shape[-1] - k1
    for b, s in live_rows(slot_idx, accepted.shape[0], windows.shape[0], pad_slot_id):
        a = int(accepted[b])
        if 1 <= a <= T:
            windows[s, :, :k1] = windows[s, :, a:a + k1].clone()


# ---- ops: validation, then the kernel (CUDA) or the reference (CPU) ----

_DTYPES = ", ".join(dtype_name(d) for d in DTYPE_CODES)


def _shape(t):
    return tuple(getattr(t, "shape", ()))


def _check_tensor(name, t, dim, device):
    _check(isinstance(t, torch.Tensor) and t.dim() == dim, f"{name} must be a {dim}-d tensor, got {_shape(t)}")
    _check(t.device == device, f"{name} is on {t.device}, expected {device}")
    _check(t.dtype in DTYPE_CODES, f"{name} has dtype {dtype_name(t.dtype)}; supported: {_DTYPES}")
    _check(t.numel() == 0 or t.stride(-1) == 1,
           f"{name} must be contiguous in its last dimension (stride {t.stride(-1)})")


def _check_slots(slot_idx, batch, num_slots, device):
    if slot_idx is None:
        _check(batch <= num_slots, f"batch={batch} exceeds the {num_slots} state slots and no slot_idx was given")
        return
    _check(isinstance(slot_idx, torch.Tensor) and slot_idx.dtype == torch.int32 and _shape(slot_idx) == (batch,),
           f"slot_idx must be int32 of shape {(batch,)}, got {dtype_name(getattr(slot_idx, 'dtype', None))} "
           f"{_shape(slot_idx)}")
    _check(slot_idx.device == device, f"slot_idx is on {slot_idx.device}, expected {device}")
    _check(slot_idx.is_contiguous(), "slot_idx must be contiguous")


def _check_conv(pool_name, pool, x, weight, bias, activation, slot_idx, out):
    """Checks shared by update and verify; returns k. pool [slots, C, width]; x [b, C] or [b, T, C]."""
    _check(isinstance(x, torch.Tensor), "x must be a tensor")
    dev = x.device
    _check_tensor(pool_name, pool, 3, dev)
    _check_tensor("x", x, x.dim(), dev)
    C = pool.shape[1]
    _check(isinstance(weight, torch.Tensor) and weight.dim() == 2 and weight.shape[0] == C,
           f"weight has shape {_shape(weight)}, expected [{C}, kernel_size] ({pool_name} has {C} channels)")
    k = weight.shape[1]
    _check(k in CONV1D_KERNEL_SIZES, f"kernel_size={k} (weight.shape[1]) is not supported; supported: "
                                     f"{', '.join(map(str, CONV1D_KERNEL_SIZES))}")
    _check(weight.device == dev, f"weight is on {weight.device}, expected {dev}")
    _check(weight.dtype in (torch.float32, x.dtype),
           f"weight has dtype {dtype_name(weight.dtype)}; supported: fp32 or x's dtype ({dtype_name(x.dtype)})")
    _check(weight.is_contiguous(), "weight must be contiguous")
    if bias is not None:
        _check(isinstance(bias, torch.Tensor) and _shape(bias) == (C,) and bias.dtype == weight.dtype,
               f"bias must have shape {(C,)} and weight's dtype {dtype_name(weight.dtype)}, got "
               f"{dtype_name(getattr(bias, 'dtype', None))} {_shape(bias)}")
        _check(bias.device == dev, f"bias is on {bias.device}, expected {dev}")
        _check(bias.is_contiguous(), "bias must be contiguous")
    _check(isinstance(activation, bool), f"activation must be a bool (SiLU or none), got {activation!r}")
    _check_slots(slot_idx, x.shape[0], pool.shape[0], dev)
    if out is not None:
        _check(isinstance(out, torch.Tensor) and _shape(out) == _shape(x) and out.dtype == x.dtype,
               f"out must have x's shape {_shape(x)} and dtype {dtype_name(x.dtype)}, got "
               f"{dtype_name(getattr(out, 'dtype', None))} {_shape(out)}")
        _check_tensor("out", out, x.dim(), dev)
    return k


def conv1d_update(state, x, weight, bias=None, activation=True, slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None):
    """One standard decode step of the causal conv1d. state [slots, C, k-1] (WRITTEN: the slot of every
    non-padding row, shifted by one with x appended); x [b, C]; weight [C, k]; bias [C] or None; activation: SiLU;
    slot_idx [b] int32 or None (row b uses slot b). Returns y [b, C] (`out` if given; padding rows untouched)."""
    k = _check_conv("state", state, x, weight, bias, activation, slot_idx, out)
    _check(x.dim() == 2 and x.shape[1] == state.shape[1],
           f"x has shape {_shape(x)}, expected [batch, {state.shape[1]}]")
    _check(state.shape[2] == k - 1, f"state holds {state.shape[2]} inputs per channel, expected k-1 = {k - 1}")
    y = torch.empty_like(x) if out is None else out
    if x.shape[0] == 0:
        return y
    if x.device.type != "cuda":
        return conv1d_update_reference(state, x, weight, bias, activation, slot_idx, pad_slot_id, y)
    kernels.launch(kernels.fill_params(kernels.UPDATE, state, x.shape[0], k, 1, x, weight, bias, y, activation,
                                       slot_idx, None, pad_slot_id), x.device)
    return y


def conv1d_verify(windows, x, weight, bias=None, activation=True, slot_idx=None, pad_slot_id=PAD_SLOT_ID,
                  out=None):
    """Speculative verify of T tokens. windows [slots, C, k-1+T] (committed history in the first k-1 positions;
    WRITTEN: the T inputs behind it, for every non-padding row's slot); x [b, T, C]. Returns y [b, T, C]."""
    k = _check_conv("windows", windows, x, weight, bias, activation, slot_idx, out)
    _check(x.dim() == 3 and x.shape[2] == windows.shape[1],
           f"x has shape {_shape(x)}, expected [batch, T, {windows.shape[1]}]")
    T = x.shape[1]
    _check(1 <= T <= CONV1D_MAX_TOKENS, f"T={T} (x.shape[1]) is out of range (1..{CONV1D_MAX_TOKENS})")
    _check(windows.shape[2] == k - 1 + T,
           f"conv window holds {windows.shape[2]} inputs, expected k-1+T = {k - 1 + T}")
    y = torch.empty_like(x) if out is None else out
    if x.shape[0] == 0:
        return y
    if x.device.type != "cuda":
        return conv1d_verify_reference(windows, x, weight, bias, activation, slot_idx, pad_slot_id, y)
    kernels.launch(kernels.fill_params(kernels.VERIFY, windows, x.shape[0], k, T, x, weight, bias, y, activation,
                                       slot_idx, None, pad_slot_id), x.device)
    return y


def conv1d_commit(windows, accepted, kernel_size, slot_idx=None, pad_slot_id=PAD_SLOT_ID):
    """Speculative commit: windows [slots, C, k-1+T] (WRITTEN: the first k-1 positions of every non-padding
    row's slot := positions a..a+k-2); accepted [b] int32 on the windows' device, counts a in 1..T. Rows with a
    count outside 1..T are left untouched (the counts stay on the device: no check, no sync)."""
    _check(isinstance(accepted, torch.Tensor), "accepted must be a tensor")
    dev = accepted.device
    _check_tensor("windows", windows, 3, dev)
    _check(accepted.dtype == torch.int32 and accepted.dim() == 1 and accepted.is_contiguous(),
           f"accepted must be a contiguous 1-d int32 tensor, got {dtype_name(accepted.dtype)} {_shape(accepted)}")
    _check(kernel_size in CONV1D_KERNEL_SIZES,
           f"kernel_size={kernel_size} is not supported; supported: {', '.join(map(str, CONV1D_KERNEL_SIZES))}")
    T = windows.shape[2] - (kernel_size - 1)
    _check(1 <= T <= CONV1D_MAX_TOKENS,
           f"windows hold {windows.shape[2]} inputs per channel: T = {T} is out of range (1..{CONV1D_MAX_TOKENS}) "
           f"for kernel_size={kernel_size}")
    batch = accepted.shape[0]
    _check_slots(slot_idx, batch, windows.shape[0], dev)
    if batch == 0:
        return
    if dev.type != "cuda":
        conv1d_commit_reference(windows, accepted, kernel_size, slot_idx, pad_slot_id)
        return
    kernels.launch(kernels.fill_params(kernels.COMMIT, windows, batch, kernel_size, T, slot_idx=slot_idx,
                                       accepted=accepted, pad_slot_id=pad_slot_id), dev)
