"""Gated DeltaNet and KDA single-token decode and sequence recurrence: the specification of the GDN kernels.

Shapes (b = batch rows; H key heads of dim K; HV value heads of dim V; value head hv reads key head
hv // (HV/H)):
    state [b, HV, V, K] (K contiguous)   q, k [b, H, K]   v [b, HV, V]
    g [b, HV] (GDN) or [b, HV, K] (KDA, decay per key channel)   beta [b, HV]
Math per value head (S is V x K):
    S <- S diag(e^g)  (scalar e^g for GDN) ;  u = beta (v - S k) ;  S <- S + u kᵀ ;  y = S q
Gating from the raw projections, as the fused serving kernels do it:
    g = -exp(A_log) * softplus(a + dt_bias) ,  beta = sigmoid(b)
Query/key preparation: optional L2 normalisation of q and k, then q scaled by K^-1/2 (or a given scale).
Arithmetic runs in fp64 when the state is fp64 (the oracle), else in fp32.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.ops.mamba2.reference import compute_dtype


def softplus(x: torch.Tensor) -> torch.Tensor:
    """softplus(x) for x <= 20, identity above (the threshold every reference kernel uses)."""
    return torch.where(x <= 20.0, torch.log1p(torch.exp(x)), x)


def gdn_gating(a, b, A_log, dt_bias, dtype=torch.float32):
    """Raw gate projections a, b [.., HV] -> (g, beta). For KDA pass a [.., HV, K] and A_log, dt_bias shaped to
    broadcast against it."""
    g = -torch.exp(A_log.to(dtype)) * softplus(a.to(dtype) + dt_bias.to(dtype))
    return g, torch.sigmoid(b.to(dtype))


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def prepare_qk(q, k, use_l2norm: bool = True, scale: float | None = None, dtype=torch.float32):
    """(q, k) as the recurrence reads them: optionally L2-normalised, q scaled by `scale` (default K^-1/2)."""
    q, k = q.to(dtype), k.to(dtype)
    if use_l2norm:
        q, k = l2norm(q), l2norm(k)
    return q * (q.shape[-1] ** -0.5 if scale is None else scale), k


def expand_heads(t: torch.Tensor, num_v_heads: int) -> torch.Tensor:
    """[.., H, K] -> [.., HV, K]: value head hv reads key head hv // (HV/H)."""
    return t.repeat_interleave(num_v_heads // t.shape[-2], dim=-2)


def decay_state(S: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """S [.., V, K] times e^g: g [..] (one scalar per head) or [.., K] (per key channel)."""
    return S * torch.exp(g)[..., None, None] if g.dim() == S.dim() - 2 else S * torch.exp(g)[..., None, :]


def gdn_step(state, q, k, v, g, beta):
    """One conventional step on prepared inputs. Returns (y [b, HV, V], new_state), compute precision.

    q, k are the prepared (normalised, scaled) key-head vectors; inputs are not modified.
    """
    cd = compute_dtype(state)
    HV = state.shape[-3]
    qh, kh = expand_heads(q.to(cd), HV), expand_heads(k.to(cd), HV)
    S = decay_state(state.to(cd), g.to(cd))
    u = beta.to(cd)[..., None] * (v.to(cd) - (S * kh[..., None, :]).sum(-1))
    S = S + u[..., None] * kh[..., None, :]
    y = (S * qh[..., None, :]).sum(-1)
    return y, S


def gdn_sequence(state, qs, ks, vs, gs, betas):
    """Sequential recurrence over T tokens (leading T dimension on every input). Returns (ys, final_state)."""
    ys = []
    for t in range(qs.shape[0]):
        y, state = gdn_step(state, qs[t], ks[t], vs[t], gs[t], betas[t])
        ys.append(y)
    return torch.stack(ys), state
