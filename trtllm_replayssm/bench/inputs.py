"""Random inputs of one decode step for the benchmarks, at the magnitudes of a trained layer (seeded by the caller)."""

from __future__ import annotations

import math

import torch

from ..config import GdnLayerShape, Mamba2LayerShape


def mamba2_step_inputs(shape: Mamba2LayerShape, batch: int, device, dtype=torch.bfloat16) -> dict:
    """A (negative, magnitudes log-uniform in 1..16), D and dt_bias (in [-4, -1): softplus(dt + dt_bias) mostly
    0.01..0.4) [H] in fp32; x, z [batch, H, P], dt [batch, H], B, C [batch, G, N] in `dtype`; `out` (uninitialised,
    like x)."""
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    inp = dict(A=-torch.exp(torch.rand(H, device=device) * math.log(16.0)), D=torch.randn(H, device=device),
               dt_bias=torch.rand(H, device=device) * 3 - 4)
    inp["x"] = torch.randn(batch, H, P, device=device).to(dtype)
    inp["z"] = torch.randn(batch, H, P, device=device).to(dtype)
    inp["dt"] = (torch.randn(batch, H, device=device) * 0.5).to(dtype)
    inp["B"] = torch.randn(batch, G, N, device=device).to(dtype)
    inp["C"] = torch.randn(batch, G, N, device=device).to(dtype)
    inp["out"] = torch.empty_like(inp["x"])
    return inp


def gdn_step_inputs(shape: GdnLayerShape, batch: int, device, dtype=torch.bfloat16) -> dict:
    """Prepared inputs as the benchmarks call the kernels (use_qk_l2norm off, scale 1): q, k [batch, H, K] of unit
    L2 norm and v [batch, HV, V] in `dtype`, g (log decay in (-0.5, 0]) and beta (in [0, 1)) [batch, HV] in fp32, and
    `out` (uninitialised, like v)."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    inp = dict(q=torch.nn.functional.normalize(torch.randn(batch, H, K, device=device), dim=-1).to(dtype),
               k=torch.nn.functional.normalize(torch.randn(batch, H, K, device=device), dim=-1).to(dtype))
    inp["v"] = torch.randn(batch, HV, V, device=device).to(dtype)
    inp["g"], inp["beta"] = -torch.rand(batch, HV, device=device) * 0.5, torch.rand(batch, HV, device=device)
    inp["out"] = torch.empty_like(inp["v"])
    return inp
