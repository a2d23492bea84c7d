"""The context phase's ops: prefill of Mamba-2, Gated DeltaNet (and KDA) and the causal conv1d over [batch, tokens].

Contract, shared by every family (docs/prefill.md): for every live row b (slot_idx[b] != pad_slot_id)
  - the slot's state starts at zero (SSM checkpoint, conv state);
  - tokens t < lengths[b] run the conventional decode step in order, on the slot's checkpoint: the same
    arithmetic and the same rounding (the state stored in its dtype after every token) as conventional decode
    called token by token, so the final checkpoint is exactly what that decode would have stored;
  - y[b, t] is written for t < lengths[b] only: later tokens and padding rows of `out` are left untouched
    (`out` is allocated as zeros when None);
  - at the end the slot's read copy (pool.cfg.read_format, if any) is refreshed from its checkpoint and its
    cursor says an empty ring (history 0, origin 0): a replay decode step can follow at once. Ring records are
    not touched (they sit outside the empty window);
  - the conv state holds the last k-1 inputs of the prompt (zeros in front of a prompt shorter than k-1).
Other slots and padding rows are left bit-identical. Slot indices of one call must be distinct (not checked:
that would need the values on the host).

lengths: int32 [b]. On CPU tensors the lengths of live rows are checked to lie in 1..S; on CUDA they stay on
the device (no synchronisation): a row runs the tokens t < lengths[b], so a length above S runs all S tokens
and a length below 1 leaves the slot at the zero state.

CPU tensors run the decode ops token by token with a per-token masked slot index (token_slots: rows whose
prompt ended get pad_slot_id); CUDA tensors run the C ABI's prefill entries (plugins/capi/prefill.cu, binding in
prefill_kernels.py): one kernel starts the live slots and writes every token's masked slot index into a
workspace, then the conventional decode kernel runs once per token, then one kernel refreshes the read copies.
Everything on the current stream, no synchronisation, capturable in a CUDA graph. Inputs are validated before
anything is touched, with the decode ops' checks; errors name the argument and its value.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import PAD_SLOT_ID, dtype_name
from trtllm_replayssm.ops import conv1d as _conv1d
from trtllm_replayssm.ops import gdn as _gdn
from trtllm_replayssm.ops import mamba2 as _mamba2
from trtllm_replayssm.ops import prefill_kernels
from trtllm_replayssm.ops.validate import check as _check

__all__ = ["mamba2_prefill", "gdn_prefill", "conv1d_prefill", "token_slots", "mamba2_prefill_reference",
           "gdn_prefill_reference", "conv1d_prefill_reference"]


def token_slots(slot_idx: torch.Tensor, lengths: torch.Tensor, t: int, pad_slot_id: int = PAD_SLOT_ID):
    """The slot index of token t: slot_idx[b] where the row's prompt reaches token t, else pad_slot_id."""
    return torch.where(lengths > t, slot_idx, torch.full_like(slot_idx, pad_slot_id))


def _shape(t):
    return tuple(getattr(t, "shape", ()))


def _check_rows(named, b: int, S: int) -> None:
    """Every (name, tensor, trailing shape) is [b, S, *trailing] (None: an optional input left out)."""
    for name, t, trailing in named:
        if t is None:
            continue
        want = (b, S, *trailing)
        _check(isinstance(t, torch.Tensor) and _shape(t) == want,
               f"{name} has shape {_shape(t)}, expected {want} (batch, tokens, ...)")


def _check_lengths(lengths, slot_idx, b: int, S: int, device, pad_slot_id: int) -> None:
    """lengths and slot_idx: contiguous int32 [b] on `device`; on CPU, live rows' lengths in 1..S."""
    _check(S >= 1, f"tokens={S} (dimension 1 of the inputs) must be >= 1")
    for name, t in (("lengths", lengths), ("slot_idx", slot_idx)):
        _check(isinstance(t, torch.Tensor) and t.dtype == torch.int32 and _shape(t) == (b,),
               f"{name} must be int32 of shape {(b,)}, got {dtype_name(getattr(t, 'dtype', None))} {_shape(t)}")
        _check(t.device == device, f"{name} is on {t.device}, expected {device}")
        _check(t.is_contiguous(), f"{name} must be contiguous")
    if device.type != "cuda":
        live = slot_idx != pad_slot_id
        bad = live & ((lengths < 1) | (lengths > S))
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise ValueError(f"lengths[{row}]={int(lengths[row])} is out of range (1..{S}, the tokens of the batch)")


def _live_slots(slot_idx, num_slots: int, pad_slot_id: int):
    """The slots of the live rows (as int64 indices)."""
    return slot_idx[(slot_idx != pad_slot_id) & (slot_idx >= 0) & (slot_idx < num_slots)].long()


def _zero_slots(state, slot_idx, pad_slot_id: int) -> None:
    """The live rows' slots of a state buffer [slots, ...] := 0 (a prefill starts from a zero state)."""
    state[_live_slots(slot_idx, state.shape[0], pad_slot_id)] = 0


