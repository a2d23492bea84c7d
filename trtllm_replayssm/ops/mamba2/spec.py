"""Mamba-2 speculative verify ops: ReplaySSM verify over a state pool, and the conventional snapshot path.

CUDA tensors run the kernels (current stream, no synchronisation, capturable in a CUDA graph); CPU tensors run
the PyTorch references (ops/mamba2/spec_reference.py, the specification). Inputs are validated before anything
is touched, and errors name the offending argument and value. The commits are family independent:
`ops.slots.spec_commit` (ReplaySSM) and `ops.slots.snapshot_commit` (snapshot path).

In-place: `replay_verify` writes the pool's ring records at positions h .. h+T-1 of every non-padding row, and
the checkpoint (and its read copy, if the pool keeps one) and cursor of rows with h + 2T > L (the flush folds the
committed records only); with a read copy the outputs read the copy (`check_verify_read_copy` lists the formats
the CUDA kernel reads);
`snapshot_verify` writes snapshots[slot, 0 .. T-1] of every non-padding row. Both write `out` (allocated when
None) at non-padding rows only. Slot indices of one call must be distinct.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import (MAMBA2_ACT_DTYPES, MAMBA2_STATE_DTYPES, MAMBA2_VERIFY_READ_COPY_ACTS,
                                     MAMBA2_VERIFY_READ_COPY_STATE, MAMBA2_VERIFY_READ_FORMATS, PAD_SLOT_ID,
                                     SPEC_MAX_WINDOW, SPEC_MIN_WINDOW, Mamba2LayerShape, dtype_name)
from trtllm_replayssm.ops.mamba2 import _check_tensor, spec_kernels
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import check_spec_window, live_rows
from trtllm_replayssm.ops.validate import check as _check

__all__ = ["replay_verify", "snapshot_verify", "check_verify_read_copy"]


def check_verify_read_copy(cfg) -> None:
    """Refuses (NotImplementedError naming the value) a read copy the CUDA verify kernel does not implement; no
    GPU needed. The kernel reads an fp16 / bf16 / fp8 copy of an fp32 checkpoint with fp16 / bf16 activations
    (config.MAMBA2_VERIFY_READ_*, mirrored by plugins/capi/mamba2_verify_dispatch.cu)."""
    fmt = cfg.read_format
    if fmt == "none":
        return
    where = "exists in the PyTorch reference only (CPU tensors)"
    if fmt not in MAMBA2_VERIFY_READ_FORMATS:
        raise NotImplementedError(f"read_format={fmt}: the verify kernel reads "
                                  f"{' / '.join(MAMBA2_VERIFY_READ_FORMATS)} copies; {fmt} {where}")
    state, act = dtype_name(cfg.state_dtype), dtype_name(cfg.act_dtype)
    if state != MAMBA2_VERIFY_READ_COPY_STATE:
        raise NotImplementedError(f"read_format={fmt} with state_dtype={state}: the verify kernel reads copies of "
                                  f"an {MAMBA2_VERIFY_READ_COPY_STATE} checkpoint only; this pair {where}")
    if act not in MAMBA2_VERIFY_READ_COPY_ACTS:
        raise NotImplementedError(f"read_format={fmt} with act_dtype={act}: the verify kernel reads copies with "
                                  f"act_dtype {' or '.join(MAMBA2_VERIFY_READ_COPY_ACTS)} only; this pair {where}")


def _validate_window(shape: Mamba2LayerShape, x, dt, B, C, A, D, z, dt_bias, slot_idx, out, num_slots):
    """Checks the window's inputs (x, z [b, T, H, P]; dt [b, T, H]; B, C [b, T, G, N]; A, D, dt_bias [H]).
    Returns T."""
    _check(isinstance(x, torch.Tensor) and x.dim() == 4, "x must be a tensor of shape [batch, T, nheads, head_dim]")
    b, T, dev, act = x.shape[0], x.shape[1], x.device, x.dtype
    _check(SPEC_MIN_WINDOW <= T <= SPEC_MAX_WINDOW,
           f"T={T} tokens per row (x.shape[1]) is out of range ({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW})")
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    _check(act in MAMBA2_ACT_DTYPES, f"x has dtype {dtype_name(act)}; supported activation dtypes: "
                                     f"{', '.join(dtype_name(d) for d in MAMBA2_ACT_DTYPES)}")
    _check_tensor("x", x, (b, T, H, P), act, dev)
    _check_tensor("dt", dt, (b, T, H), act, dev, inner_contiguous=False)
    _check_tensor("B", B, (b, T, G, N), act, dev)
    _check_tensor("C", C, (b, T, G, N), act, dev)
    _check_tensor("z", z, (b, T, H, P), act, dev, optional=True)
    for name, t in (("A", A), ("D", D), ("dt_bias", dt_bias)):
        _check_tensor(name, t, (H,), torch.float32, dev, optional=name != "A")
        if t is not None:
            _check(t.is_contiguous(), f"{name} must be contiguous")
    if slot_idx is None:
        _check(b <= num_slots, f"batch={b} exceeds the pool's {num_slots} slots and no slot_idx was given")
    else:
        _check_tensor("slot_idx", slot_idx, (b,), torch.int32, dev)
    _check_tensor("out", out, (b, T, H, P), act, dev, optional=True)
    if dev.type == "cuda":
        # The kernels copy rows of x, z, B and C with 8- and 16-byte copies.
        for name, t in (("x", x), ("z", z), ("B", B), ("C", C)):
            if t is None:
                continue
            nbytes = t.element_size()
            _check(t.data_ptr() % 16 == 0 and all(s * nbytes % 16 == 0 for s in t.stride()[:3]),
                   f"{name} rows must be 16-byte aligned (data_ptr % 16 = {t.data_ptr() % 16}, "
                   f"strides {tuple(t.stride()[:3])} elements of {nbytes} bytes)")
    return T


def replay_verify(pool, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True, slot_idx=None,
                  pad_slot_id=PAD_SLOT_ID, out=None):
    """ReplaySSM verify of T tokens per row over a Mamba2StatePool (T = x.shape[1], 2..8; L >= 2T).

    x, z [b, T, H, P]; dt [b, T, H] raw; B, C [b, T, G, N]; A, D, dt_bias [H] fp32; slot_idx [b] int32 or None.
    Returns y [b, T, H, P] in x's dtype: y[:, s] is the output of token s given tokens 0 .. s-1 of the window.
    The cursor history is not advanced: `ops.slots.spec_commit` adds each row's accepted count.
    """
    _check(isinstance(x, torch.Tensor) and x.dtype == pool.cfg.act_dtype,
           f"x has dtype {dtype_name(getattr(x, 'dtype', None))} but the pool's act_dtype is "
           f"{dtype_name(pool.cfg.act_dtype)}")
    _check(x.device == pool.device, f"x is on {x.device} but the pool is on {pool.device}")
    T = _validate_window(pool.shape, x, dt, B, C, A, D, z, dt_bias, slot_idx, out, pool.num_slots)
    check_spec_window(pool.buffer_len, T)
    y = torch.empty_like(x) if out is None else out
    if x.device.type != "cuda":
        return replay_verify_reference(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, pad_slot_id, y)
    check_verify_read_copy(pool.cfg)
    p = spec_kernels.fill_params(spec_kernels.REPLAY, pool.checkpoint, x, dt, B, C, A, D, z, dt_bias, dt_softplus,
                                 slot_idx, pad_slot_id, y, ring_x=pool.ring_x, ring_B=pool.ring_B,
                                 ring_dt=pool.ring_dt, cursor=pool.cursor, buffer_len=pool.buffer_len,
                                 read_format=pool.cfg.read_format, read_state=pool.buffers.get("read_state"),
                                 read_scale=pool.buffers.get("read_scale"))
    spec_kernels.launch(p, x.device)
    return y


def snapshot_verify(state, snapshots, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True,
                    slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None, ngroups=None):
    """The conventional speculative path: snapshots[slot, s] := the state after token s of the window, read
    from state [slots, H, P, N] (not modified). snapshots [slots, T, H, P, N] in the state's dtype; the other
    arguments as in replay_verify. Returns y [b, T, H, P]. `ops.slots.snapshot_commit` restores the accepted one.
    """
    _check(isinstance(state, torch.Tensor) and state.dim() == 4, "state must be a tensor [slots, H, P, N]")
    _check(state.dtype in MAMBA2_STATE_DTYPES, f"state has dtype {dtype_name(state.dtype)}; supported: "
                                               f"{', '.join(dtype_name(d) for d in MAMBA2_STATE_DTYPES)}")
    _check(state.is_contiguous(), "state must be contiguous")
    _check(isinstance(B, torch.Tensor) and B.dim() == 4, "B must be a tensor of shape [batch, T, ngroups, dstate]")
    shape = Mamba2LayerShape(state.shape[1], state.shape[2], state.shape[3], ngroups or B.shape[2])
    shape.validate()
    T = _validate_window(shape, x, dt, B, C, A, D, z, dt_bias, slot_idx, out, state.shape[0])
    _check(state.device == x.device, f"state is on {state.device}, x on {x.device}")
    _check(isinstance(snapshots, torch.Tensor), "snapshots must be a torch.Tensor")
    want = (state.shape[0], T, *state.shape[1:])
    _check(tuple(snapshots.shape) == want, f"snapshots has shape {tuple(snapshots.shape)}, expected {want}")
    _check(snapshots.dtype == state.dtype, f"snapshots has dtype {dtype_name(snapshots.dtype)}, expected "
                                           f"{dtype_name(state.dtype)} (the state's)")
    _check(snapshots.device == state.device, f"snapshots is on {snapshots.device}, expected {state.device}")
    _check(snapshots.is_contiguous(), "snapshots must be contiguous")
    y = torch.empty_like(x) if out is None else out
    if x.device.type != "cuda":
        y_ref = snapshot_verify_reference(state, snapshots, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx,
                                          pad_slot_id)
        for b, _ in live_rows(slot_idx, x.shape[0], state.shape[0], pad_slot_id):
            y[b] = y_ref[b]
        return y
    p = spec_kernels.fill_params(spec_kernels.SNAPSHOT, state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx,
                                 pad_slot_id, y, snapshots=snapshots)
    spec_kernels.launch(p, x.device)
    return y
