"""Mamba-2 single-token decode and sequential prefill: the specification the kernels are tested against.

Shapes (per token t; b = batch rows):
    state  [b, H, P, N]      x, z [b, H, P]      dt [b, H] (raw)      B, C [b, G, N]
    A, D, dt_bias [H]
Math (per head, processed dt tied over P):
    dt  = softplus(dt + dt_bias)   (identity above 20; plain sum when dt_softplus is False)
    S   = exp(A dt) S + dt x Bᵀ
    y   = S C + D x ;  y *= z sigmoid(z) when z is given
Arithmetic runs in the state's dtype when it is fp64 (the oracle), else in fp32.
"""

from __future__ import annotations

import torch


def compute_dtype(*tensors) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def process_dt(dt: torch.Tensor, dt_bias: torch.Tensor | None, dt_softplus: bool, dtype) -> torch.Tensor:
    dt = dt.to(dtype)
    if dt_bias is not None:
        dt = dt + dt_bias.to(dtype)
    if dt_softplus:
        dt = torch.where(dt <= 20.0, torch.log1p(torch.exp(dt)), dt)
    return dt


def expand_groups(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """[b, G, N] -> [b, H, N]: head h reads group h // (H/G)."""
    return t.repeat_interleave(nheads // t.shape[-2], dim=-2)


def output_epilogue(y, x, D, z, dtype):
    """y + D x, then the optional z gate: the part of the output shared by every route."""
    if D is not None:
        y = y + D.to(dtype)[:, None] * x
    if z is not None:
        z = z.to(dtype)
        y = y * (z * torch.sigmoid(z))
    return y


def mamba2_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=True):
    """One conventional decode step. Returns (y, new_state), both in the compute dtype; inputs unchanged."""
    cd = compute_dtype(state)
    H = state.shape[-3]
    x = x.to(cd)
    dt = process_dt(dt, dt_bias, dt_softplus, cd)  # [b, H]
    dA = torch.exp(A.to(cd) * dt)  # [b, H]
    Bh = expand_groups(B.to(cd), H)  # [b, H, N]
    Ch = expand_groups(C.to(cd), H)
    new_state = state.to(cd) * dA[..., None, None] + (dt[..., None] * x)[..., None] * Bh[..., None, :]
    y = (new_state * Ch[..., None, :]).sum(-1)
    return output_epilogue(y, x, D, z, cd), new_state


def mamba2_sequence(state, xs, dts, A, Bs, Cs, D=None, zs=None, dt_bias=None, dt_softplus=True):
    """Sequential recurrence over T tokens (xs [T, b, H, P], dts [T, b, H], Bs/Cs [T, b, G, N], zs like xs).

    Run it on fp64 inputs for the oracle. Returns (ys [T, b, H, P], final_state).
    """
    ys = []
    for t in range(xs.shape[0]):
        y, state = mamba2_step(state, xs[t], dts[t], A, Bs[t], Cs[t], D, None if zs is None else zs[t],
                               dt_bias, dt_softplus)
        ys.append(y)
    return torch.stack(ys), state


def mamba2_prefill(xs, dts, A, Bs, Cs, D=None, zs=None, dt_bias=None, dt_softplus=True, initial_state=None,
                   state_dtype=torch.float32):
    """Sequential prefill of a prompt; decoding starts from the returned final state with an empty ring.

    xs [T, b, H, P] ... as in mamba2_sequence. Returns (ys, final_state in compute precision).
    """
    T, b, H, P = xs.shape
    N = Bs.shape[-1]
    if initial_state is None:
        initial_state = torch.zeros(b, H, P, N, dtype=state_dtype, device=xs.device)
    return mamba2_sequence(initial_state, xs, dts, A, Bs, Cs, D, zs, dt_bias, dt_softplus)
