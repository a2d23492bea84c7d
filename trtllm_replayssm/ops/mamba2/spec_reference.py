"""Speculative decoding for Mamba-2, in PyTorch: ReplaySSM verify + commit over a pool, and the conventional
snapshot path that engines run today. The specification of the speculative kernels.

A step verifies T tokens at once (the last accepted token and T-1 drafts). For one row with h committed
records since the checkpoint S0 (ring position of record j = (origin + j) mod L):

    verify : write the T tokens' records at h .. h+T-1; output s (s = 0..T-1) replays records 0 .. h+s:
             y_s = abar_{h+s} (S0·C_s) + sum_{j<=h+s} w_{j,h+s} (B_j·C_s) x_j
    flush  : if h + 2T > L ("one window early", so the next step has T free records): fold the h committed
             records into S0, move the origin past them (origin += h), h := 0. The drafts just written are
             not folded: after the next commit the accepted ones are the new history, with no copy.
    commit : h += a (a = accepted tokens of this row, 1..T, from a device tensor); rejected records are
             overwritten by the next verify.

The ring must hold two windows: L >= 2T. The snapshot path stores the state after every token of the window
(T states per request) and restores the one at the accepted count.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.ops.mamba2.reference import mamba2_step, output_epilogue, process_dt
from trtllm_replayssm.ops.mamba2.replay_reference import replay_row
from trtllm_replayssm.ops.slots import check_spec_window, live_rows


def replay_verify_reference(pool, x, dt, B, C, A, D=None, z=None, dt_bias=None, dt_softplus=True, slot_idx=None,
                            pad_slot_id=-1, out=None):
    """Verify T tokens per row (x, z [b, T, H, P]; dt [b, T, H]; B, C [b, T, G, N]) over a Mamba2StatePool.

    Writes the T records into the ring, returns y [b, T, H, P], and flushes the committed history of rows with
    h + 2T > L. The cursor history is not advanced: `ops.slots.commit_reference` does that with the accepted counts.
    """
    T, L = x.shape[1], pool.buffer_len
    check_spec_window(L, T)
    cd = torch.float64 if pool.checkpoint.dtype == torch.float64 else torch.float32
    hpg = pool.shape.heads_per_group
    y = torch.empty_like(x) if out is None else out
    dtp = process_dt(dt, dt_bias, dt_softplus, torch.float32)
    for b, s in live_rows(slot_idx, x.shape[0], pool.num_slots, pad_slot_id):
        h = pool.window(s)[0]
        pos = pool.window(s, records=h + T)[1]
        if h + T > L:
            raise ValueError(f"slot {s}: history {h} + T={T} exceeds the ring (L={L}); a flush was missed")
        for i in range(T):  # the window's T records, as the kernels store them
            pool.ring_x[s][:, pos[h + i]] = x[b, i].to(pool.ring_x.dtype)
            pool.ring_B[s][:, pos[h + i]] = B[b, i].to(pool.ring_B.dtype)
            pool.ring_dt[s][:, pos[h + i]] = dtp[b, i]
        xw = pool.ring_x[s][:, pos].to(cd).transpose(0, 1)  # [h+T, H, P]
        dtw = pool.ring_dt[s][:, pos].to(cd).transpose(0, 1)  # [h+T, H]
        Bw = pool.ring_B[s][:, pos].to(cd).transpose(0, 1).repeat_interleave(hpg, dim=1)  # [h+T, H, N]
        S0 = pool.checkpoint[s].to(cd)
        S0_read = pool.read_state(s).to(cd)  # outputs read the read copy (if any), the fold the checkpoint
        for i in range(T):
            Ch = C[b, i].to(cd).repeat_interleave(hpg, dim=0)
            yi, _ = replay_row(S0_read, xw[:h + i + 1], dtw[:h + i + 1], Bw[:h + i + 1], Ch, A.to(cd), flush=False)
            y[b, i] = output_epilogue(yi, x[b, i].to(cd), D, None if z is None else z[b, i], cd).to(y.dtype)
        if h + 2 * T > L:
            if h:
                _, S = replay_row(S0, xw[:h], dtw[:h], Bw[:h], Bw[0], A.to(cd), flush=True)
                pool.checkpoint[s] = S.to(pool.checkpoint.dtype)
                pool.write_read_copy(s, S)
            pool.set_cursor(s, 0, origin=pos[h])
    return y


def snapshot_verify_reference(state, snapshots, x, dt, B, C, A, D=None, z=None, dt_bias=None, dt_softplus=True,
                              slot_idx=None, pad_slot_id=-1):
    """The conventional speculative path: snapshots[slot, i] := state after token i of the window. Returns y."""
    T = x.shape[1]
    y = torch.empty_like(x)
    for b, s in live_rows(slot_idx, x.shape[0], state.shape[0], pad_slot_id):
        st = state[s:s + 1]
        for i in range(T):
            yi, st = mamba2_step(st, x[b:b + 1, i], dt[b:b + 1, i], A, B[b:b + 1, i], C[b:b + 1, i], D,
                                 None if z is None else z[b:b + 1, i], dt_bias, dt_softplus)
            st = st.to(snapshots.dtype)
            snapshots[s, i] = st[0]
            y[b, i] = yi[0].to(y.dtype)
    return y
