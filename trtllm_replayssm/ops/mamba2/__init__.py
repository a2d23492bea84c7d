"""Mamba-2 decode ops: conventional and ReplaySSM, on a state pool.

CUDA tensors run the kernels (current stream, no synchronisation, capturable in a CUDA graph); CPU tensors
run the PyTorch reference with the same semantics. Inputs are validated before anything is touched, and
errors name the offending argument and value.

In-place: `conventional_decode` writes state[slot] of every non-padding row; `replay_decode` writes the
pool's ring record and cursor of every non-padding row and the checkpoint (and the read copy, if the pool has
one) of flushing rows. Both write `out`
(allocated when None) at non-padding rows only. Slot indices of one call must be distinct.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import (MAMBA2_ACT_DTYPES, MAMBA2_KERNEL_READ_COPIES, MAMBA2_STATE_DTYPES,
                                     PAD_SLOT_ID, Mamba2LayerShape, dtype_name)
from trtllm_replayssm.ops.mamba2 import kernels
from trtllm_replayssm.ops.validate import check as _check
from trtllm_replayssm.ops.mamba2.replay_reference import (conventional_decode_reference,
                                                          replay_decode_reference)

__all__ = ["conventional_decode", "replay_decode"]


def _check_tensor(name, t, shape, dtype, device, inner_contiguous=True, optional=False):
    if t is None:
        _check(optional, f"{name} is required")
        return
    _check(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
    _check(tuple(t.shape) == tuple(shape), f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    _check(t.dtype == dtype, f"{name} has dtype {dtype_name(t.dtype)}, expected {dtype_name(dtype)}")
    _check(t.device == device, f"{name} is on {t.device}, expected {device} (the device of x)")
    if inner_contiguous and t.dim() and t.shape[-1] > 1:
        _check(t.stride(-1) == 1, f"{name} must be contiguous in its last dimension (stride {t.stride(-1)})")


def _validate_inputs(shape: Mamba2LayerShape, x, dt, B, C, A, D, z, dt_bias, slot_idx, out, num_slots):
    _check(isinstance(x, torch.Tensor) and x.dim() == 3, "x must be a tensor of shape [batch, nheads, head_dim]")
    b, dev, act = x.shape[0], x.device, x.dtype
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    _check(act in MAMBA2_ACT_DTYPES, f"x has dtype {dtype_name(act)}; supported activation dtypes: "
                                     f"{', '.join(dtype_name(d) for d in MAMBA2_ACT_DTYPES)}")
    _check_tensor("x", x, (b, H, P), act, dev)
    _check_tensor("dt", dt, (b, H), act, dev, inner_contiguous=False)
    _check_tensor("B", B, (b, G, N), act, dev)
    _check_tensor("C", C, (b, G, N), act, dev)
    _check_tensor("z", z, (b, H, P), act, dev, optional=True)
    for name, t in (("A", A), ("D", D), ("dt_bias", dt_bias)):
        _check_tensor(name, t, (H,), torch.float32, dev, optional=name != "A")
        if t is not None:
            _check(t.is_contiguous(), f"{name} must be contiguous")
    if slot_idx is None:
        _check(b <= num_slots, f"batch={b} exceeds the pool's {num_slots} slots and no slot_idx was given")
    else:
        _check_tensor("slot_idx", slot_idx, (b,), torch.int32, dev)
    _check_tensor("out", out, (b, H, P), act, dev, optional=True)
    if dev.type == "cuda":
        # The kernels copy rows of x, z, B and C with 16-byte bulk copies.
        for name, t in (("x", x), ("z", z), ("B", B), ("C", C)):
            if t is None:
                continue
            nbytes = t.element_size()
            _check(t.data_ptr() % 16 == 0 and all(s * nbytes % 16 == 0 for s in t.stride()[:2]),
                   f"{name} rows must be 16-byte aligned (data_ptr % 16 = {t.data_ptr() % 16}, "
                   f"strides {tuple(t.stride()[:2])} elements of {nbytes} bytes)")


def conventional_decode(state, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True,
                        slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None, ngroups=None):
    """One conventional decode step (load, update, store) on `state` [slots, H, P, N] (a pool's checkpoint).

    x, z [b, H, P]; dt [b, H] raw; B, C [b, G, N]; A, D, dt_bias [H] fp32; slot_idx [b] int32 or None.
    Returns y [b, H, P] in x's dtype.
    """
    _check(isinstance(state, torch.Tensor) and state.dim() == 4, "state must be a tensor [slots, H, P, N]")
    _check(state.dtype in MAMBA2_STATE_DTYPES, f"state has dtype {dtype_name(state.dtype)}; supported: "
                                               f"{', '.join(dtype_name(d) for d in MAMBA2_STATE_DTYPES)}")
    _check(state.is_contiguous(), "state must be contiguous")
    _check(isinstance(B, torch.Tensor) and B.dim() == 3, "B must be a tensor of shape [batch, ngroups, dstate]")
    shape = Mamba2LayerShape(state.shape[1], state.shape[2], state.shape[3], ngroups or B.shape[1])
    shape.validate()
    _validate_inputs(shape, x, dt, B, C, A, D, z, dt_bias, slot_idx, out, state.shape[0])
    _check(state.device == x.device, f"state is on {state.device}, x on {x.device}")
    y = torch.empty_like(x) if out is None else out
    if x.device.type != "cuda":
        return conventional_decode_reference(state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx,
                                             pad_slot_id, y)
    p = kernels.fill_params(kernels.CONVENTIONAL, state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx,
                            pad_slot_id, y)
    kernels.launch(p, x.device)
    return y


def replay_decode(pool, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True, slot_idx=None,
                  pad_slot_id=PAD_SLOT_ID, out=None):
    """One ReplaySSM decode step over a Mamba2StatePool; arguments as in conventional_decode.

    Each row reads its slot's cursor on the device: rows with fewer than L-1 records take the output-only
    route and append their record; rows at L-1 records flush (rebuild and store the checkpoint, empty ring).
    A step of few rows (pool.flushes_every_row(batch), the latency route of config.py) flushes every row.
    """
    _check(x.dtype == pool.cfg.act_dtype if isinstance(x, torch.Tensor) else False,
           f"x has dtype {dtype_name(getattr(x, 'dtype', None))} but the pool's act_dtype is "
           f"{dtype_name(pool.cfg.act_dtype)}")
    _check(x.device == pool.device, f"x is on {x.device} but the pool is on {pool.device}")
    _validate_inputs(pool.shape, x, dt, B, C, A, D, z, dt_bias, slot_idx, out, pool.num_slots)
    y = torch.empty_like(x) if out is None else out
    if x.device.type != "cuda":
        return replay_decode_reference(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, pad_slot_id, y)
    fmt = pool.cfg.read_format
    state = dtype_name(pool.cfg.state_dtype)
    if fmt != "none" and (state, fmt) not in MAMBA2_KERNEL_READ_COPIES:
        pairs = ", ".join(f"({s}, {f})" for s, f in MAMBA2_KERNEL_READ_COPIES)
        raise NotImplementedError(f"read_format={fmt} with state_dtype={state}: the CUDA kernel reads the pairs "
                                  f"{pairs}; this one exists in the PyTorch reference only so far (CPU tensors)")
    p = kernels.fill_params(kernels.REPLAY, pool.checkpoint, x, dt, B, C, A, D, z, dt_bias, dt_softplus,
                            slot_idx, pad_slot_id, y, pool.ring_x, pool.ring_B, pool.ring_dt, pool.cursor,
                            pool.buffer_len, fmt, pool.buffers.get("read_state"), pool.buffers.get("read_scale"),
                            pool.buffers.get("read_block_scale"), pool.latency_route_bytes)
    kernels.launch(p, x.device)
    return y


# The speculative verify ops (spec.py uses _check_tensor above, so they are imported last).
from trtllm_replayssm.ops.mamba2.spec import replay_verify, snapshot_verify  # noqa: E402

__all__ += ["replay_verify", "snapshot_verify"]
