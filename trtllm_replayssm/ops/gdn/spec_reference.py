"""Speculative decoding for Gated DeltaNet / KDA, in PyTorch: ReplaySSM verify + commit over a pool, and the
conventional snapshot path. The specification of the GDN speculative kernels.

Same window rules as Mamba-2 (trtllm_replayssm/ops/mamba2/spec_reference.py): the T tokens' records go to ring
positions h .. h+T-1, a row with h + 2T > L folds its h committed records into S0 after the verify and moves
its origin past them, and the commit adds the accepted count to h. What differs: a record holds the corrected
update u, which for token i depends on tokens 0..i-1 of the same window. The kernels get the T values at once
from one T x T unit-lower-triangular solve, U = (I + A)^-1 R with A[i,i'] = beta_i e^{G_i - G_i'} k_i·k_i'
(i' < i); this reference computes them one after another, which is the same system solved by substitution.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.ops.gdn.reference import expand_heads, gdn_step
from trtllm_replayssm.ops.gdn.replay_reference import replay_row
from trtllm_replayssm.ops.slots import check_spec_window, live_rows


def fold_records(S0, kw, uw, gw):
    """The state after records 0..h-1 (each: decay by g_j, then add u_j k_jᵀ) from S0 [HV, V, K]."""
    S = S0
    for j in range(kw.shape[0]):
        decay = torch.exp(gw[j])
        S = S * (decay[:, None, None] if decay.dim() == 1 else decay[:, None, :])
        S = S + uw[j][..., None] * kw[j][:, None, :]
    return S


def replay_verify_reference(pool, q, k, v, g, beta, slot_idx=None, pad_slot_id=-1, out=None):
    """Verify T tokens per row (prepared q, k [b, T, H, K]; v [b, T, HV, V]; g [b, T, HV(, K)]; beta [b, T, HV])
    over a GdnStatePool; returns y [b, T, HV, V]. The cursor history is advanced by `ops.slots.commit_reference`."""
    T, L, HV = v.shape[1], pool.buffer_len, pool.shape.num_v_heads
    check_spec_window(L, T)
    cd = torch.float64 if pool.checkpoint.dtype == torch.float64 else torch.float32
    y = torch.empty_like(v) if out is None else out
    for b, s in live_rows(slot_idx, v.shape[0], pool.num_slots, pad_slot_id):
        h = pool.window(s)[0]
        pos = pool.window(s, records=h + T)[1]
        S0 = pool.checkpoint[s].to(cd)
        S0_read = pool.read_state(s).to(cd)
        for i in range(T):
            n = h + i  # records before token i: the committed history and the window's tokens 0..i-1
            kw = expand_heads(pool.ring_k[s][:, pos[:n]].to(cd).transpose(0, 1), HV)
            uw = pool.ring_u[s][:, pos[:n]].to(cd).transpose(0, 1)
            gw = pool.ring_g[s][:, pos[:n]].to(cd).transpose(0, 1)
            kb = expand_heads(k[b, i].to(pool.ring_k.dtype).to(cd), HV)
            yi, u, _ = replay_row(S0, kw, uw, gw, expand_heads(q[b, i].to(cd), HV), kb, v[b, i].to(cd),
                                  g[b, i].to(torch.float32).to(cd), beta[b, i].to(cd), flush=False, S0_read=S0_read)
            y[b, i] = yi.to(y.dtype)
            pool.ring_u[s][:, pos[n]] = u.to(pool.ring_u.dtype)
            pool.ring_k[s][:, pos[n]] = k[b, i].to(pool.ring_k.dtype)
            pool.ring_g[s][:, pos[n]] = g[b, i].to(torch.float32)
        if h + 2 * T > L:
            if h:
                kw = expand_heads(pool.ring_k[s][:, pos[:h]].to(cd).transpose(0, 1), HV)
                S = fold_records(S0, kw, pool.ring_u[s][:, pos[:h]].to(cd).transpose(0, 1),
                                 pool.ring_g[s][:, pos[:h]].to(cd).transpose(0, 1))
                pool.checkpoint[s] = S.to(pool.checkpoint.dtype)
                pool.write_read_copy(s, S)
            pool.set_cursor(s, 0, origin=pos[h])
    return y


def snapshot_verify_reference(state, snapshots, q, k, v, g, beta, slot_idx=None, pad_slot_id=-1):
    """The conventional speculative path: snapshots[slot, i] := state after token i of the window."""
    T = v.shape[1]
    y = torch.empty_like(v)
    for b, s in live_rows(slot_idx, v.shape[0], state.shape[0], pad_slot_id):
        st = state[s:s + 1]
        for i in range(T):
            yi, st = gdn_step(st, q[b:b + 1, i], k[b:b + 1, i], v[b:b + 1, i], g[b:b + 1, i], beta[b:b + 1, i])
            st = st.to(snapshots.dtype)
            snapshots[s, i] = st[0]
            y[b, i] = yi[0].to(y.dtype)
    return y
