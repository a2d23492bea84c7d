"""Random Gated DeltaNet speculative problems for the tests: windows of T tokens (prepared or raw), pools with
desynchronised cursors that a verify of T tokens accepts (history 0 .. L-T, any origin)."""

from __future__ import annotations

import torch

from gdn_cases import random_pool, raw_step_inputs, step_inputs


def _stack(parts):
    return [torch.stack([p[i] for p in parts], dim=1) for i in range(len(parts[0]))]


def window_inputs(shape, batch, T, act_dtype, device):
    """Prepared q, k [b, T, H, K] and v [b, T, HV, V] in act_dtype; g, beta [b, T, HV] fp32; never zeros."""
    return _stack([step_inputs(shape, batch, act_dtype, device) for _ in range(T)])


def raw_window_inputs(shape, batch, T, act_dtype, device):
    """Raw q, k, v in act_dtype and gate projections a, b [b, T, HV]."""
    return _stack([raw_step_inputs(shape, batch, act_dtype, device) for _ in range(T)])


def spec_pool(shape, num_slots, cfg, T, device):
    """A pool with random checkpoints and rings, histories uniform in 0 .. L-T and origins in 0 .. L-1."""
    pool = random_pool(shape, num_slots, cfg, device, desync=False)
    L = cfg.buffer_len
    pool.set_cursor(slice(None), torch.randint(0, L - T + 1, (num_slots,), device=device, dtype=torch.int32),
                    torch.randint(0, L, (num_slots,), device=device, dtype=torch.int32))
    return pool
