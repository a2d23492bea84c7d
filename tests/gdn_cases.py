"""Random Gated DeltaNet and KDA problems for the kernel tests: realistic magnitudes, never zeros. The shape's
per_channel_decay picks KDA: g, a [batch, HV, K] and per-channel gate parameters."""

from __future__ import annotations

import torch

from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn.reference import decay_state, expand_heads, l2norm, prepare_qk
from trtllm_replayssm.pool import GdnStatePool


def _gate_shape(shape: GdnLayerShape, batch):
    HV = shape.num_v_heads
    return (batch, HV, shape.head_k_dim) if shape.per_channel_decay else (batch, HV)


def gates(shape: GdnLayerShape, batch, device):
    """Log decays g < 0 (e^g mostly 0.7..0.95, a few far lower) fp32 [batch, HV] (KDA [batch, HV, K]) and beta in
    (0.05, 0.95) fp32 [batch, HV]."""
    HV = shape.num_v_heads
    g = -torch.exp(torch.randn(_gate_shape(shape, batch), device=device) * 0.7 - 2.0)
    beta = torch.rand(batch, HV, device=device) * 0.9 + 0.05
    return g, beta


def step_inputs(shape: GdnLayerShape, batch, act_dtype, device):
    """Prepared inputs as the kernels read them: q, k L2-normalised (q scaled by K^-1/2) in act_dtype, v in
    act_dtype, g and beta fp32."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    q, k = prepare_qk(torch.randn(batch, H, K, device=device), torch.randn(batch, H, K, device=device))
    v = torch.randn(batch, HV, V, device=device).to(act_dtype)
    return (q.to(act_dtype), k.to(act_dtype), v, *gates(shape, batch, device))


def raw_step_inputs(shape: GdnLayerShape, batch, act_dtype, device, gate_dtype=torch.float32):
    """Raw inputs as a model gives them: q, k, v in act_dtype (q, k of any norm) and the gate projections a
    [batch, HV] (KDA [batch, HV, K]), b [batch, HV] in gate_dtype."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    q, k = ((torch.randn(batch, H, K, device=device) * 3).to(act_dtype) for _ in range(2))
    v = torch.randn(batch, HV, V, device=device).to(act_dtype)
    a = torch.randn(_gate_shape(shape, batch), device=device).to(gate_dtype)
    return q, k, v, a, torch.randn(batch, HV, device=device).to(gate_dtype)


def gate_params(shape: GdnLayerShape, device):
    """A_log, dt_bias: -exp(A_log) softplus(a + dt_bias) with a ~ N(0, 1) gives e^g mostly in 0.5..0.97. [HV]
    each; KDA: A_log [HV, 1] (per head, as Kimi's) and dt_bias [HV, K] (per channel)."""
    HV, K = shape.num_v_heads, shape.head_k_dim
    if shape.per_channel_decay:
        return torch.rand(HV, 1, device=device) - 1.5, torch.rand(HV, K, device=device) - 2.0
    return torch.rand(HV, device=device) - 1.5, torch.rand(HV, device=device) - 2.0


def random_pool(shape, num_slots, cfg: ReplayConfig, device, desync=True):
    """A pool with random checkpoints and ring records (unit-norm keys, negative log decays) and, when desync,
    random histories and origins."""
    pool = GdnStatePool(shape, num_slots, cfg, device=device)
    pool.checkpoint.copy_(torch.randn(pool.checkpoint.shape, device=device) * 0.5)
    pool.ring_u.copy_(torch.randn(pool.ring_u.shape, device=device) * 0.5)
    pool.ring_k.copy_(l2norm(torch.randn(pool.ring_k.shape, device=device)))
    pool.ring_g.copy_(-torch.rand(pool.ring_g.shape, device=device) * 0.3 - 0.01)
    if desync:
        L = cfg.buffer_len
        pool.set_cursor(slice(None), torch.randint(0, L, (num_slots,), device=device, dtype=torch.int32),
                        torch.randint(0, L, (num_slots,), device=device, dtype=torch.int32))
    return pool


def clone_pool(pool: GdnStatePool, device=None) -> GdnStatePool:
    return pool.clone(device)


def fold_ring(pool) -> torch.Tensor:
    """fp64 [slots, HV, V, K] on the CPU: each slot's checkpoint with its ring records applied in order (the
    records hold corrected updates u, so S <- e^g S + u kᵀ)."""
    HV, L = pool.shape.num_v_heads, pool.buffer_len
    states = pool.checkpoint.double().cpu().clone()
    hist, orig = pool.history(), pool.origin()
    for s in range(pool.num_slots):
        for j in range(int(hist[s])):
            p = (int(orig[s]) + j) % L
            k = expand_heads(pool.ring_k[s][:, p].double().cpu(), HV)
            u = pool.ring_u[s][:, p].double().cpu()
            states[s] = decay_state(states[s], pool.ring_g[s][:, p].double().cpu()) + u[..., None] * k[:, None, :]
    return states
