"""The fp64 sequential oracles: the true state of each slot of a pool and its next outputs, and token-by-token
windows for both families written out independently of the package's references (the anchors of the op tests)."""

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


def window_truth(step, states, slot_idx, *inputs):
    """A window of T tokens per row run token by token in fp64 from each live row's slot state (states: fp64, one
    per slot, left unchanged). step(state, *inputs at one row and token, fp64) -> (y, new state). Returns y
    [b, T, ...] and the states after every token [b, T, ...], NaN at padding rows."""
    batch, T = inputs[0].shape[:2]
    ys, sts = {}, {}
    for b, s in enumerate(slot_idx.tolist()):
        st = states[s] if s >= 0 else None
        for i in range(T if s >= 0 else 0):
            ys[b, i], st = step(st, *(t[b, i].double().cpu() for t in inputs))
            sts[b, i] = st
    first = next(iter(ys))
    y = torch.full((batch, T, *ys[first].shape), float("nan"), dtype=torch.float64)
    st = torch.full((batch, T, *sts[first].shape), float("nan"), dtype=torch.float64)
    for key in ys:
        y[key], st[key] = ys[key], sts[key]
    return y, st


def mamba2_token(A, D=None, dt_bias=None):
    """The fp64 Mamba-2 step on one row's token for window_truth, written out head by head independently of the
    package's references: (S [H, P, N], x [H, P], raw dt [H], B, C [G, N], z [H, P] or None) -> (y [H, P], S').
    Per head h (group h // (H / G)): d = softplus(dt + dt_bias); S <- e^(A d) S + d x Bᵀ; y = S C + D x, times
    z sigmoid(z) when z is given."""
    A, D, dt_bias = (None if t is None else t.double().cpu() for t in (A, D, dt_bias))

    def step(S, x, dt, B, C, z=None):
        H, G = S.shape[0], B.shape[0]
        S_new, y = torch.empty_like(S, dtype=torch.float64), torch.empty(x.shape, dtype=torch.float64)
        for h in range(H):
            d = dt[h] + (0.0 if dt_bias is None else dt_bias[h])
            d = torch.log1p(torch.exp(d)) if d <= 20.0 else d
            g = h // (H // G)
            S_new[h] = torch.exp(A[h] * d) * S[h].double() + d * torch.outer(x[h], B[g])
            y[h] = S_new[h] @ C[g] + (0.0 if D is None else D[h] * x[h])
            if z is not None:
                y[h] = y[h] * z[h] * torch.sigmoid(z[h])
        return y, S_new
    return step


def gdn_gates(a, b, A_log, dt_bias):
    """fp64 GDN gates from the raw projections: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)."""
    a, b, A_log, dt_bias = (t.double().cpu() for t in (a, b, A_log, dt_bias))
    return -A_log.exp() * torch.log1p((a + dt_bias).exp()), 1.0 / (1.0 + (-b).exp())


def gdn_prepare(q, k):
    """fp64 q, k as the recurrence reads them: unit-norm rows, q scaled by K^-1/2."""
    q, k = q.double(), k.double()
    return q / q.norm(dim=-1, keepdim=True) / q.shape[-1] ** 0.5, k / k.norm(dim=-1, keepdim=True)


def gdn_token(S, q, k, v, g, beta):
    """One Gated DeltaNet token in fp64, value head by value head, written out independently of the package's
    references: S [HV, V, K]; prepared q, k [H, K] (value head h reads key head h // (HV / H)); v [HV, V];
    g, beta [HV]. Per head: S <- e^g S ; u = beta (v - S k) ; S <- S + u kᵀ ; y = S q. Returns (y [HV, V], S')."""
    HV, H = S.shape[0], q.shape[0]
    S_new, y = torch.empty_like(S, dtype=torch.float64), torch.empty(v.shape, dtype=torch.float64)
    for h in range(HV):
        kh, qh = k[h // (HV // H)].double(), q[h // (HV // H)].double()
        Sh = S[h].double() * torch.exp(g[h].double())
        u = beta[h].double() * (v[h].double() - Sh @ kh)
        S_new[h] = Sh + torch.outer(u, kh)
        y[h] = S_new[h] @ qh
    return y, S_new


def gdn_raw_token(A_log, dt_bias):
    """gdn_token on raw inputs for window_truth: (S, q, k, v, a, b) with q, k of any norm and the gate projections
    a, b [HV]; the gates and the q / k preparation written out here (gdn_gates, gdn_prepare)."""
    def step(S, q, k, v, a, b):
        g, beta = gdn_gates(a, b, A_log, dt_bias)
        return gdn_token(S, *gdn_prepare(q, k), v, g, beta)
    return step
