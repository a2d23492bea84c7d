"""The mixers' gated RMSNorm in a decode step: the fused kernel against transformers' module (the ~10 elementwise
and reduction kernels it runs), bf16 activations and weight, per layer.

Shapes: Nemotron-3 Super's Mamba-2 norm (8 groups of 1024 over 8192 channels, gate first, the gate a strided
slice of the input projection's output) and Qwen3.5-122B's GDN norm (64 value heads of 128, norm first, one row
per head). Same timing rules as the other benchmarks: a CUDA graph of many launches, median of event-timed
replays. The bytes column is the fused kernel's traffic: y and gate read, out written, weight read once.

    python benchmarks/bench_norm.py --batches 1,64,256,512
"""

from __future__ import annotations

import argparse

import torch

from trtllm_replayssm.bench.timing import time_graph_us
from trtllm_replayssm.ops.norm import gated_rmsnorm

# name: (channels D, group size, norm first, row width of the tensor the gate is sliced from)
SHAPES = {
    "Nemotron-3-Super": (8192, 1024, False, 8192 + 8192 + 2 * 8 * 128 + 128),
    "Qwen3.5-122B-A10B": (64 * 128, 128, True, 64 * 128),
}


def _module(D, group_size, norm_before_gate, device):
    if norm_before_gate:
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNormGated
        return Qwen3_5RMSNormGated(group_size, eps=1e-6).to(device, torch.bfloat16)
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHRMSNormGated
    return NemotronHRMSNormGated(D, group_size=group_size, eps=1e-5).to(device, torch.bfloat16)


def bench(name, batch, device):
    D, gs, norm_first, gate_width = SHAPES[name]
    norm = _module(D, gs, norm_first, device)
    y = torch.randn(batch, D, device=device, dtype=torch.bfloat16)
    gate = torch.randn(batch, gate_width, device=device, dtype=torch.bfloat16)[:, :D]
    out = torch.empty_like(y)
    rows = (-1, gs) if norm_first else (batch, D)  # Qwen3.5: one row per value head, as GdnMixer calls it
    y2, gate2, out2 = y.view(rows), gate.reshape(rows), out.view(rows)
    weight = norm.weight.detach()
    fused = time_graph_us(lambda: gated_rmsnorm(y2, gate2, weight, norm.variance_epsilon, gs, norm_first, out=out2),
                          200)
    module = time_graph_us(lambda: norm(y2, gate2), 50)
    nbytes = 2 * (3 * batch * D + weight.numel())
    return fused, module, nbytes / fused / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,64,256,512", help="comma-separated batch sizes")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of: {', '.join(SHAPES)}")
    args = ap.parse_args()
    device = torch.device("cuda")
    print("| shape | batch | fused µs | module µs | speed-up | fused GB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.shapes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            fused, module, gbs = bench(name, batch, device)
            print(f"| {name} | {batch} | {fused:.2f} | {module:.2f} | {module / fused:.1f}x | {gbs:.0f} |")


if __name__ == "__main__":
    main()
