"""One decode step of each family, timed for A/B comparisons of kernel-library builds in one device run.

    RSSM_LIBRARY=<build>/libreplayssm.so python benchmarks/ab_step.py NAME [--batches 64,256] [--L 16]
        [--families mamba2,gdn] [--conv-only] [--fla-cfg VK/BV8/w1/s3 [--fla-wheel WHEEL]] [--env VAR=v1,v2]
        [--graph-launches N]

Prints one line per (family, batch): our conventional step, the ReplaySSM step amortised over staggered
cursors, every row on the output-only route (history L/2) or every row flushing; the amortised step's achieved
bandwidth (trtllm_replayssm/bench/bytes_model.py over its time) and its fraction of the copy bandwidth measured at
the start of the run. Mamba-2: Nemotron-3-Super
shape; GDN: Qwen3.5-122B-A10B; fp32 state, bf16 activations, CUDA graphs (trtllm_replayssm.bench.timing); the
launches of a graph rotate over disjoint sets of rows as the benchmark tables do (cold L2 at small batches).
benchmarks/ab_variants.sh builds several plugin trees and runs this against each. --conv-only: the conventional
step alone; --fla-cfg: GDN lines also time fla-core's kernel (benchmarks/bench_gdn.py fla_kernel_step) at that
layout / BV / warps / stages on contiguous windows of the same pool, and our kernel on the same windows.
"""

import argparse
import itertools
import os

import torch

from trtllm_replayssm.bench.bytes_model import gdn_replay_amortised_bytes, mamba2_replay_amortised_bytes
from trtllm_replayssm.bench.inputs import gdn_step_inputs, mamba2_step_inputs
from trtllm_replayssm.bench.timing import cold_slot_sets, copy_bandwidth_gbs, graph_launches, pool_slots, time_graph_us
from trtllm_replayssm.config import CURSOR_HISTORY, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

LAUNCHES = 64
GRAPH_LAUNCHES = None  # --graph-launches: exact launches per graph for every GDN line (diagnostics)


def bandwidth(nbytes, us, copy_gbs):
    """Achieved TB/s of a step moving `nbytes` in `us`, and its share of the copy bandwidth."""
    tbs = nbytes / (us * 1e-6) / 1e12
    return f"{tbs:4.2f} TB/s ({tbs * 1e3 / copy_gbs:4.0%} of copy)"


