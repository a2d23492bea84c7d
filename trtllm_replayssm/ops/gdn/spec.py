"""Gated DeltaNet speculative verify ops: ReplaySSM verify over a GdnStatePool, and the conventional snapshot path.

Gating and q/k preparation as the decode ops (ops/gdn/__init__.py): precomputed (g, beta) or raw (a, b, A_log,
dt_bias); q and k L2-normalised (use_qk_l2norm) and q scaled by K^-1/2 (or `scale`) in PyTorch before the kernel.
CUDA tensors run the kernels (current stream, no synchronisation, capturable in a CUDA graph); CPU tensors run the
PyTorch references (ops/gdn/spec_reference.py, the specification). Not on CUDA (refused with a message saying so):
KDA (per-channel decay), and read copies other than those `ops.gdn.check_kernel_read_copy` lists (an fp16 / bf16 /
fp8 copy of an fp32 checkpoint with fp16 / bf16 activations; the verify kernel reads the decode kernel's list).
Inputs are validated before anything is touched; errors name
the argument and its value. The commits are family independent: `ops.slots.spec_commit` (ReplaySSM) and
`ops.slots.snapshot_commit` (snapshot path).

In-place: `replay_verify` writes the pool's ring records at positions h .. h+T-1 of every non-padding row, and the
checkpoint (and its read copy, if the pool keeps one) and cursor of rows with h + 2T > L (the flush folds the
committed records only; with a read copy y reads S0 q from the copy, u reads the checkpoint); `snapshot_verify`
writes snapshots[slot, 0 .. T-1] of every non-padding row. Both write `out` (allocated when None) at non-padding
rows only. Slot indices of one call must be distinct.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import (DTYPE_CODES, PAD_SLOT_ID, SPEC_MAX_WINDOW, SPEC_MIN_WINDOW, GdnLayerShape,
                                     dtype_name)
from trtllm_replayssm.ops.gdn import check_kernel_read_copy, spec_kernels
from trtllm_replayssm.ops.gdn.reference import gdn_gating, prepare_qk
from trtllm_replayssm.ops.gdn.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import check_spec_window, live_rows
from trtllm_replayssm.ops.validate import check as _check

__all__ = ["replay_verify", "snapshot_verify"]

_KERNEL_DTYPES = ", ".join(dtype_name(d) for d in DTYPE_CODES)


def _shape_of(t):
    return tuple(getattr(t, "shape", ()))


def _rows_aligned(t) -> bool:
    """Rows of t [b, T, heads, dim] start on 16 bytes (pointer and the three outer strides)."""
    nbytes = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s * nbytes % 16 == 0 for s in t.stride()[:3])


def _prepare_window(shape: GdnLayerShape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx,
                    out, state, buffer_len=None):
    """Validates a window's inputs (q, k [n, T, H, K]; v [n, T, HV, V]; g [n, T, HV] (KDA [n, T, HV, K]), beta
    [n, T, HV], or raw a, b with A_log, dt_bias; state: the tensor the kernels read, for the CUDA checks;
    buffer_len: the ring length the window must fit, replay only) and returns (q, k, g, beta) as the recurrence
    reads them: q, k in v's dtype, g and beta in fp32."""
    _check(isinstance(v, torch.Tensor) and v.dim() == 4, "v must be a tensor [batch, T, num_v_heads, head_v_dim]")
    n, T, dev = v.shape[0], v.shape[1], v.device
    _check(SPEC_MIN_WINDOW <= T <= SPEC_MAX_WINDOW,
           f"T={T} tokens per row (v.shape[1]) is out of range ({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW})")
    if buffer_len is not None:
        check_spec_window(buffer_len, T)
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    for name, t, want in (("q", q, (n, T, H, K)), ("k", k, (n, T, H, K)), ("v", v, (n, T, HV, V))):
        _check(isinstance(t, torch.Tensor) and tuple(t.shape) == want,
               f"{name} has shape {_shape_of(t)}, expected {want}")
    named = (("q", q), ("k", k), ("g", g), ("beta", beta), ("a", a), ("b", b), ("A_log", A_log),
             ("dt_bias", dt_bias), ("slot_idx", slot_idx), ("out", out), ("state", state))
    for name, t in named:
        if isinstance(t, torch.Tensor):
            _check(t.device == dev, f"{name} is on {t.device}, expected {dev} (the device of v)")
    gate_shape = (n, T, HV, K) if shape.per_channel_decay else (n, T, HV)
    raw = [t is not None for t in (a, b, A_log, dt_bias)]
    _check((g is not None and beta is not None and not any(raw)) or (g is None and beta is None and all(raw)),
           "give either g and beta, or all of a, b, A_log and dt_bias")
    if g is None:
        _check(_shape_of(a) == gate_shape, f"a has shape {_shape_of(a)}, expected {gate_shape}")
        _check(_shape_of(b) == (n, T, HV), f"b has shape {_shape_of(b)}, expected {(n, T, HV)}")
    else:
        _check(_shape_of(g) == gate_shape, f"g has shape {_shape_of(g)}, expected {gate_shape}")
        _check(_shape_of(beta) == (n, T, HV), f"beta has shape {_shape_of(beta)}, expected {(n, T, HV)}")
    if slot_idx is not None:
        _check(isinstance(slot_idx, torch.Tensor) and slot_idx.dtype == torch.int32 and _shape_of(slot_idx) == (n,),
               f"slot_idx must be int32 of shape {(n,)}, got {dtype_name(getattr(slot_idx, 'dtype', None))} "
               f"{_shape_of(slot_idx)}")
    else:
        _check(n <= state.shape[0], f"batch={n} exceeds the {state.shape[0]} state slots and no slot_idx was given")
    if out is not None:
        _check(isinstance(out, torch.Tensor) and tuple(out.shape) == (n, T, HV, V) and out.dtype == v.dtype,
               f"out must have v's shape {(n, T, HV, V)} and dtype {dtype_name(v.dtype)}")
    cuda = dev.type == "cuda"
    if cuda:
        if shape.per_channel_decay:
            raise NotImplementedError("KDA verify kernels are not implemented yet; pass CPU tensors (PyTorch "
                                      "reference)")
        _check(state.dtype in DTYPE_CODES, f"state has dtype {dtype_name(state.dtype)}; supported: {_KERNEL_DTYPES}")
        _check(v.dtype in DTYPE_CODES, f"v has dtype {dtype_name(v.dtype)}; supported: {_KERNEL_DTYPES}")
        _check(state.is_contiguous(), "state must be contiguous")
        for name, t in (("v", v), ("out", out), ("g", g), ("beta", beta)):
            if t is not None:
                _check(t.stride(-1) == 1, f"{name} must be contiguous in its last dimension (stride {t.stride(-1)})")
        nbytes = v.element_size()
        _check(_rows_aligned(v), f"v rows must be 16-byte aligned (data_ptr % 16 = {v.data_ptr() % 16}, strides "
                                 f"{tuple(v.stride()[:3])} elements of {nbytes} bytes)")
    if g is None:
        g, beta = gdn_gating(a, b, A_log, dt_bias)
    passthrough = not use_qk_l2norm and scale == 1.0 and q.dtype == k.dtype == v.dtype
    if passthrough and (not cuda or (_rows_aligned(q) and _rows_aligned(k))):
        qp, kp = q, k  # already prepared (and, on CUDA, rows aligned as the kernel reads them): no copy
    else:  # fresh contiguous copies: rows aligned whatever the layout of the inputs
        qp, kp = (t.to(v.dtype).contiguous() for t in prepare_qk(q, k, use_qk_l2norm, scale))
    return qp.to(v.dtype), kp.to(v.dtype), g.float(), beta.float()


