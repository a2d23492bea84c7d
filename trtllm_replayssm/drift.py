"""Drift of decode outputs over long generations, per state-precision configuration.

Each configuration decodes the same random token stream through Mamba-2 layers of realistic magnitudes
(seeded); its outputs are compared step by step with fp32 conventional decoding. A read copy is written at
flush and only read by the output-only route, so its rounding does not compound; a "shared" low-precision
checkpoint quantises the recurrence itself after every step, so its rounding feeds the next update.
"""

from __future__ import annotations

import math
import time

import torch

from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2.replay_reference import conventional_decode_reference, replay_decode_reference
from trtllm_replayssm.pool import Mamba2StatePool
from trtllm_replayssm.quant import dequantize_state, quantize_state

CONFIGS = {
    "replay fp32": ("replay", "none"),
    "replay fp32 + bf16 reads": ("replay", "bf16"),
    "replay fp32 + fp8 reads": ("replay", "fp8"),
    "replay fp32 + nvfp4 reads": ("replay", "nvfp4"),
    "shared fp8 checkpoint": ("shared", "fp8"),
    "shared nvfp4 checkpoint": ("shared", "nvfp4"),
}


def run_drift(steps: int, shape: Mamba2LayerShape, batch: int = 2, buffer_len: int = 16, seed: int = 0,
              configs=tuple(CONFIGS), device="cpu", progress=None) -> dict:
    """Per configuration, the relative output error (vs fp32 conventional) at every step: {name: [err, ...]}.
    progress, when given, wraps the iterable of steps (e.g. a tqdm bar)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups

    def rnd(*size):
        return torch.randn(*size, generator=g).to(device)

    # Mamba-2's initialisation: A in [-16, -1], dt log-uniform in [1e-3, 1e-1] through dt_bias = softplus^-1(dt);
    # the slowest heads then remember ~1000 steps, where a quantised recurrence has time to compound.
    A = -(1 + 15 * torch.rand(H, generator=g)).to(device)
    dt0 = torch.exp(math.log(1e-3) + torch.rand(H, generator=g) * math.log(100.0))
    D, dt_bias = rnd(H), (dt0 + torch.log(-torch.expm1(-dt0))).to(device)
    S_init = rnd(batch, H, P, N)
    ref_state = S_init.clone()
    runs = {}
    for name in configs:
        kind, fmt = CONFIGS[name]
        if kind == "replay":
            # latency route off: the drift of the ring's arithmetic is what the replay rows measure
            pool = Mamba2StatePool(shape, batch, ReplayConfig(buffer_len, torch.float32, torch.float32, fmt,
                                                              latency_route_bytes=0), device)
            for s in range(batch):
                pool.reset_slot(s, S_init[s])
            runs[name] = (kind, fmt, pool)
        else:
            runs[name] = (kind, fmt, dequantize_state(quantize_state(S_init, fmt), fmt))
    errors = {name: [] for name in configs}
    for _ in (progress or iter)(range(steps)):
        x, z = rnd(batch, H, P), rnd(batch, H, P)
        dt, B, C = rnd(batch, H) * 0.5, rnd(batch, G, N), rnd(batch, G, N)
        y_ref = conventional_decode_reference(ref_state, x, dt, B, C, A, D, z, dt_bias)
        for name, (kind, fmt, st) in runs.items():
            if kind == "replay":
                y = replay_decode_reference(st, x, dt, B, C, A, D, z, dt_bias)
            else:
                y = conventional_decode_reference(st, x, dt, B, C, A, D, z, dt_bias)
                st.copy_(dequantize_state(quantize_state(st, fmt), fmt))  # the recurrence itself is quantised
            errors[name].append(float((y - y_ref).norm() / y_ref.norm()))
    return errors


def summarize(errors: dict, checkpoints) -> list[tuple]:
    """(name, [mean error over the last tenth of the steps up to each checkpoint])."""
    rows = []
    for name, errs in errors.items():
        cells = []
        for c in checkpoints:
            window = errs[max(0, c - max(1, c // 10)):c]
            cells.append(sum(window) / len(window) if window and c <= len(errs) else float("nan"))
        rows.append((name, cells))
    return rows


def format_table(rows, checkpoints) -> str:
    head = "| configuration | " + " | ".join(f"{c} steps" for c in checkpoints) + " |"
    lines = [head, "|" + "---|" * (len(checkpoints) + 1)]
    for name, cells in rows:
        lines.append(f"| {name} | " + " | ".join(f"{v:.2e}" for v in cells) + " |")
    return "\n".join(lines)


def plot(errors: dict, path: str) -> bool:
    """Writes a PNG of the error against the step when matplotlib is installed; returns whether it did."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, errs in errors.items():
        k = max(1, len(errs) // 200)  # smooth to ~200 points
        xs = list(range(k, len(errs) + 1, k))
        ax.plot(xs, [sum(errs[i - k:i]) / k for i in xs], label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("decode step")
    ax.set_ylabel("relative output error vs fp32 conventional")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def timed_run(steps, shape, **kw):
    t0 = time.time()
    errors = run_drift(steps, shape, **kw)
    return errors, time.time() - t0