def _start_pool(pool, slot_idx, pad_slot_id: int) -> None:
    """The live slots' checkpoints := 0 and cursors := an empty ring (history 0, origin 0)."""
    _zero_slots(pool.checkpoint, slot_idx, pad_slot_id)
    _zero_slots(pool.cursor, slot_idx, pad_slot_id)


def _refresh_read_copies(pool, slot_idx, pad_slot_id: int) -> None:
    """The live slots' read copies (if any) from their final checkpoints."""
    for s in _live_slots(slot_idx, pool.num_slots, pad_slot_id).tolist():
        pool.write_read_copy(s, pool.checkpoint[s])


def _token(t, i):
    """Token i of an optional [b, S, ...] input."""
    return None if t is None else t[:, i]


def _output(out, like):
    return torch.zeros_like(like) if out is None else out


def mamba2_prefill(pool, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True, lengths, slot_idx,
                   pad_slot_id=PAD_SLOT_ID, out=None):
    """Prefill of a Mamba-2 layer over a Mamba2StatePool (the contract in the module docstring).

    x, z [b, S, H, P]; dt [b, S, H] raw; B, C [b, S, G, N]; A, D, dt_bias [H] fp32; lengths [b] int32 in 1..S;
    slot_idx [b] int32 (pad_slot_id: padding row). Returns y [b, S, H, P] (`out` if given).
    WRITTEN: checkpoint, read copy and cursor of every live row's slot; out at t < lengths[b] of live rows.
    """
    _check(isinstance(x, torch.Tensor) and x.dim() == 4, f"x must be a tensor [batch, tokens, nheads, head_dim], "
                                                         f"got {_shape(x)}")
    _check(x.dtype == pool.cfg.act_dtype, f"x has dtype {dtype_name(x.dtype)} but the pool's act_dtype is "
                                          f"{dtype_name(pool.cfg.act_dtype)}")
    _check(x.device == pool.device, f"x is on {x.device} but the pool is on {pool.device}")
    b, S = x.shape[:2]
    sh = pool.shape
    H, P, G, N = sh.nheads, sh.head_dim, sh.ngroups, sh.dstate
    _check_rows((("x", x, (H, P)), ("dt", dt, (H,)), ("B", B, (G, N)), ("C", C, (G, N)), ("z", z, (H, P)),
                 ("out", out, (H, P))), b, S)
    _check_lengths(lengths, slot_idx, b, S, x.device, pad_slot_id)
    _mamba2._validate_inputs(sh, x[:, 0], dt[:, 0], B[:, 0], C[:, 0], A, D, _token(z, 0), dt_bias, slot_idx,
                             _token(out, 0), pool.num_slots)
    y = _output(out, x)
    if b == 0:
        return y
    if x.device.type == "cuda":
        prefill_kernels.mamba2(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, lengths, slot_idx, pad_slot_id, y)
        return y
    return mamba2_prefill_reference(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, lengths, slot_idx, pad_slot_id,
                                    y)


def gdn_prefill(pool, q, k, v, *, g=None, beta=None, a=None, b=None, A_log=None, dt_bias=None, use_qk_l2norm=True,
                scale=None, lengths, slot_idx, pad_slot_id=PAD_SLOT_ID, out=None):
    """Prefill of a Gated DeltaNet (or KDA) layer over a GdnStatePool (the contract in the module docstring).

    q, k [b, S, H, K]; v [b, S, HV, V]; raw gates a [b, S, HV] (KDA: [b, S, HV, K]), b [b, S, HV] with A_log,
    dt_bias as for gdn_replay_decode, or precomputed g, beta of the same shapes; lengths [b] int32 in 1..S;
    slot_idx [b] int32. Returns y [b, S, HV, V] (`out` if given).
    WRITTEN: checkpoint, read copy and cursor of every live row's slot; out at t < lengths[b] of live rows.
    """
    _check(isinstance(v, torch.Tensor) and v.dim() == 4, f"v must be a tensor [batch, tokens, num_v_heads, "
                                                         f"head_v_dim], got {_shape(v)}")
    _check(v.dtype == pool.cfg.act_dtype, f"v has dtype {dtype_name(v.dtype)} but the pool's act_dtype is "
                                          f"{dtype_name(pool.cfg.act_dtype)}")
    _check(v.device == pool.device, f"v is on {v.device} but the pool is on {pool.device}")
    n, S = v.shape[:2]
    sh = pool.shape
    H, HV, K, V = sh.num_k_heads, sh.num_v_heads, sh.head_k_dim, sh.head_v_dim
    gate = (HV, K) if sh.per_channel_decay else (HV,)
    _check_rows((("q", q, (H, K)), ("k", k, (H, K)), ("v", v, (HV, V)), ("a", a, gate), ("b", b, (HV,)),
                 ("g", g, gate), ("beta", beta, (HV,)), ("out", out, (HV, V))), n, S)
    _check_lengths(lengths, slot_idx, n, S, v.device, pad_slot_id)
    tok = dict(g=_token(g, 0), beta=_token(beta, 0), a=_token(a, 0), b=_token(b, 0), A_log=A_log,
               dt_bias=dt_bias)
    if v.device.type == "cuda":
        _gdn.check_kernel_read_copy(sh, pool.cfg, kernel="prefill")
    _gdn._prepare(sh, q[:, 0], k[:, 0], v[:, 0], tok["g"], tok["beta"], tok["a"], tok["b"], A_log, dt_bias,
                  use_qk_l2norm, scale, slot_idx, _token(out, 0), pool.checkpoint)
    y = _output(out, v)
    if n == 0:
        return y
    if v.device.type == "cuda":
        prefill_kernels.gdn(pool, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, lengths, slot_idx,
                            pad_slot_id, y)
        return y
    return gdn_prefill_reference(pool, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, lengths, slot_idx,
                                 pad_slot_id, y)


