"""Random Mamba-2 speculative problems for the tests: windows of T tokens, pools with desynchronised cursors
that a verify of T tokens accepts (history 0 .. L-T, any origin)."""

from __future__ import annotations

import torch

from mamba2_cases import random_pool


def window_inputs(shape, batch, T, act_dtype, device, with_z=True):
    """x, dt, B, C, z of a window: x, z [b, T, H, P]; dt [b, T, H] raw; B, C [b, T, G, N]; never zeros."""
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    x = torch.randn(batch, T, H, P, device=device).to(act_dtype)
    dt = (torch.randn(batch, T, H, device=device) * 0.5).to(act_dtype)
    B = torch.randn(batch, T, G, N, device=device).to(act_dtype)
    C = torch.randn(batch, T, G, N, device=device).to(act_dtype)
    z = torch.randn(batch, T, H, P, device=device).to(act_dtype) if with_z else None
    return x, dt, B, C, z


def spec_pool(shape, num_slots, cfg, T, device):
    """A pool with random checkpoints and rings, histories uniform in 0 .. L-T and origins in 0 .. L-1."""
    pool = random_pool(shape, num_slots, cfg, device, desync=False)
    L = cfg.buffer_len
    pool.set_cursor(slice(None), torch.randint(0, L - T + 1, (num_slots,), device=device, dtype=torch.int32),
                    torch.randint(0, L, (num_slots,), device=device, dtype=torch.int32))
    return pool


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a floating tensor (NaN-safe bitwise comparison with torch.equal)."""
    return t.view({4: torch.int32, 2: torch.int16, 8: torch.int64}[t.element_size()])
