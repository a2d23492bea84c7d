"""ReplaySSM for Gated DeltaNet / KDA over a state pool, in PyTorch: the specification of the replay kernels.

The ring holds, per token since the checkpoint S0, the corrected update u (it depends on the state before the
token, so raw v cannot be replayed), the key k and the log decay g. For one row with h records and the current
token as record h (suffix sums D_j = sum_{i=j+1..h} g_i, per key channel for KDA; E = sum_{i<=h} g_i):

    state the current token sees (after its decay):  S' = S0 diag(e^E) + sum_{j<h} u_j (k_j ⊙ e^{D_j})ᵀ
    non-flush (h < L-1), output-only:
        S'k = S0 (e^E ⊙ k) + sum_{j<h} u_j ((k_j ⊙ e^{D_j})·k)
        u   = beta (v - S'k)
        y   = S0 (e^E ⊙ q) + sum_{j<h} u_j ((k_j ⊙ e^{D_j})·q) + u (k·q)
        append (u, k, g) at ring position h
    flush (h = L-1): build S', then u = beta (v - S'k), S = S' + u kᵀ, y = S q, store S, history := 0
At L=1 the flush route performs the conventional step's operations in the same order (bit-exact anchor).
With a read copy (ReplayConfig.read_format), only the output read S0 (e^E ⊙ q) uses it: S0 (e^E ⊙ k) feeds the
correction u, which enters the recurrence, so it reads the checkpoint.
Rounding points as in the kernels: checkpoint in its dtype, u, k and y in the activation dtype, g in fp32.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.ops.gdn.reference import decay_state, expand_heads, gdn_step
from trtllm_replayssm.ops.slots import live_rows


def replay_row(S0, kw, uw, gw, q, k, v, g, beta, flush, S0_read=None):
    """One row in compute precision (S0_read: the read copy the output-only route's S q reads; the checkpoint
    when None).

    S0 [HV, V, K]; window records kw [h, HV, K] (key heads expanded), uw [h, HV, V], gw [h, HV] or [h, HV, K];
    current q, k [HV, K], v [HV, V], g [HV] or [HV, K], beta [HV].
    Returns (y [HV, V], u [HV, V], new checkpoint or None).
    """
    h = kw.shape[0]
    gall = torch.cat([gw, g[None]])  # [t, ...]
    suffix = torch.zeros_like(gall)
    for j in range(h - 1, -1, -1):
        suffix[j] = suffix[j + 1] + gall[j + 1]
    E = suffix[0] + gall[0]
    per_channel = g.dim() == 2
    if flush:
        S = decay_state(S0, E)
        for j in range(h):
            kd = kw[j] * (torch.exp(suffix[j])[..., None] if not per_channel else torch.exp(suffix[j]))
            S = S + uw[j][..., None] * kd[:, None, :]
        u = beta[:, None] * (v - (S * k[:, None, :]).sum(-1))
        S = S + u[..., None] * k[:, None, :]
        return (S * q[:, None, :]).sum(-1), u, S
    eE = torch.exp(E)[..., None] if not per_channel else torch.exp(E)
    Sk = (S0 * (eE * k)[:, None, :]).sum(-1)
    Sq = ((S0 if S0_read is None else S0_read) * (eE * q)[:, None, :]).sum(-1)
    for j in range(h):
        kd = kw[j] * (torch.exp(suffix[j])[..., None] if not per_channel else torch.exp(suffix[j]))
        Sk = Sk + uw[j] * (kd * k).sum(-1)[:, None]
        Sq = Sq + uw[j] * (kd * q).sum(-1)[:, None]
    u = beta[:, None] * (v - Sk)
    return Sq + u * (k * q).sum(-1)[:, None], u, None


def gdn_conventional_decode_reference(state, q, k, v, g, beta, slot_idx=None, pad_slot_id=-1, out=None):
    """Conventional step on pool rows (prepared q, k; g, beta in fp32): state[slot] updated in place."""
    y = torch.empty_like(v) if out is None else out
    for b, s in live_rows(slot_idx, v.shape[0], state.shape[0], pad_slot_id):
        yb, S = gdn_step(state[s:s + 1], q[b:b + 1], k[b:b + 1], v[b:b + 1], g[b:b + 1], beta[b:b + 1])
        state[s] = S[0].to(state.dtype)
        y[b] = yb[0].to(y.dtype)
    return y


def gdn_replay_decode_reference(pool, q, k, v, g, beta, slot_idx=None, pad_slot_id=-1, out=None):
    """ReplaySSM step over a GdnStatePool (updated in place) on prepared q, k and fp32 g, beta."""
    cd = torch.float64 if pool.checkpoint.dtype == torch.float64 else torch.float32
    L, HV = pool.buffer_len, pool.shape.num_v_heads  # a row flushes when its history reaches L - 1
    flush_all = pool.flushes_every_row(v.shape[0])  # ... or always, on the latency route
    y = torch.empty_like(v) if out is None else out
    g32 = g.to(torch.float32)
    for b, s in live_rows(slot_idx, v.shape[0], pool.num_slots, pad_slot_id):
        h, positions = pool.window(s)
        pos = positions[:h]
        kw = expand_heads(pool.ring_k[s][:, pos].to(cd).transpose(0, 1), HV)  # [h, HV, K]
        uw = pool.ring_u[s][:, pos].to(cd).transpose(0, 1)  # [h, HV, V]
        gw = pool.ring_g[s][:, pos].to(cd).transpose(0, 1)  # [h, HV] or [h, HV, K]
        # The kernels read k in the activation dtype (it is stored in the ring that way).
        kb = expand_heads(k[b].to(pool.ring_k.dtype).to(cd), HV)
        qb = expand_heads(q[b].to(cd), HV)
        flush = flush_all or h == L - 1
        # The correction u feeds the recurrence, so it reads the checkpoint; only the output read S q may use
        # the read copy.
        yb, u, S = replay_row(pool.checkpoint[s].to(cd), kw, uw, gw, qb, kb, v[b].to(cd), g32[b].to(cd),
                              beta[b].to(cd), flush, S0_read=pool.read_state(s).to(cd))
        y[b] = yb.to(y.dtype)
        pool.commit_step(s, S, ring_u=u, ring_k=k[b], ring_g=g32[b])
    return y