def conv1d_prefill(state, x, weight, bias=None, activation=True, *, lengths, slot_idx, pad_slot_id=PAD_SLOT_ID,
                   out=None):
    """Prefill of the causal conv1d (the contract in the module docstring). state [slots, C, k-1] (WRITTEN: every
    live row's slot := the last k-1 inputs of its prompt, zeros in front of a shorter one); x [b, S, C];
    weight [C, k]; bias [C] or None; activation: SiLU; lengths, slot_idx [b] int32. Returns y [b, S, C]
    (`out` if given; written at t < lengths[b] of live rows only)."""
    k = _conv1d._check_conv("state", state, x, weight, bias, activation, slot_idx, out)
    _check(x.dim() == 3 and x.shape[2] == state.shape[1],
           f"x has shape {_shape(x)}, expected [batch, tokens, {state.shape[1]}]")
    _check(state.shape[2] == k - 1, f"state holds {state.shape[2]} inputs per channel, expected k-1 = {k - 1}")
    b, S = x.shape[:2]
    _check_lengths(lengths, slot_idx, b, S, x.device, pad_slot_id)
    y = _output(out, x)
    if b == 0:
        return y
    if x.device.type == "cuda":
        prefill_kernels.conv1d(state, x, weight, bias, activation, k, lengths, slot_idx, pad_slot_id, y)
        return y
    return conv1d_prefill_reference(state, x, weight, bias, activation, lengths, slot_idx, pad_slot_id, y)


# ---- the route as decode ops: the specification (CPU), and on CUDA tensors the kernels' expected bits ----

def mamba2_prefill_reference(pool, x, dt, B, C, A, D, z, dt_bias, dt_softplus, lengths, slot_idx, pad_slot_id, y):
    """mamba2_prefill as conventional_decode once per token with token_slots (validated inputs; any device, CUDA:
    the decode kernel, as the prefill kernels run it; synchronises)."""
    _start_pool(pool, slot_idx, pad_slot_id)
    for t in range(x.shape[1]):
        _mamba2.conventional_decode(pool.checkpoint, x[:, t], dt[:, t], B[:, t], C[:, t], A, D=D, z=_token(z, t),
                                    dt_bias=dt_bias, dt_softplus=dt_softplus, ngroups=pool.shape.ngroups,
                                    slot_idx=token_slots(slot_idx, lengths, t, pad_slot_id), pad_slot_id=pad_slot_id,
                                    out=y[:, t])
    _refresh_read_copies(pool, slot_idx, pad_slot_id)
    return y


def gdn_prefill_reference(pool, q, k, v, g, beta, a, b, A_log, dt_bias, use_qk_l2norm, scale, lengths, slot_idx,
                          pad_slot_id, y):
    """gdn_prefill as gdn_conventional_decode once per token with token_slots (as mamba2_prefill_reference)."""
    _start_pool(pool, slot_idx, pad_slot_id)
    for t in range(v.shape[1]):
        _gdn.gdn_conventional_decode(pool.checkpoint, pool.shape, q[:, t], k[:, t], v[:, t], g=_token(g, t),
                                     beta=_token(beta, t), a=_token(a, t), b=_token(b, t), A_log=A_log,
                                     dt_bias=dt_bias, use_qk_l2norm=use_qk_l2norm, scale=scale,
                                     slot_idx=token_slots(slot_idx, lengths, t, pad_slot_id), pad_slot_id=pad_slot_id,
                                     out=y[:, t])
    _refresh_read_copies(pool, slot_idx, pad_slot_id)
    return y


def conv1d_prefill_reference(state, x, weight, bias, activation, lengths, slot_idx, pad_slot_id, y):
    """conv1d_prefill as conv1d_update once per token with token_slots (as mamba2_prefill_reference)."""
    _zero_slots(state, slot_idx, pad_slot_id)
    for t in range(x.shape[1]):
        _conv1d.conv1d_update(state, x[:, t], weight, bias, activation,
                              slot_idx=token_slots(slot_idx, lengths, t, pad_slot_id), pad_slot_id=pad_slot_id,
                              out=y[:, t])
    return y