def replay_verify(pool, q, k, v, g=None, beta=None, *, a=None, b=None, A_log=None, dt_bias=None, use_qk_l2norm=True,
                  scale=None, slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None):
    """ReplaySSM verify of T tokens per row over a GdnStatePool (T = v.shape[1], 2..8; L >= 2T).

    q, k [b, T, H, K]; v [b, T, HV, V]; g, beta [b, T, HV] (KDA: g [b, T, HV, K]) or raw a, b [b, T, HV] with
    A_log, dt_bias [HV]; slot_idx [b] int32 or None. Returns y [b, T, HV, V] in v's dtype: y[:, i] is the output
    of token i given tokens 0 .. i-1 of the window. The cursor history is not advanced: `ops.slots.spec_commit`
    adds each row's accepted count.
    """
    _check(isinstance(v, torch.Tensor) and v.dtype == pool.cfg.act_dtype,
           f"v has dtype {dtype_name(getattr(v, 'dtype', None))} but the pool's act_dtype is "
           f"{dtype_name(pool.cfg.act_dtype)}")
    _check(v.device == pool.device, f"v is on {v.device} but the pool is on {pool.device}")
    if v.device.type == "cuda":
        check_kernel_read_copy(pool.shape, pool.cfg, kernel="verify")
    qp, kp, g, beta = _prepare_window(pool.shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale,
                                      slot_idx, out, pool.checkpoint, pool.buffer_len)
    y = torch.empty_like(v) if out is None else out
    if v.shape[0] == 0:  # an empty batch launches nothing
        return y
    if v.device.type != "cuda":
        return replay_verify_reference(pool, qp, kp, v, g, beta, slot_idx, pad_slot_id, y)
    p = spec_kernels.fill_params(spec_kernels.REPLAY, pool.checkpoint, qp, kp, v, g, beta, y, slot_idx, pad_slot_id,
                                 ring_u=pool.ring_u, ring_k=pool.ring_k, ring_g=pool.ring_g, cursor=pool.cursor,
                                 buffer_len=pool.buffer_len, read_format=pool.cfg.read_format,
                                 read_state=pool.buffers.get("read_state"), read_scale=pool.buffers.get("read_scale"))
    spec_kernels.launch(p, v.device)
    return y


