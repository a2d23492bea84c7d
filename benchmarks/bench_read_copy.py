"""Mamba-2 and Gated DeltaNet ReplaySSM decode with read copies (issue 5): per read format, the non-flush step
(every row on the output-only route), the all-flush step and the amortised step (L steps, flush phases staggered
across rows), against fp32 reads (read format none) and our conventional kernel. fp32 checkpoint, bf16
activations; Mamba-2 with the z gate, GDN with prepared q, k and precomputed g, beta. GDN has no nvfp4 copy (its
rows show "-"), and its non-flush step reads the checkpoint (S0 k, which feeds the correction u) AND the copy
(S0 q): the bytes model counts both.

Same timing rules as bench_mamba2.py: CUDA graph of many launches, median of event-timed replays, a pool of
slots larger than L2 (shuffled slot indices). The bytes column is the non-flush step's traffic model: the copy
(or checkpoint) tile read, plus the ring window at history L/2, the new record and the step's inputs/outputs.

    python benchmarks/bench_read_copy.py --read-formats none,bf16,fp8,nvfp4 --batches 64,256,512 \\
        --out benchmarks/read_copy.md
    python benchmarks/bench_read_copy.py --shapes Nemotron-3-Super,Qwen3.5-122B-A10B --read-formats none,fp16,bf16,fp8
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from trtllm_replayssm.bench.bytes_model import gdn_io_bytes, mamba2_io_bytes
from trtllm_replayssm.bench.timing import copy_bandwidth_gbs, median_of_passes, pool_slots, time_graph_us
from trtllm_replayssm.config import CURSOR_HISTORY, GDN_KERNEL_READ_FORMATS, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.gdn.reference import l2norm
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool, read_copy_specs
from trtllm_replayssm.quant import quantize_state

SHAPES = {
    "Nemotron-3-Super": Mamba2LayerShape(128, 64, 128, 8),
    "Nemotron-3-Nano-30B": Mamba2LayerShape(64, 64, 128, 8),
    "Qwen3.5-122B-A10B": GdnLayerShape(16, 64, 128, 128),  # GDN (benchmarks/bench_gdn.py)
}


def nonflush_bytes(shape: Mamba2LayerShape, L: int, fmt: str, act_bytes: int = 2) -> float:
    """Per row, one output-only step at history L/2: the read tile (the copy with all its scales, as the pool
    lays it out, or the fp32 checkpoint), L/2 ring records read, one record written, inputs and outputs."""
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    specs = read_copy_specs((H, P, N), fmt)
    tile = H * P * N * 4 if fmt == "none" else sum(s.bytes_per_slot for s in specs)
    record = act_bytes * (H * P + G * N) + 4 * H
    return tile + record * (L // 2 + 1) + mamba2_io_bytes(shape, act_bytes)


def gdn_nonflush_bytes(shape: GdnLayerShape, L: int, fmt: str, act_bytes: int = 2) -> float:
    """GDN, per row, one output-only step at history L/2: the fp32 checkpoint tile (S0 k) plus the copy with its
    scales (S0 q; none: the checkpoint serves both), L/2 ring records read, one record written, inputs, outputs."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    tile = HV * V * K * 4 + sum(s.bytes_per_slot for s in read_copy_specs((HV, V, K), fmt))
    record = act_bytes * (HV * V + H * K) + 4 * HV
    return tile + record * (L // 2 + 1) + gdn_io_bytes(shape, act_bytes)


def bench_point_gdn(shape_name, shape, batch, L, formats, launches, reverse=False):
    dev = torch.device("cuda")
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    num_slots = pool_slots(batch, HV * V * K * 4)
    q = (l2norm(torch.randn(batch, H, K, device=dev)) * K ** -0.5).bfloat16()
    k = l2norm(torch.randn(batch, H, K, device=dev)).bfloat16()
    v = torch.randn(batch, HV, V, device=dev).bfloat16()
    g = -torch.rand(batch, HV, device=dev) * 0.2 - 0.01
    beta = torch.rand(batch, HV, device=dev) * 0.9 + 0.05
    idx = torch.randperm(num_slots, device=dev)[:batch].to(torch.int32)
    out = torch.empty_like(v)
    prepared = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, slot_idx=idx, out=out)
    row = {"shape": shape_name, "batch": batch, "L": L, "slots": num_slots}

    def conv():
        state = torch.randn(num_slots, HV, V, K, device=dev) * 0.1
        row["conv_us"] = time_graph_us(lambda: gdn_conventional_decode(state, shape, q, k, v, **prepared), launches)
        del state
        torch.cuda.empty_cache()

    if not reverse:
        conv()
    for fmt in (reversed(formats) if reverse else formats):
        if fmt != "none" and fmt not in GDN_KERNEL_READ_FORMATS:
            continue  # no GDN kernel for this copy: the table shows "-"
        pool = GdnStatePool(shape, num_slots, ReplayConfig(L, torch.float32, torch.bfloat16, fmt), device=dev)
        pool.checkpoint.normal_(0, 0.1)
        pool.ring_u.normal_(0, 0.1)
        pool.ring_k.copy_(l2norm(torch.randn(pool.ring_k.shape, device=dev)))
        pool.ring_g.uniform_(-0.2, -0.01)
        if fmt != "none":  # one scale per row: the whole pool at once equals slot by slot
            for name, part in quantize_state(pool.checkpoint, fmt).items():
                pool.buffers[name].copy_(part)
        pool.set_cursor(idx.long(), torch.arange(batch, device=dev, dtype=torch.int32) % L)
        step = lambda: gdn_replay_decode(pool, q, k, v, **prepared)
        row[f"{fmt}_amortised_us"] = time_graph_us(step, L * max(1, launches // L))
        hist = pool.cursor[..., CURSOR_HISTORY]
        fill_us = time_graph_us(lambda: hist.fill_(L // 2), launches)
        row[f"{fmt}_nonflush_us"] = time_graph_us(lambda: (hist.fill_(L // 2), step()), launches) - fill_us
        row[f"{fmt}_allflush_us"] = time_graph_us(lambda: (hist.fill_(L - 1), step()), launches) - fill_us
        row[f"{fmt}_nonflush_tbs"] = (gdn_nonflush_bytes(shape, L, fmt) * batch
                                      / (row[f"{fmt}_nonflush_us"] * 1e-6) / 1e12)
        del pool
        torch.cuda.empty_cache()
    if reverse:
        conv()
    return row


def bench_point(shape_name, shape, batch, L, formats, launches, reverse=False):
    """One (shape, batch) row: our conventional kernel, then each read format in turn (reverse: the formats in
    the opposite order, then the conventional kernel)."""
    if isinstance(shape, GdnLayerShape):
        return bench_point_gdn(shape_name, shape, batch, L, formats, launches, reverse)
    dev = torch.device("cuda")
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    num_slots = pool_slots(batch, H * P * N * 4)
    A = -torch.exp(torch.rand(H, device=dev) * math.log(16.0))
    D = torch.randn(H, device=dev)
    dt_bias = torch.rand(H, device=dev) * 3 - 4
    x = torch.randn(batch, H, P, device=dev).bfloat16()
    z = torch.randn(batch, H, P, device=dev).bfloat16()
    dt = (torch.randn(batch, H, device=dev) * 0.5).bfloat16()
    B = torch.randn(batch, G, N, device=dev).bfloat16()
    C = torch.randn(batch, G, N, device=dev).bfloat16()
    idx = torch.randperm(num_slots, device=dev)[:batch].to(torch.int32)
    out = torch.empty_like(x)
    row = {"shape": shape_name, "batch": batch, "L": L, "slots": num_slots}

    def conv():
        state = torch.randn(num_slots, H, P, N, device=dev)
        row["conv_us"] = time_graph_us(
            lambda: conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=idx, out=out),
            launches)
        del state
        torch.cuda.empty_cache()

    if not reverse:
        conv()
    for fmt in (reversed(formats) if reverse else formats):
        pool = Mamba2StatePool(shape, num_slots, ReplayConfig(L, torch.float32, torch.bfloat16, fmt), device=dev)
        pool.checkpoint.normal_()
        pool.ring_x.normal_()
        pool.ring_B.normal_()
        pool.ring_dt.uniform_(0.01, 0.3)
        if fmt != "none":  # scales per row / 4 rows / 16 elements: the whole pool at once equals slot by slot
            for name, part in quantize_state(pool.checkpoint, fmt).items():
                pool.buffers[name].copy_(part)
        pool.set_cursor(idx.long(), torch.arange(batch, device=dev, dtype=torch.int32) % L)
        step = lambda: replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=idx, out=out)
        row[f"{fmt}_amortised_us"] = time_graph_us(step, L * max(1, launches // L))
        hist = pool.cursor[..., CURSOR_HISTORY]
        fill_us = time_graph_us(lambda: hist.fill_(L // 2), launches)
        row[f"{fmt}_nonflush_us"] = time_graph_us(lambda: (hist.fill_(L // 2), step()), launches) - fill_us
        row[f"{fmt}_allflush_us"] = time_graph_us(lambda: (hist.fill_(L - 1), step()), launches) - fill_us
        row[f"{fmt}_nonflush_tbs"] = nonflush_bytes(shape, L, fmt) * batch / (row[f"{fmt}_nonflush_us"] * 1e-6) / 1e12
        del pool
        torch.cuda.empty_cache()
    if reverse:
        conv()
    return row


def render(rows, formats, copy_gbs, device_name, passes=1):
    lines = [f"# Mamba-2 decode with read copies ({device_name})", "",
             f"fp32 checkpoint, bf16 activations, z gate, D, dt_bias. CUDA graphs, median µs per step; copy bandwidth "
             f"(read+write) in the same run: **{copy_gbs / 1e3:.2f} TB/s**. Per read format: non-flush step (every "
             f"row output-only, history L/2), all-flush step, amortised step (staggered phases); `vs fp32` = "
             f"speed-up over read format none; `vs conv` = amortised speed-up over our conventional kernel; TB/s = "
             f"non-flush bytes model (benchmarks/bench_read_copy.py) over the time."
             + (f" Each figure is the median of {passes} passes over its point, every other pass timing the "
                f"methods in the opposite order." if passes > 1 else ""), ""]
    if any(r["shape"] in SHAPES and isinstance(SHAPES[r["shape"]], GdnLayerShape) for r in rows):
        lines += ["GDN rows (Qwen3.5): prepared q, k, precomputed g, beta. A GDN non-flush row reads the fp32 "
                  "checkpoint (S0 k feeds the correction u, hence the recurrence) and the copy (S0 q): a copy adds "
                  "traffic there; no nvfp4 copy for GDN (`-`).", ""]
    head = ["shape", "batch", "L", "conv µs", "read", "non-flush µs", "vs fp32", "TB/s", "all-flush µs",
            "amortised µs", "vs fp32", "vs conv"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        for fmt in formats:
            if f"{fmt}_nonflush_us" not in r:  # a format without a kernel for this family (GDN nvfp4)
                lines.append("| " + " | ".join([r["shape"], str(r["batch"]), str(r["L"]), f"{r['conv_us']:.1f}", fmt]
                                               + ["-"] * (len(head) - 5)) + " |")
                continue
            nf, am = r[f"{fmt}_nonflush_us"], r[f"{fmt}_amortised_us"]
            nf0, am0 = r.get("none_nonflush_us"), r.get("none_amortised_us")
            cells = [r["shape"], str(r["batch"]), str(r["L"]), f"{r['conv_us']:.1f}", fmt, f"{nf:.1f}",
                     f"{nf0 / nf:.2f}x" if nf0 else "-", f"{r[f'{fmt}_nonflush_tbs']:.2f}",
                     f"{r[f'{fmt}_allflush_us']:.1f}", f"{am:.1f}", f"{am0 / am:.2f}x" if am0 else "-",
                     f"{r['conv_us'] / am:.2f}x"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--read-formats", default="none,fp16,bf16,fp8,nvfp4",
                    help="read formats to time (comma separated; 'none' = fp32 reads of the checkpoint)")
    ap.add_argument("--shapes", default="Nemotron-3-Super")
    ap.add_argument("--batches", default="64,256,512")
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--launches", type=int, default=32, help="launches per CUDA graph")
    ap.add_argument("--passes", type=int, default=1,
                    help="passes over each point, every other one in the opposite order; each figure is the median "
                         "over the passes (use an odd number)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    formats = args.read_formats.split(",")
    copy_gbs = copy_bandwidth_gbs()
    print(f"# copy bandwidth (read+write): {copy_gbs / 1e3:.2f} TB/s", flush=True)
    rows, pass_rows, t0 = [], [], time.time()
    for name in args.shapes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            passes = [bench_point(name, SHAPES[name], batch, args.L, formats, args.launches, i % 2 == 1)
                      for i in range(args.passes)]
            pass_rows.append(passes)
            r = median_of_passes(passes)
            rows.append(r)
            print(json.dumps(r), flush=True)
    text = render(rows, formats, copy_gbs, torch.cuda.get_device_name(), args.passes)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy_gbs, "passes": args.passes, "rows": rows,
                                         "pass_rows": pass_rows if args.passes > 1 else None}, indent=1))
    print(f"# {time.time() - t0:.0f} s")
    print(text)


if __name__ == "__main__":
    main()
