"""Gated DeltaNet (Qwen3.5 / Qwen3-Next) and KDA decode ops over a state pool.

Gating comes either precomputed (g, beta) or raw (a, b, A_log, dt_bias), as the fused serving kernels take it;
q and k are L2-normalised (use_qk_l2norm) and q scaled by K^-1/2 (or `scale`) before the recurrence.

CUDA tensors run the kernels (current stream, no synchronisation, capturable in a CUDA graph); CPU tensors run
the PyTorch reference with the same semantics. On CUDA the kernel prepares q, k and computes g, beta from raw
gates itself, so raw inputs pass straight through (no extra PyTorch kernels), with two exceptions that add a
small conversion: q or k in another dtype than v (prepared in PyTorch, as the reference does), and a, b (or
A_log, dt_bias) of two different dtypes. GDN and KDA (per-channel decay) both run on CUDA. Read copies on CUDA:
an fp32 checkpoint with fp16 / bf16 activations and an fp16, bf16 or fp8 copy, GDN only (y of a non-flush row
reads the copy; the correction u reads the checkpoint, so the recurrence is the same as without a copy); the
other combinations (nvfp4, KDA, ...) are refused on CUDA with a message naming them and run in the PyTorch
reference on the CPU. Inputs are validated before anything is touched; errors name the argument and its value.

In-place: conventional writes state[slot] of every non-padding row; replay writes the ring record and cursor of
every non-padding row and the checkpoint of flushing rows. Both write `out` (allocated when None) at non-padding
rows only. Slot indices of one call must be distinct.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import (DTYPE_CODES, GDN_KERNEL_READ_COPY_ACTS, GDN_KERNEL_READ_COPY_STATE,
                                     GDN_KERNEL_READ_FORMATS, PAD_SLOT_ID, GdnLayerShape, dtype_name)
from trtllm_replayssm.ops.gdn import kernels
from trtllm_replayssm.ops.gdn.reference import gdn_gating, prepare_qk
from trtllm_replayssm.ops.validate import check as _check
from trtllm_replayssm.ops.gdn.replay_reference import gdn_conventional_decode_reference, gdn_replay_decode_reference

__all__ = ["gdn_conventional_decode", "gdn_replay_decode"]

_KERNEL_DTYPES = ", ".join(dtype_name(d) for d in DTYPE_CODES)


def _check_cuda(shape: GdnLayerShape, v, g, beta, a, b, A_log, dt_bias, out, state):
    """What the kernels need beyond the reference: checked on CUDA only, before anything is written."""
    _check(state.dtype in DTYPE_CODES, f"state has dtype {dtype_name(state.dtype)}; supported: {_KERNEL_DTYPES}")
    _check(v.dtype in DTYPE_CODES, f"v has dtype {dtype_name(v.dtype)}; supported: {_KERNEL_DTYPES}")
    _check(state.is_contiguous(), "state must be contiguous")
    # v, out, the gates (g, beta or a, b) and q, k reach the kernel as given (the library checks q, k rows).
    for name, t in (("v", v), ("out", out), ("g", g), ("beta", beta), ("a", a), ("b", b)):
        if t is not None:
            _check(t.stride(-1) == 1, f"{name} must be contiguous in its last dimension (stride {t.stride(-1)})")
    # The library wants rows of v on 16 bytes (the kernel stages them with asynchronous copies).
    nbytes = v.element_size()
    _check(v.data_ptr() % 16 == 0 and all(s * nbytes % 16 == 0 for s in v.stride()[:2]),
           f"v rows must be 16-byte aligned (data_ptr % 16 = {v.data_ptr() % 16}, strides {tuple(v.stride()[:2])} "
           f"elements of {nbytes} bytes)")
    if A_log is not None:
        HV, K = shape.num_v_heads, shape.head_k_dim
        allowed = [(HV, 1), (HV, K)] if shape.per_channel_decay else [(HV,)]
        for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
            _check(tuple(t.shape) in allowed, f"{name} has shape {tuple(t.shape)}, expected one of {allowed}")
        for name, t in (("a", a), ("b", b), ("A_log", A_log), ("dt_bias", dt_bias)):
            _check(t.dtype in DTYPE_CODES, f"{name} has dtype {dtype_name(t.dtype)}; supported: {_KERNEL_DTYPES}")


def check_kernel_read_copy(shape: GdnLayerShape, cfg, kernel: str = "decode") -> None:
    """Refuses (NotImplementedError naming the value) a read copy the CUDA kernel does not implement; no GPU
    needed. The kernel reads an fp16 / bf16 / fp8 copy of an fp32 checkpoint with fp16 / bf16 activations, GDN only
    (config.GDN_KERNEL_READ_*, mirrored by plugins/capi/gdn_dispatch.cu and, for kernel="verify", by
    plugins/capi/gdn_verify_dispatch.cu: the two families read the same copies)."""
    fmt = cfg.read_format
    if fmt == "none":
        return
    where = "exists in the PyTorch reference only (CPU tensors)"
    if fmt not in GDN_KERNEL_READ_FORMATS:
        raise NotImplementedError(f"read_format={fmt}: the GDN {kernel} kernel reads the copy formats "
                                  f"{', '.join(GDN_KERNEL_READ_FORMATS)}; {fmt} {where}")
    if shape.per_channel_decay:
        raise NotImplementedError(f"read_format={fmt} with per_channel_decay (KDA): the KDA {kernel} kernel reads no "
                                  f"read copy; it {where}")
    state, act = dtype_name(cfg.state_dtype), dtype_name(cfg.act_dtype)
    if state != GDN_KERNEL_READ_COPY_STATE:
        raise NotImplementedError(f"read_format={fmt} with state_dtype={state}: the GDN {kernel} kernel reads copies "
                                  f"of an {GDN_KERNEL_READ_COPY_STATE} checkpoint only; this pair {where}")
    if act not in GDN_KERNEL_READ_COPY_ACTS:
        raise NotImplementedError(f"read_format={fmt} with act_dtype={act}: the GDN {kernel} kernel reads copies with "
                                  f"act_dtype {' or '.join(GDN_KERNEL_READ_COPY_ACTS)} only; this pair {where}")


def _kernel_inputs(shape: GdnLayerShape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale):
    """(q, k, g, beta, options of kernels.fill_params): raw q, k and raw gates pass through for the kernel to
    prepare (it follows reference.prepare_qk and gdn_gating, rounding the prepared q, k to v's dtype)."""
    opts = dict(per_channel_decay=shape.per_channel_decay)
    if q.dtype == k.dtype == v.dtype:
        s = shape.head_k_dim ** -0.5 if scale is None else float(scale)
        opts.update(qk_flags=(kernels.QK_L2NORM if use_qk_l2norm else 0) | (kernels.QK_SCALE if s != 1.0 else 0),
                    q_scale=s)
    else:  # the kernel reads q, k in v's dtype: prepare them here, as the reference does
        q, k = (t.to(v.dtype) for t in prepare_qk(q, k, use_qk_l2norm, scale))
    if g is None:
        opts.update(a=a, b=b if b.dtype == a.dtype else b.to(a.dtype), A_log=A_log,
                    dt_bias=dt_bias if dt_bias.dtype == A_log.dtype else dt_bias.to(A_log.dtype))
    else:
        g, beta = g.float(), beta.float()
    return q, k, g, beta, opts


def _prepare(shape: GdnLayerShape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx, out,
             state):
    """Validates the inputs (state: the tensor the step updates, for the CUDA checks). On CUDA returns the
    kernel's inputs (_kernel_inputs); elsewhere (q, k, g, beta, {}) as the recurrence reads them."""
    _check(isinstance(v, torch.Tensor) and v.dim() == 3, "v must be a tensor [batch, num_v_heads, head_v_dim]")
    n, dev = v.shape[0], v.device
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    for name, t, want in (("q", q, (n, H, K)), ("k", k, (n, H, K)), ("v", v, (n, HV, V))):
        _check(isinstance(t, torch.Tensor) and tuple(t.shape) == want,
               f"{name} has shape {tuple(getattr(t, 'shape', ()))}, expected {want}")
    named = (("q", q), ("k", k), ("g", g), ("beta", beta), ("a", a), ("b", b), ("A_log", A_log),
             ("dt_bias", dt_bias), ("slot_idx", slot_idx), ("out", out), ("state", state))
    for name, t in named:
        if isinstance(t, torch.Tensor):
            _check(t.device == dev, f"{name} is on {t.device}, expected {dev} (the device of v)")
    gate_shape = (n, HV, K) if shape.per_channel_decay else (n, HV)
    raw = [t is not None for t in (a, b, A_log, dt_bias)]
    _check((g is not None and beta is not None and not any(raw)) or (g is None and beta is None and all(raw)),
           "give either g and beta, or all of a, b, A_log and dt_bias")
    if g is None:
        _check(tuple(a.shape) == gate_shape, f"a has shape {tuple(a.shape)}, expected {gate_shape}")
        _check(tuple(b.shape) == (n, HV), f"b has shape {tuple(b.shape)}, expected {(n, HV)}")
    else:
        _check(tuple(g.shape) == gate_shape, f"g has shape {tuple(g.shape)}, expected {gate_shape}")
        _check(tuple(beta.shape) == (n, HV), f"beta has shape {tuple(beta.shape)}, expected {(n, HV)}")
    if slot_idx is not None:
        _check(slot_idx.dtype == torch.int32 and tuple(slot_idx.shape) == (n,),
               f"slot_idx must be int32 of shape {(n,)}, got {dtype_name(slot_idx.dtype)} {tuple(slot_idx.shape)}")
    else:
        _check(n <= state.shape[0], f"batch={n} exceeds the {state.shape[0]} state slots and no slot_idx was given")
    if out is not None:
        _check(tuple(out.shape) == (n, HV, V) and out.dtype == v.dtype, "out must have v's shape and dtype")
    if dev.type == "cuda":
        _check_cuda(shape, v, g, beta, a, b, A_log, dt_bias, out, state)
        return _kernel_inputs(shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale)
    if g is None:
        g, beta = gdn_gating(a, b, A_log, dt_bias)
    if not use_qk_l2norm and scale == 1.0 and q.dtype == k.dtype == v.dtype:
        qp, kp = q, k  # already prepared: launch nothing extra
    else:
        qp, kp = prepare_qk(q, k, use_qk_l2norm, scale)
    return qp.to(v.dtype), kp.to(v.dtype), g.float(), beta.float(), {}


def gdn_replay_decode(pool, q, k, v, *, g=None, beta=None, a=None, b=None, A_log=None, dt_bias=None,
                      use_qk_l2norm=True, scale=None, slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None):
    """One ReplaySSM decode step over a GdnStatePool. q, k [b, H, K]; v [b, HV, V]; g, beta [b, HV] (KDA: g
    [b, HV, K]) or raw a, b with A_log, dt_bias [HV]; slot_idx [b] int32 or None. Returns y [b, HV, V].

    Each row reads its slot's cursor on the device: rows with fewer than L-1 records take the output-only route
    and append their record (u, k, g); rows at L-1 records flush (rebuild and store the checkpoint, empty ring).
    A step of few rows (pool.flushes_every_row(batch), the latency route of config.py) flushes every row.
    """
    _check(isinstance(v, torch.Tensor) and v.dtype == pool.cfg.act_dtype,
           f"v has dtype {dtype_name(getattr(v, 'dtype', None))} but the pool's act_dtype is "
           f"{dtype_name(pool.cfg.act_dtype)}")
    _check(v.device == pool.device, f"v is on {v.device} but the pool is on {pool.device}")
    if v.device.type == "cuda":
        check_kernel_read_copy(pool.shape, pool.cfg)
    qp, kp, g, beta, opts = _prepare(pool.shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale,
                                     slot_idx, out, pool.checkpoint)
    y = torch.empty_like(v) if out is None else out
    if v.shape[0] == 0:  # an empty batch launches nothing
        return y
    if v.device.type != "cuda":
        return gdn_replay_decode_reference(pool, qp, kp, v, g, beta, slot_idx, pad_slot_id, y)
    p = kernels.fill_params(kernels.REPLAY, pool.checkpoint, qp, kp, v, g, beta, y, slot_idx, pad_slot_id,
                            pool.ring_u, pool.ring_k, pool.ring_g, pool.cursor, pool.buffer_len,
                            read_format=pool.cfg.read_format, read_state=pool.buffers.get("read_state"),
                            read_scale=pool.buffers.get("read_scale"), latency_route_bytes=pool.latency_route_bytes,
                            **opts)
    kernels.launch(p, v.device)
    return y


def gdn_conventional_decode(state, shape: GdnLayerShape, q, k, v, *, g=None, beta=None, a=None, b=None, A_log=None,
                            dt_bias=None, use_qk_l2norm=True, scale=None, slot_idx=None, pad_slot_id=PAD_SLOT_ID,
                            out=None):
    """One conventional decode step (load, update, store) on state [slots, HV, V, K] (a pool's checkpoint);
    arguments as gdn_replay_decode."""
    shape.validate()
    want = (shape.num_v_heads, shape.head_v_dim, shape.head_k_dim)
    _check(isinstance(state, torch.Tensor) and state.dim() == 4 and tuple(state.shape[1:]) == want,
           f"state has shape {tuple(getattr(state, 'shape', ()))}, expected [slots, *{want}]")
    qp, kp, g, beta, opts = _prepare(shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx,
                                     out, state)
    y = torch.empty_like(v) if out is None else out
    if v.shape[0] == 0:
        return y
    if v.device.type != "cuda":
        return gdn_conventional_decode_reference(state, qp, kp, v, g, beta, slot_idx, pad_slot_id, y)
    p = kernels.fill_params(kernels.CONVENTIONAL, state, qp, kp, v, g, beta, y, slot_idx, pad_slot_id, **opts)
    kernels.launch(p, v.device)
    return y


# The speculative verify ops (spec.py imports from this package, so they are imported last).
from trtllm_replayssm.ops.gdn.spec import replay_verify, snapshot_verify  # noqa: E402

__all__ += ["replay_verify", "snapshot_verify"]