def replay_steps_us(pool, step, L, n):
    """The replay step amortised over the pool's staggered cursors, then with every row at history L/2 (non-flush)
    and every row flushing (the cursor fill timed alone and subtracted)."""
    amortised = time_graph_us(step, n)
    hist = pool.cursor[..., CURSOR_HISTORY]
    fill = time_graph_us(lambda: hist.fill_(L // 2), n)
    nonflush = time_graph_us(lambda: (hist.fill_(L // 2), step()), n) - fill
    allflush = time_graph_us(lambda: (hist.fill_(L - 1), step()), n) - fill
    return amortised, nonflush, allflush


def mamba2_line(name, batch, L, dev, copy_gbs, latency_route_bytes=None):
    shape, (H, P, N, G) = Mamba2LayerShape(128, 64, 128, 8), (128, 64, 128, 8)
    slots = pool_slots(batch, H * P * N * 4)
    slot_sets = cold_slot_sets(slots, batch, H * P * N * 4, device=dev)
    n, order = graph_launches(LAUNCHES, len(slot_sets), L), torch.cat(slot_sets).long()
    inp = mamba2_step_inputs(shape, batch, dev)
    x, dt, B, C, A = (inp[n] for n in ("x", "dt", "B", "C", "A"))
    pool = Mamba2StatePool(shape, slots, ReplayConfig(L, torch.float32, torch.bfloat16,
                                                      latency_route_bytes=latency_route_bytes), device=dev)
    pool.checkpoint.normal_()
    pool.ring_x.normal_()
    pool.ring_B.normal_()
    pool.ring_dt.uniform_(0.01, 0.3)
    kw = {n: inp[n] for n in ("D", "z", "dt_bias", "out")}
    sets = itertools.cycle(slot_sets)
    conv = time_graph_us(lambda: conventional_decode(pool.checkpoint, x, dt, B, C, A, slot_idx=next(sets), **kw), n)
    pool.set_cursor(order, torch.arange(order.numel(), device=dev, dtype=torch.int32) % L)
    step = lambda: replay_decode(pool, x, dt, B, C, A, slot_idx=next(sets), **kw)  # noqa: E731
    amortised, nonflush, allflush = replay_steps_us(pool, step, L, n)
    moved = batch * mamba2_replay_amortised_bytes(shape, L, 4, 2)
    return (f"{name:12s} mamba2 b{batch:<4d} conv {conv:7.1f}  replay L{L} {amortised:7.1f}  "
            f"non-flush {nonflush:7.1f}  all-flush {allflush:7.1f}  {bandwidth(moved, amortised, copy_gbs)}")


def gdn_line(name, batch, L, dev, copy_gbs, latency_route_bytes=None, conv_only=False, fla=None):
    shape, (H, HV, K) = GdnLayerShape(16, 64, 128, 128), (16, 64, 128)
    slots = pool_slots(batch, HV * K * K * 4)
    slot_sets = cold_slot_sets(slots, batch, HV * K * K * 4, device=dev)
    n, order = graph_launches(LAUNCHES, len(slot_sets), L), torch.cat(slot_sets).long()
    n = GRAPH_LAUNCHES or n
    inp = gdn_step_inputs(shape, batch, dev)
    q, k, v, g, beta = (inp[n] for n in ("q", "k", "v", "g", "beta"))
    kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, out=inp["out"])
    sets = itertools.cycle(slot_sets)
    pool = GdnStatePool(shape, slots, ReplayConfig(L, torch.float32, torch.bfloat16,
                                                   latency_route_bytes=latency_route_bytes), device=dev)
    pool.checkpoint.normal_()
    pool.ring_u.normal_()
    pool.ring_k.normal_()
    pool.ring_g.uniform_(-0.3, -0.01)
    conv = time_graph_us(lambda: gdn_conventional_decode(pool.checkpoint, shape, q, k, v, slot_idx=next(sets), **kw), n)
    line = f"{name:12s} gdn    b{batch:<4d} conv {conv:7.1f}"
    if fla is not None:
        fr, (v_first, bv, warps, stages) = fla
        from bench_gdn import fla_kernel_step

        windows = [torch.arange(j * batch, (j + 1) * batch, device=dev, dtype=torch.int32)
                   for j in range(len(slot_sets))]
        wsets = itertools.cycle(windows)
        conv_w = time_graph_us(
            lambda: gdn_conventional_decode(pool.checkpoint, shape, q, k, v, slot_idx=next(wsets), **kw), n)
        st = pool.checkpoint if v_first else pool.checkpoint.view(slots, HV, K, K)
        args = (q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None])
        step = fla_kernel_step(fr, [st[j * batch:(j + 1) * batch] for j in range(len(slot_sets))], *args,
                               torch.empty_like(args[2]), v_first, bv, warps, stages)
        fla_us = time_graph_us(step, n)
        line += f"  conv (windows) {conv_w:7.1f}  fla {fla_us:7.1f}  conv/fla {conv / fla_us:6.3f}"
    if conv_only:
        return line
    pool.set_cursor(order, torch.arange(order.numel(), device=dev, dtype=torch.int32) % L)
    step = lambda: gdn_replay_decode(pool, q, k, v, slot_idx=next(sets), **kw)  # noqa: E731
    amortised, nonflush, allflush = replay_steps_us(pool, step, L, n)
    moved = batch * gdn_replay_amortised_bytes(shape, L, 4, 2)
    return (f"{line}  replay L{L} {amortised:7.1f}  "
            f"non-flush {nonflush:7.1f}  all-flush {allflush:7.1f}  {bandwidth(moved, amortised, copy_gbs)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--latency-route-bytes", type=int, default=None,
                    help="latency route limit (default: the config's; 0 turns the route off)")
    ap.add_argument("--families", default="mamba2,gdn", help="which families to time (mamba2, gdn)")
    ap.add_argument("--conv-only", action="store_true", help="GDN: the conventional step only")
    ap.add_argument("--fla-cfg", default=None, help="GDN: also fla-core's kernel at this config, e.g. VK/BV8/w1/s3")
    ap.add_argument("--fla-wheel", default=".cache/wheels/fla_core-0.6.0-py3-none-any.whl")
    ap.add_argument("--env", default=None, help="VAR=v1,v2,...: time the library under each value of an environment "
                    "knob it reads at launch (RSSM_NVFP4_LEAN, RSSM_ROUTES, ...), in two alternating passes")
    ap.add_argument("--graph-launches", type=int, default=None,
                    help="GDN: exactly this many launches per CUDA graph for every method (default: as the tables)")
    args = ap.parse_args()
    global GRAPH_LAUNCHES
    GRAPH_LAUNCHES = args.graph_launches
    families = set(args.families.split(","))
    dev = torch.device("cuda")
    fla = None
    if args.fla_cfg:
        from pathlib import Path

        from bench_gdn import load_fla_fused_recurrent, parse_fla_cfg

        fr, _ = load_fla_fused_recurrent(Path(args.fla_wheel))
        fla = (fr, parse_fla_cfg(args.fla_cfg))
    copy_gbs = copy_bandwidth_gbs()
    print(f"{args.name:12s} copy bandwidth {copy_gbs / 1e3:.2f} TB/s", flush=True)
    runs = [(args.name, None, None)]
    if args.env:
        var, values = args.env.split("=", 1)
        runs = [(f"{args.name}:{value}", var, value) for _ in range(2) for value in values.split(",")]
    for name, var, value in runs:
        if var is not None:
            os.environ[var] = value  # the library reads it at every launch
        for batch in (int(b) for b in args.batches.split(",")):
            if "mamba2" in families:
                print(mamba2_line(name, batch, args.L, dev, copy_gbs, args.latency_route_bytes), flush=True)
                torch.cuda.empty_cache()
            if "gdn" in families:
                print(gdn_line(name, batch, args.L, dev, copy_gbs, args.latency_route_bytes, args.conv_only, fla),
                      flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
