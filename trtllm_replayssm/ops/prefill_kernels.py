"""Binding of the prefill entry points (plugins/include/replayssm/common/prefill_params.h): each struct embeds the
family's decode params of token 0 (filled by that family's own fill_params) and adds the token strides, the
lengths and the workspace. Calls the C ABI on the current CUDA stream, no synchronisation; the workspace (the
per-token slot indices, int32 [S, b]) comes from PyTorch's allocator, which CUDA graph capture supports.

Libraries built before the prefill entry points lack the rssm_*_prefill symbols: importing this module still
works, and calls raise a KernelError saying to rebuild.
"""

from __future__ import annotations

import ctypes

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import MAMBA2_KERNEL_READ_COPIES, dtype_name
from trtllm_replayssm.ops import conv1d_kernels
from trtllm_replayssm.ops.gdn import _kernel_inputs
from trtllm_replayssm.ops.gdn import kernels as gdn_kernels
from trtllm_replayssm.ops.mamba2 import kernels as mamba2_kernels

_i32, _i64, _ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
_PROMPT = [("num_tokens", _i32), ("lengths", _ptr), ("workspace", _ptr)]


class Mamba2PrefillParams(ctypes.Structure):
    """Mirror of rssm_mamba2_prefill_params."""

    _fields_ = [("step", mamba2_kernels.Mamba2DecodeParams)] + _PROMPT
    _fields_ += [(f"{n}_token_stride", _i64) for n in ("x", "dt", "B", "C", "z", "y")]


class GdnPrefillParams(ctypes.Structure):
    """Mirror of rssm_gdn_prefill_params."""

    _fields_ = [("step", gdn_kernels.GdnDecodeParams)] + _PROMPT
    _fields_ += [(f"{n}_token_stride", _i64) for n in ("q", "k", "v", "y", "g", "beta", "a", "b")]


class Conv1dPrefillParams(ctypes.Structure):
    """Mirror of rssm_conv1d_prefill_params (the token strides are the step's x_token_stride, y_token_stride)."""

    _fields_ = [("step", conv1d_kernels.Conv1dParams)] + _PROMPT


def _token0(t):
    return None if t is None else t[:, 0]


