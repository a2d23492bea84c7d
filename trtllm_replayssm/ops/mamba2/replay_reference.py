"""ReplaySSM and conventional decode over a state pool, in PyTorch: what the kernels compute, row by row.

These functions take the same pool buffers and inputs as the kernels, round where the kernels round (state
stored in its dtype, ring records and y in the activation dtype, processed dt in fp32), and update the pool
in place. They run on CPU or GPU and are also the CPU implementation of the ops.

ReplaySSM step for one row, with h = records in the ring since the checkpoint S0 and the current token as
record h (t = h + 1 records; ring position of record j = (origin + j) mod L):
    suffix_j = sum_{i>j} dt_i,   w_j = dt_j exp(A suffix_j),   abar = exp(A sum_i dt_i)
    non-flush (h < L-1): y = abar (S0 C) + sum_j w_j (B_j·C) x_j ; append (x, B, dt) at position h; h += 1
    flush     (h = L-1): S = abar S0 + sum_j (w_j x_j) B_jᵀ ; store S ; y = S C ; h := 0
With a read copy (ReplayConfig.read_format) the output-only route reads S0 from it; the flush reads the
checkpoint and rewrites the copy from the new fp32 state.
The latency route (config.py; Mamba2StatePool.flushes_every_row): a step of few enough rows flushes every row,
whatever its history; at h = 0 that is the conventional step.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.ops.mamba2.reference import mamba2_step, output_epilogue, process_dt
from trtllm_replayssm.ops.slots import live_rows


def conventional_decode_reference(state, x, dt, B, C, A, D=None, z=None, dt_bias=None, dt_softplus=True,
                                  slot_idx=None, pad_slot_id=-1, out=None):
    """Conventional step on pool rows: state[slot] := updated state (in place). Returns y."""
    y = torch.empty_like(x) if out is None else out
    for b, s in live_rows(slot_idx, x.shape[0], state.shape[0], pad_slot_id):
        yb, new_state = mamba2_step(state[s:s + 1], x[b:b + 1], dt[b:b + 1], A, B[b:b + 1], C[b:b + 1], D,
                                    None if z is None else z[b:b + 1], dt_bias, dt_softplus)
        state[s] = new_state[0].to(state.dtype)
        y[b] = yb[0].to(y.dtype)
    return y


def replay_row(S0, xw, dtw, Bw, C, A, flush):
    """One row's replay in compute precision.

    S0 [H, P, N]; xw [t, H, P]; dtw [t, H] processed; Bw [t, H, N] (groups expanded); C [H, N]; A [H].
    Returns (y [H, P] before the epilogue, new checkpoint or None).
    """
    t = dtw.shape[0]
    suffix = torch.zeros_like(dtw)
    for j in range(t - 2, -1, -1):
        suffix[j] = suffix[j + 1] + dtw[j + 1]
    w = dtw * torch.exp(A * suffix)  # [t, H]
    abar = torch.exp(A * (suffix[0] + dtw[0]))  # [H]
    if flush:
        S = S0 * abar[:, None, None]
        for j in range(t):
            S = S + (w[j][:, None] * xw[j])[..., None] * Bw[j][:, None, :]
        return (S * C[:, None, :]).sum(-1), S
    bc = (Bw * C[None]).sum(-1)  # [t, H]
    y = abar[:, None] * (S0 * C[:, None, :]).sum(-1)
    y = y + ((w * bc)[..., None] * xw).sum(0)
    return y, None


def replay_decode_reference(pool, x, dt, B, C, A, D=None, z=None, dt_bias=None, dt_softplus=True,
                            slot_idx=None, pad_slot_id=-1, out=None):
    """ReplaySSM step over a Mamba2StatePool (updated in place: ring, cursor, checkpoint on flush rows)."""
    cd = torch.float64 if pool.checkpoint.dtype == torch.float64 else torch.float32
    L = pool.buffer_len  # a row flushes when its history reaches L - 1, or always on the latency route
    flush_all = pool.flushes_every_row(x.shape[0])
    hpg = pool.shape.heads_per_group
    y = torch.empty_like(x) if out is None else out
    dtp = process_dt(dt, dt_bias, dt_softplus, torch.float32).to(cd)  # the kernels keep dt in fp32
    Af = A.to(cd)
    for b, s in live_rows(slot_idx, x.shape[0], pool.num_slots, pad_slot_id):
        h, positions = pool.window(s)
        pos = positions[:h]
        xw = torch.cat([pool.ring_x[s][:, pos].to(cd).transpose(0, 1), x[b:b + 1].to(cd)])  # [t, H, P]
        dtw = torch.cat([pool.ring_dt[s][:, pos].to(cd).transpose(0, 1), dtp[b:b + 1]])  # [t, H]
        Bg = torch.cat([pool.ring_B[s][:, pos].to(cd).transpose(0, 1), B[b:b + 1].to(cd)])  # [t, G, N]
        Bw = Bg.repeat_interleave(hpg, dim=1)
        Ch = C[b].to(cd).repeat_interleave(hpg, dim=0)
        flush = flush_all or h == L - 1
        # The recurrence (flush) reads the checkpoint; the output-only route reads the read copy if any.
        S0 = pool.checkpoint[s] if flush else pool.read_state(s)
        yb, S = replay_row(S0.to(cd), xw, dtw, Bw, Ch, Af, flush)
        yb = output_epilogue(yb, x[b].to(cd), D, None if z is None else z[b], cd)
        y[b] = yb.to(y.dtype)
        pool.commit_step(s, S, ring_x=x[b], ring_B=B[b], ring_dt=dtp[b].float())
    return y
