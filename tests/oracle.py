"""The fp64 sequential oracle for pools: the true state of each slot and its next outputs."""

from __future__ import annotations

import torch

from trtllm_replayssm.ops.mamba2.reference import mamba2_step


def fold_ring(pool, A) -> torch.Tensor:
    """fp64 [slots, H, P, N]: each slot's checkpoint with its ring records folded in sequentially."""
    L = pool.buffer_len
    states = pool.checkpoint.double().cpu().clone()
    hist, orig = pool.history(), pool.origin()
    for s in range(pool.num_slots):
        h, origin = int(hist[s]), int(orig[s])
        for j in range(h):
            p = (origin + j) % L
            x = pool.ring_x[s][:, p].double().cpu()[None]
            dt = pool.ring_dt[s][:, p].double().cpu()[None]
            B = pool.ring_B[s][:, p].double().cpu()[None]
            _, st = mamba2_step(states[s:s + 1], x, dt, A.double().cpu(), B, B, dt_softplus=False)
            states[s] = st[0]
    return states


class SequentialOracle:
    """Tracks every slot's state in fp64 and steps rows exactly as a conventional recurrence would."""

    def __init__(self, pool, A, D, dt_bias, dt_softplus=True):
        self.A, self.D, self.dt_bias, self.softplus = (A.double().cpu(), None if D is None else D.double().cpu(),
                                                       None if dt_bias is None else dt_bias.double().cpu(),
                                                       dt_softplus)
        self.states = fold_ring(pool, A)

    def step(self, slot_idx, x, dt, B, C, z):
        """Returns fp64 y [b, H, P] (NaN at padding rows) and advances the slots of non-padding rows."""
        batch = x.shape[0]
        idx = list(range(batch)) if slot_idx is None else slot_idx.tolist()
        y = torch.full(x.shape, float("nan"), dtype=torch.float64)
        for b, s in enumerate(idx):
            if s < 0:
                continue
            zb = None if z is None else z[b:b + 1].double().cpu()
            yb, st = mamba2_step(self.states[s:s + 1], x[b:b + 1].double().cpu(), dt[b:b + 1].double().cpu(),
                                 self.A, B[b:b + 1].double().cpu(), C[b:b + 1].double().cpu(), self.D, zb,
                                 self.dt_bias, self.softplus)
            self.states[s] = st[0]
            y[b] = yb[0]
        return y
