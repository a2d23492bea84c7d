"""Speculative decoding with ReplaySSM: one Mamba-2 layer with its causal conv1d, T tokens (the last accepted
one and T-1 drafts) verified per step, and the accepted prefix committed by moving cursors on the device.
Run beside the snapshot path that engines use today (one state per window position, the accepted one copied
back): the outputs agree to rounding, and the memory per request is printed for both.

    python examples/speculative_decode.py      # GPU kernels if present, else the PyTorch references
"""

from __future__ import annotations

import math

import torch

from trtllm_replayssm import Mamba2LayerShape, Mamba2StatePool, ReplayConfig
from trtllm_replayssm.ops.conv1d import conv1d_commit, conv1d_verify
from trtllm_replayssm.ops.mamba2 import replay_verify, snapshot_verify
from trtllm_replayssm.ops.slots import snapshot_commit, spec_commit


def main(steps: int = 12, device: str | None = None) -> float:
    """Runs `steps` speculative steps; returns the largest relative difference between the two paths' outputs.
    Raises RuntimeError at the first step whose difference is not finite (a NaN or infinite output)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    T, k, batch = 4, 4, 3
    L = 16 + T  # the ring holds the committed history and a window of drafts (L >= 2T)
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=64, ngroups=2)
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    chans = H * P + 2 * G * N  # the conv runs over x, B and C together, as the Mamba-2 mixer does
    act = torch.float32

    pool = Mamba2StatePool(shape, num_slots=4, cfg=ReplayConfig(L, "fp32", "fp32"), device=device)
    for s in range(pool.num_slots):  # requests start from their prefill states (random here)
        pool.reset_slot(s, torch.randn(H, P, N, device=device) * 0.1)
    state = pool.checkpoint.clone()  # the snapshot path's states
    snapshots = torch.empty(pool.num_slots, T, H, P, N, device=device)
    windows = torch.randn(pool.num_slots, chans, k - 1 + T, device=device, dtype=act)  # conv history + window
    weight, bias = torch.randn(chans, k, device=device) * 0.5, torch.randn(chans, device=device) * 0.1
    A = -torch.exp(torch.rand(H, device=device) * math.log(16.0))
    D, dt_bias = torch.randn(H, device=device), torch.rand(H, device=device) - 3
    slots = torch.tensor([2, -1, 0], dtype=torch.int32, device=device)  # row 1 is padding
    live = slots >= 0

    worst = 0.0
    for step in range(steps):
        xbc = torch.randn(batch, T, chans, device=device, dtype=act)
        dt = torch.randn(batch, T, H, device=device, dtype=act) * 0.5
        z = torch.randn(batch, T, H, P, device=device, dtype=act)
        conv = conv1d_verify(windows, xbc, weight, bias, slot_idx=slots)
        x = conv[..., :H * P].reshape(batch, T, H, P).contiguous()
        B = conv[..., H * P:H * P + G * N].reshape(batch, T, G, N).contiguous()
        C = conv[..., H * P + G * N:].reshape(batch, T, G, N).contiguous()
        kw = dict(D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        y = replay_verify(pool, x, dt, B, C, A, **kw)
        y_snap = snapshot_verify(state, snapshots, x, dt, B, C, A, **kw)
        # The target model accepts a prefix of each row's window (1..T tokens); the counts stay on the device.
        accepted = torch.randint(1, T + 1, (batch,), dtype=torch.int32, device=device)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        snapshot_commit(state, snapshots, accepted, slot_idx=slots)
        conv1d_commit(windows, accepted, k, slot_idx=slots)
        diff = ((y[live] - y_snap[live]).norm() / y_snap[live].norm()).item()
        if not math.isfinite(diff):  # max() would skip a NaN: max(0.0, nan) is 0.0
            raise RuntimeError(f"step {step}: the outputs are not finite (replay vs snapshot {diff})")
        worst = max(worst, diff)
        print(f"step {step:2d}: accepted {accepted.tolist()}, ring history {pool.history()[[2, 0]].tolist()}, "
              f"replay vs snapshot {diff:.1e}")

    replay_bytes = pool.bytes_per_slot()["total"]
    snapshot_bytes = (T + 1) * pool.bytes_per_slot()["checkpoint"]  # the state and its T snapshots
    print(f"SSM bytes per request: ReplaySSM {replay_bytes / 2**20:.2f} MiB, snapshot path "
          f"{snapshot_bytes / 2**20:.2f} MiB")
    return worst


if __name__ == "__main__":
    main()
