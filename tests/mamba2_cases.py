"""Random Mamba-2 problems for the tests: realistic magnitudes, never zeros."""

from __future__ import annotations

import dataclasses
import math

import torch

from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.pool import Mamba2StatePool


def layer_params(shape: Mamba2LayerShape, device, with_D=True, with_bias=True):
    H = shape.nheads
    A = -torch.exp(torch.rand(H, device=device) * math.log(16.0))  # decay rates in [-16, -1]
    D = torch.randn(H, device=device) if with_D else None
    dt_bias = (torch.rand(H, device=device) * 3 - 4) if with_bias else None  # softplus(-4..-1) ~ 0.02..0.3
    return A, D, dt_bias


def step_inputs(shape: Mamba2LayerShape, batch, act_dtype, device, with_z=True):
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    x = torch.randn(batch, H, P, device=device).to(act_dtype)
    dt = (torch.randn(batch, H, device=device) * 0.5).to(act_dtype)
    B = torch.randn(batch, G, N, device=device).to(act_dtype)
    C = torch.randn(batch, G, N, device=device).to(act_dtype)
    z = torch.randn(batch, H, P, device=device).to(act_dtype) if with_z else None
    return x, dt, B, C, z


def random_pool(shape, num_slots, cfg: ReplayConfig, device, desync=True):
    """A pool with random checkpoints and, when desync, random ring contents, histories and origins."""
    pool = Mamba2StatePool(shape, num_slots, cfg, device=device)
    pool.checkpoint.copy_(torch.randn(pool.checkpoint.shape, device=device))
    pool.ring_x.copy_(torch.randn(pool.ring_x.shape, device=device))
    pool.ring_B.copy_(torch.randn(pool.ring_B.shape, device=device))
    pool.ring_dt.copy_(torch.rand(pool.ring_dt.shape, device=device) * 0.3 + 0.01)
    if desync:
        L = cfg.buffer_len
        pool.set_cursor(slice(None), torch.randint(0, L, (num_slots,), device=device, dtype=torch.int32),
                        torch.randint(0, L, (num_slots,), device=device, dtype=torch.int32))
    return pool


def clone_pool(pool: Mamba2StatePool, device=None) -> Mamba2StatePool:
    return pool.clone(device)


def ring_route_twin(pool):
    """A copy of a pool of either family (same buffers) whose config turns the latency route off: its steps take
    the ring routes where the original's flush every row."""
    twin = type(pool)(pool.shape, pool.num_slots, dataclasses.replace(pool.cfg, latency_route_bytes=0),
                      device=pool.device)
    for name, t in pool.buffers.items():
        twin.buffers[name].copy_(t)
    return twin


def slot_map(batch, num_slots, n_pad, device, generator=None):
    """Shuffled distinct slots for `batch` rows, `n_pad` of them padding (-1) at random rows."""
    perm = torch.randperm(num_slots, generator=generator)[:batch].to(torch.int32)
    pad_rows = torch.randperm(batch, generator=generator)[:n_pad]
    perm[pad_rows] = -1
    return perm.to(device)


def rel_err(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def worst(*errs: float) -> float:
    """The largest error, NaN if any is NaN. Python's max skips a NaN that is not its first argument
    (max(0.0, nan) is 0.0), so a worst-error accumulator built on it lets an all-NaN output pass."""
    return math.nan if any(math.isnan(e) for e in errs) else max(errs)