def snapshot_verify(state, snapshots, q, k, v, g=None, beta=None, *, a=None, b=None, A_log=None, dt_bias=None,
                    use_qk_l2norm=True, scale=None, slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None):
    """The conventional speculative path: snapshots[slot, i] := the state after token i of the window, from state
    [slots, HV, V, K] (not modified). snapshots [slots, T, HV, V, K] in the state's dtype; the other arguments as
    in replay_verify. Returns y [b, T, HV, V]. `ops.slots.snapshot_commit` restores the accepted one.
    """
    _check(isinstance(state, torch.Tensor) and state.dim() == 4, "state must be a tensor [slots, HV, V, K]")
    _check(isinstance(q, torch.Tensor) and q.dim() == 4, "q must be a tensor [batch, T, num_k_heads, head_k_dim]")
    _check(isinstance(v, torch.Tensor) and v.dim() == 4, "v must be a tensor [batch, T, num_v_heads, head_v_dim]")
    per_channel = (g if g is not None else a) is not None and (g if g is not None else a).dim() == 4
    shape = GdnLayerShape(q.shape[2], v.shape[2], q.shape[3], v.shape[3], per_channel_decay=per_channel)
    shape.validate()
    want_state = (shape.num_v_heads, shape.head_v_dim, shape.head_k_dim)
    _check(tuple(state.shape[1:]) == want_state,
           f"state has shape {tuple(state.shape)}, expected [slots, *{want_state}] (from q and v)")
    qp, kp, g, beta = _prepare_window(shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx,
                                      out, state)
    T = v.shape[1]
    want = (state.shape[0], T, *state.shape[1:])
    _check(isinstance(snapshots, torch.Tensor) and tuple(snapshots.shape) == want,
           f"snapshots has shape {_shape_of(snapshots)}, expected {want}")
    _check(snapshots.dtype == state.dtype, f"snapshots has dtype {dtype_name(snapshots.dtype)}, expected "
                                           f"{dtype_name(state.dtype)} (the state's)")
    _check(snapshots.device == state.device, f"snapshots is on {snapshots.device}, expected {state.device}")
    _check(snapshots.is_contiguous(), "snapshots must be contiguous")
    y = torch.empty_like(v) if out is None else out
    if v.shape[0] == 0:
        return y
    if v.device.type != "cuda":
        y_ref = snapshot_verify_reference(state, snapshots, qp, kp, v, g, beta, slot_idx, pad_slot_id)
        for row, _ in live_rows(slot_idx, v.shape[0], state.shape[0], pad_slot_id):
            y[row] = y_ref[row]
        return y
    p = spec_kernels.fill_params(spec_kernels.SNAPSHOT, state, qp, kp, v, g, beta, y, slot_idx, pad_slot_id,
                                 snapshots=snapshots)
    spec_kernels.launch(p, v.device)
    return y