def _prompt(p, lengths, batch, num_tokens, device):
    """Fills the prompt fields. The workspace lives as long as the params (freed after the launch is queued: the
    allocator hands it out again in stream order, after the prefill's kernels)."""
    size = _lib.require("rssm_prefill_workspace_size").rssm_prefill_workspace_size(batch, num_tokens)
    p.workspace_tensor = torch.empty(max(size // 4, 1), dtype=torch.int32, device=device)
    p.num_tokens, p.lengths, p.workspace = num_tokens, lengths.data_ptr(), p.workspace_tensor.data_ptr()


MAMBA2, GDN, CONV1D = "rssm_mamba2_prefill", "rssm_gdn_prefill", "rssm_conv1d_prefill"  # the entry points


def launch(name, p, device) -> None:
    """Validates and launches entry point `name` (MAMBA2, GDN, CONV1D) on the current stream of `device`."""
    lib = _lib.require(name)
    stream = torch.cuda.current_stream(device).cuda_stream
    _lib.check(getattr(lib, name)(ctypes.byref(p), ctypes.sizeof(p), ctypes.c_void_p(stream)), name)


def validate(name, p) -> None:
    """The library's checks of entry point `name`, without a launch (no GPU needed)."""
    lib = _lib.require(f"{name}_validate")
    _lib.check(getattr(lib, f"{name}_validate")(ctypes.byref(p), ctypes.sizeof(p)), f"{name}_validate")


def _strides(p, named):
    for name, t in named:
        setattr(p, f"{name}_token_stride", 0 if t is None else t.stride(1))


def mamba2(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, lengths, slot_idx, pad_slot_id, y):
    """rssm_mamba2_prefill over a Mamba2StatePool (inputs validated by ops/prefill.py)."""
    fmt, state = pool.cfg.read_format, dtype_name(pool.cfg.state_dtype)
    if fmt != "none" and (state, fmt) not in MAMBA2_KERNEL_READ_COPIES:
        raise NotImplementedError(f"read_format={fmt} with state_dtype={state}: the CUDA kernels read the pairs "
                                  f"{MAMBA2_KERNEL_READ_COPIES}; this one exists in the PyTorch reference only")
    launch(MAMBA2, mamba2_params(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, lengths, slot_idx, pad_slot_id, y),
           x.device)


def mamba2_params(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, lengths, slot_idx, pad_slot_id, y):
    """The params of a Mamba-2 prefill (x, z [b, S, H, P] ... as mamba2_prefill) with a fresh workspace."""
    p = Mamba2PrefillParams()
    p.step = mamba2_kernels.fill_params(
        mamba2_kernels.CONVENTIONAL, pool.checkpoint, x[:, 0], dt[:, 0], B[:, 0], C[:, 0], A, D, _token0(z), dt_bias,
        dt_softplus, slot_idx, pad_slot_id, y[:, 0], cursor=pool.cursor, read_format=pool.cfg.read_format,
        read_state=pool.buffers.get("read_state"), read_scale=pool.buffers.get("read_scale"),
        read_block_scale=pool.buffers.get("read_block_scale"))
    _strides(p, (("x", x), ("dt", dt), ("B", B), ("C", C), ("z", z), ("y", y)))
    _prompt(p, lengths, x.shape[0], x.shape[1], x.device)
    return p


def gdn(pool, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, lengths, slot_idx, pad_slot_id, y):
    """rssm_gdn_prefill over a GdnStatePool (inputs validated by ops/prefill.py)."""
    launch(GDN, gdn_params(pool, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, lengths, slot_idx,
                           pad_slot_id, y), v.device)


def gdn_params(pool, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, lengths, slot_idx, pad_slot_id, y):
    """The params of a GDN prefill; raw q, k and gates go to the kernel as the decode op sends them
    (gdn._kernel_inputs, applied to every token at once)."""
    q, k, g, beta, opts = _kernel_inputs(pool.shape, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale)
    a, b = opts.get("a"), opts.get("b")
    if a is not None:
        opts.update(a=a[:, 0], b=b[:, 0])
    p = GdnPrefillParams()
    p.step = gdn_kernels.fill_params(
        gdn_kernels.CONVENTIONAL, pool.checkpoint, q[:, 0], k[:, 0], v[:, 0], _token0(g), _token0(beta), y[:, 0],
        slot_idx, pad_slot_id, cursor=pool.cursor, read_format=pool.cfg.read_format,
        read_state=pool.buffers.get("read_state"), read_scale=pool.buffers.get("read_scale"), **opts)
    _strides(p, (("q", q), ("k", k), ("v", v), ("y", y), ("g", g), ("beta", beta), ("a", a), ("b", b)))
    _prompt(p, lengths, v.shape[0], v.shape[1], v.device)
    return p


def conv1d(state, x, weight, bias, activation, kernel_size, lengths, slot_idx, pad_slot_id, y):
    """rssm_conv1d_prefill (inputs validated by ops/prefill.py)."""
    launch(CONV1D, conv1d_params(state, x, weight, bias, activation, kernel_size, lengths, slot_idx, pad_slot_id, y),
           x.device)


def conv1d_params(state, x, weight, bias, activation, kernel_size, lengths, slot_idx, pad_slot_id, y):
    """The params of a conv1d prefill."""
    p = Conv1dPrefillParams()
    p.step = conv1d_kernels.fill_params(conv1d_kernels.UPDATE, state, x.shape[0], kernel_size, 1, x[:, 0], weight,
                                        bias, y[:, 0], activation, slot_idx, None, pad_slot_id)
    p.step.x_token_stride, p.step.y_token_stride = x.stride(1), y.stride(1)
    _prompt(p, lengths, x.shape[0], x.shape[1], x.device)
    return p


def abi_sizes_match() -> bool:
    """Whether the three structs have the library's sizes (no GPU needed)."""
    lib = _lib.require(MAMBA2)
    return (lib.rssm_mamba2_prefill_params_size() == ctypes.sizeof(Mamba2PrefillParams)
            and lib.rssm_gdn_prefill_params_size() == ctypes.sizeof(GdnPrefillParams)
            and lib.rssm_conv1d_prefill_params_size() == ctypes.sizeof(Conv1dPrefillParams))
