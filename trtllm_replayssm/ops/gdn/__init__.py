"""Gated DeltaNet (Qwen3.5 / Qwen3-Next) and KDA decode ops over a state pool.

Gating comes either precomputed (g, beta) or raw (a, b, A_log, dt_bias), as the fused serving kernels take it;
q and k are L2-normalised (use_qk_l2norm) and q scaled by K^-1/2 (or `scale`) before the recurrence. CPU tensors
run the PyTorch reference; the GPU kernels are not written yet, and CUDA tensors are refused with that message.
In-place: the pool (replay) or `state` (conventional) rows of non-padding rows; `out` at those rows.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import PAD_SLOT_ID, GdnLayerShape, dtype_name
from trtllm_replayssm.ops.gdn.reference import gdn_gating, prepare_qk
from trtllm_replayssm.ops.validate import check as _check
from trtllm_replayssm.ops.gdn.replay_reference import gdn_conventional_decode_reference, gdn_replay_decode_reference

__all__ = ["gdn_conventional_decode", "gdn_replay_decode"]


def _prepare(shape: GdnLayerShape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx, out):
    """Validates the inputs and returns (q, k, g, beta) as the recurrence reads them."""
    _check(isinstance(v, torch.Tensor) and v.dim() == 3, "v must be a tensor [batch, num_v_heads, head_v_dim]")
    n, dev = v.shape[0], v.device
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    if dev.type == "cuda":
        raise NotImplementedError("GDN decode kernels are not implemented yet: pass CPU tensors (PyTorch reference)")
    for name, t, want in (("q", q, (n, H, K)), ("k", k, (n, H, K)), ("v", v, (n, HV, V))):
        _check(isinstance(t, torch.Tensor) and tuple(t.shape) == want,
               f"{name} has shape {tuple(getattr(t, 'shape', ()))}, expected {want}")
        _check(t.device == dev, f"{name} is on {t.device}, expected {dev}")
    gate_shape = (n, HV, K) if shape.per_channel_decay else (n, HV)
    raw = [t is not None for t in (a, b, A_log, dt_bias)]
    _check((g is not None and beta is not None and not any(raw)) or (g is None and beta is None and all(raw)),
           "give either g and beta, or all of a, b, A_log and dt_bias")
    if g is None:
        _check(tuple(a.shape) == gate_shape, f"a has shape {tuple(a.shape)}, expected {gate_shape}")
        _check(tuple(b.shape) == (n, HV), f"b has shape {tuple(b.shape)}, expected {(n, HV)}")
        g, beta = gdn_gating(a, b, A_log, dt_bias)
    _check(tuple(g.shape) == gate_shape, f"g has shape {tuple(g.shape)}, expected {gate_shape}")
    _check(tuple(beta.shape) == (n, HV), f"beta has shape {tuple(beta.shape)}, expected {(n, HV)}")
    if slot_idx is not None:
        _check(slot_idx.dtype == torch.int32 and tuple(slot_idx.shape) == (n,),
               f"slot_idx must be int32 of shape {(n,)}, got {dtype_name(slot_idx.dtype)} {tuple(slot_idx.shape)}")
    if out is not None:
        _check(tuple(out.shape) == (n, HV, V) and out.dtype == v.dtype, "out must have v's shape and dtype")
    qp, kp = prepare_qk(q, k, use_qk_l2norm, scale)
    return qp.to(v.dtype), kp.to(v.dtype), g.float(), beta.float()


def gdn_replay_decode(pool, q, k, v, *, g=None, beta=None, a=None, b=None, A_log=None, dt_bias=None,
                      use_qk_l2norm=True, scale=None, slot_idx=None, pad_slot_id=PAD_SLOT_ID, out=None):
    """One ReplaySSM decode step over a GdnStatePool. q, k [b, H, K]; v [b, HV, V]. Returns y [b, HV, V]."""
    _check(v.dtype == pool.cfg.act_dtype, f"v has dtype {dtype_name(v.dtype)} but the pool's act_dtype is "
                                          f"{dtype_name(pool.cfg.act_dtype)}")
    if slot_idx is None:
        _check(v.shape[0] <= pool.num_slots, f"batch={v.shape[0]} exceeds the pool's {pool.num_slots} slots "
                                             f"and no slot_idx was given")
    qp, kp, g, beta = _prepare(pool.shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx, out)
    return gdn_replay_decode_reference(pool, qp, kp, v, g, beta, slot_idx, pad_slot_id, out)


def gdn_conventional_decode(state, shape: GdnLayerShape, q, k, v, *, g=None, beta=None, a=None, b=None, A_log=None,
                            dt_bias=None, use_qk_l2norm=True, scale=None, slot_idx=None, pad_slot_id=PAD_SLOT_ID,
                            out=None):
    """One conventional decode step on state [slots, HV, V, K]; arguments as gdn_replay_decode."""
    shape.validate()
    want = (shape.num_v_heads, shape.head_v_dim, shape.head_k_dim)
    _check(tuple(state.shape[1:]) == want, f"state has shape {tuple(state.shape)}, expected [slots, *{want}]")
    qp, kp, g, beta = _prepare(shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, slot_idx, out)
    return gdn_conventional_decode_reference(state, qp, kp, v, g, beta, slot_idx, pad_slot_id, out)
