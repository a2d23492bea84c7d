"""Binding of the Gated DeltaNet decode kernels: fills rssm_gdn_decode_params (one host function) and calls the
C ABI on the current CUDA stream. No synchronisation, no allocation: usable inside CUDA graph capture.

Libraries built before the GDN kernels lack the rssm_gdn_* symbols: importing this module still works, and
calls raise a KernelError saying to rebuild.
"""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES, READ_FORMAT_CODES

CONVENTIONAL, REPLAY = 0, 1  # rssm_gdn_mode
QK_L2NORM, QK_SCALE = 1, 2  # rssm_gdn_qk_flags
GATES_PRECOMPUTED, GATES_RAW = 0, 1  # rssm_gdn_gate_mode

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p


class GdnDecodeParams(ctypes.Structure):
    """Mirror of rssm_gdn_decode_params (plugins/include/replayssm/gdn/params.h), field for field; every
    pointer (float*, int32_t* included) as c_void_p, which has the same size and alignment. The size is
    checked against the library on every call."""

    _fields_ = [(n, _i32) for n in ("batch", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim",
                                    "buffer_len", "num_slots", "pad_slot_id", "mode", "state_dtype",
                                    "act_dtype")]
    _fields_ += [(n, _ptr) for n in ("state", "ring_u", "ring_k", "ring_g", "cursor", "slot_idx", "q", "k", "v",
                                     "g", "beta", "y")]
    _fields_ += [(n, _i64) for n in ("q_batch_stride", "q_head_stride", "k_batch_stride", "k_head_stride",
                                     "v_batch_stride", "v_head_stride", "g_batch_stride", "beta_batch_stride",
                                     "y_batch_stride", "y_head_stride")]
    _fields_ += [("per_channel_decay", _i32), ("qk_flags", _i32), ("q_scale", ctypes.c_float), ("gate_mode", _i32),
                 ("gate_dtype", _i32), ("gate_param_dtype", _i32)]
    _fields_ += [(n, _ptr) for n in ("a", "b", "A_log", "dt_bias")]
    _fields_ += [(n, _i64) for n in ("g_head_stride", "a_batch_stride", "a_head_stride", "b_batch_stride",
                                     "A_log_head_stride", "A_log_k_stride", "dt_bias_head_stride",
                                     "dt_bias_k_stride")]
    _fields_ += [("read_format", _i32), ("read_state", _ptr), ("read_scale", _ptr)]
    _fields_ += [("latency_route_bytes", _i64)]


def _ptr_of(t):
    return None if t is None else t.data_ptr()


def _param_strides(t, per_channel_decay):
    """(head, channel) element strides of A_log / dt_bias: [HV] per head, or (KDA) [HV, 1] per head or [HV, K]
    per channel."""
    if t.dim() == 1:
        return t.stride(0), 0
    return t.stride(0), t.stride(1) if per_channel_decay and t.shape[1] > 1 else 0


def fill_params(mode, state, q, k, v, g, beta, y, slot_idx=None, pad_slot_id=-1, ring_u=None, ring_k=None,
                ring_g=None, cursor=None, buffer_len=1, *, qk_flags=0, q_scale=1.0, per_channel_decay=False,
                a=None, b=None, A_log=None, dt_bias=None, read_format="none", read_state=None,
                read_scale=None, latency_route_bytes=0) -> GdnDecodeParams:
    """The params of one step. state [slots, HV, V, K] (the pool's checkpoint in replay); q, k [b, H, K] (act
    dtype; prepared unless qk_flags), v, y [b, HV, V] (act dtype); either g, beta fp32 ([b, HV], KDA g [b, HV, K];
    heads / channels contiguous) or the raw gates a [b, HV] (KDA [b, HV, K]), b [b, HV] in one dtype and A_log,
    dt_bias [HV] (KDA [HV, 1] or [HV, K]) in one dtype; strides are taken from the tensors (in elements). Conventional
    mode leaves the ring pointers NULL and buffer_len 1. read_format (a key of READ_FORMAT_CODES) with its buffers
    read_state / read_scale (replay only; the pool's buffers of the same names): y of a non-flush row reads the
    copy, flush rows rewrite it."""
    p = GdnDecodeParams()
    p.batch, p.num_k_heads, p.head_k_dim = q.shape[0], q.shape[1], q.shape[2]
    p.num_v_heads, p.head_v_dim = v.shape[1], v.shape[2]
    p.buffer_len, p.num_slots, p.pad_slot_id, p.mode = buffer_len, state.shape[0], pad_slot_id, mode
    p.state_dtype, p.act_dtype = DTYPE_CODES[state.dtype], DTYPE_CODES[v.dtype]
    for name, t in (("state", state), ("ring_u", ring_u), ("ring_k", ring_k), ("ring_g", ring_g),
                    ("cursor", cursor), ("slot_idx", slot_idx), ("q", q), ("k", k), ("v", v), ("g", g),
                    ("beta", beta), ("y", y)):
        setattr(p, name, _ptr_of(t))
    for name, t in (("q", q), ("k", k), ("v", v), ("y", y)):
        setattr(p, f"{name}_batch_stride", t.stride(0))
        setattr(p, f"{name}_head_stride", t.stride(1))
    p.per_channel_decay, p.qk_flags, p.q_scale = int(per_channel_decay), qk_flags, q_scale
    p.read_format = READ_FORMAT_CODES[read_format]
    p.read_state, p.read_scale = _ptr_of(read_state), _ptr_of(read_scale)
    p.latency_route_bytes = latency_route_bytes  # replay: the latency route's limit (params.h, config.py)
    if g is not None:
        p.gate_mode = GATES_PRECOMPUTED
        p.g_batch_stride, p.beta_batch_stride = g.stride(0), beta.stride(0)
        p.g_head_stride = g.stride(1) if per_channel_decay else 0
    else:
        p.gate_mode = GATES_RAW
        p.gate_dtype, p.gate_param_dtype = DTYPE_CODES[a.dtype], DTYPE_CODES[A_log.dtype]
        p.a, p.b, p.A_log, p.dt_bias = (t.data_ptr() for t in (a, b, A_log, dt_bias))
        p.a_batch_stride, p.a_head_stride, p.b_batch_stride = a.stride(0), a.stride(1), b.stride(0)
        p.A_log_head_stride, p.A_log_k_stride = _param_strides(A_log, per_channel_decay)
        p.dt_bias_head_stride, p.dt_bias_k_stride = _param_strides(dt_bias, per_channel_decay)
    return p


def launch(p: GdnDecodeParams, device: torch.device) -> None:
    """Validates and launches one step on torch.cuda.current_stream(device); returns without waiting."""
    lib = _lib.require("rssm_gdn_decode")
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(lib.rssm_gdn_decode(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)), "rssm_gdn_decode")


def validate(p: GdnDecodeParams) -> None:
    """The library's checks of sizes, dtypes, pointers and strides, without a launch (no GPU needed)."""
    lib = _lib.require("rssm_gdn_decode_validate")
    _lib.check(lib.rssm_gdn_decode_validate(ctypes.byref(p), ctypes.sizeof(p)), "rssm_gdn_decode_validate")


def abi_size_matches() -> bool:
    return _lib.require("rssm_gdn_decode_params_size").rssm_gdn_decode_params_size() == ctypes.sizeof(GdnDecodeParams)
