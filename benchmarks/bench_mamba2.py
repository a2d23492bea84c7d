"""One Mamba-2 layer decode step on the GPU: our conventional kernel, mamba-ssm's Triton
`selective_state_update` (defaults and the best BLOCK_SIZE_M / num_warps of a sweep), and ReplaySSM amortised
over L steps with flush phases staggered across rows. fp32 state, bf16 activations by default.

mamba-ssm's kernel is taken from its source distribution at run time (--mamba-ssm-sdist, a .tar.gz from PyPI)
and never committed. Every timing: CUDA graph of many launches, warm-up, median of event-timed replays, a pool
of state slots larger than L2 (shuffled slot indices), random inputs. The launches of a graph rotate over disjoint
sets of rows until twice the L2 size of state has been touched, so small batches are timed with a cold L2 too, as
benchmarks/bench_gdn.py does (--no-cold-l2: every launch reuses one set of rows).

    python benchmarks/bench_mamba2.py --mamba-ssm-sdist .cache/mamba_ssm.tar.gz --out benchmarks/mamba2_decode.md
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import sys
import tarfile
import tempfile
import time
import types
from pathlib import Path

import torch

from trtllm_replayssm.bench.bytes_model import mamba2_conventional_bytes, mamba2_replay_amortised_bytes
from trtllm_replayssm.bench.timing import (cold_slot_sets, copy_bandwidth_gbs, graph_launches, pool_slots,
                                           time_graph_us)
from trtllm_replayssm.config import CURSOR_HISTORY, DEFAULT_LATENCY_ROUTE_BYTES, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import Mamba2StatePool

SHAPES = {
    "Nemotron-3-Super": Mamba2LayerShape(128, 64, 128, 8),
    "Nemotron-3-Nano-30B": Mamba2LayerShape(64, 64, 128, 8),
    "Nemotron-H-56B": Mamba2LayerShape(256, 64, 256, 8),
}


def load_mamba_ssm_kernel(sdist: Path):
    """Imports mamba_ssm/ops/triton/selective_state_update.py from the sdist without installing the package."""
    tmp = Path(tempfile.mkdtemp(prefix="mamba_ssm_src_"))
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.endswith(("ops/triton/selective_state_update.py", "ops/triton/softplus.py"))]
        tar.extractall(tmp, members=members, filter="data")
    files = {Path(m.name).name: tmp / m.name for m in members}
    for name in ("mamba_ssm", "mamba_ssm.ops", "mamba_ssm.ops.triton"):
        sys.modules.setdefault(name, types.ModuleType(name))
    for modname, fname in (("mamba_ssm.ops.triton.softplus", "softplus.py"),
                           ("mamba_ssm.ops.triton.selective_state_update", "selective_state_update.py")):
        spec = importlib.util.spec_from_file_location(modname, files[fname])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
    return sys.modules["mamba_ssm.ops.triton.selective_state_update"]


def triton_step(mod, state, x, dt, A, B, C, D, z, dt_bias, slot_sets, block_m=None, num_warps=None):
    """mamba-ssm's kernel at its defaults (block_m None) or at the given launch settings (tied head dim), cycling
    over the slot sets (int64: mamba-ssm computes slot offsets in 32 bits from int32 indices, which overflows past
    2^31)."""
    sets = itertools.cycle([idx.long() for idx in slot_sets])
    H, P, N = state.shape[1:]
    dt_e = dt[..., None].expand(-1, -1, P)
    A_e = A[:, None, None].expand(H, P, N)
    D_e = D[:, None].expand(H, P)
    bias_e = dt_bias[:, None].expand(H, P)
    if block_m is None:
        return lambda: mod.selective_state_update(state, x, dt_e, A_e, B, C, D_e, z, bias_e, True, next(sets))
    out = torch.empty_like(x)
    batch, ngroups = x.shape[0], B.shape[1]
    kernel = mod._selective_scan_update_kernel

    def run():
        idx = next(sets)
        grid = (math.ceil(P / block_m), batch, H)
        kernel[grid](state, x, dt_e, bias_e, A_e, B, C, D_e, z, out, idx,
                     batch, H, P, N, H // ngroups,
                     *state.stride(), *x.stride(), *dt_e.stride(), *bias_e.stride(), *A_e.stride(),
                     *B.stride(), *C.stride(), *D_e.stride(), *z.stride(), *out.stride(),
                     True, True, block_m, num_warps=num_warps)
    return run


def bench_point(shape_name, shape, batch, Ls, mod, sweep, launches, cold_l2):
    dev = torch.device("cuda")
    state_bytes = shape.nheads * shape.head_dim * shape.dstate * 4
    num_slots = pool_slots(batch, state_bytes)
    slot_sets = cold_slot_sets(num_slots, batch, state_bytes, cold_l2, dev)
    n = graph_launches(launches, len(slot_sets))
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    A = -torch.exp(torch.rand(H, device=dev) * math.log(16.0))
    D = torch.randn(H, device=dev)
    dt_bias = torch.rand(H, device=dev) * 3 - 4
    x = torch.randn(batch, H, P, device=dev).bfloat16()
    z = torch.randn(batch, H, P, device=dev).bfloat16()
    dt = (torch.randn(batch, H, device=dev) * 0.5).bfloat16()
    B = torch.randn(batch, G, N, device=dev).bfloat16()
    C = torch.randn(batch, G, N, device=dev).bfloat16()
    out = torch.empty_like(x)
    row = {"shape": shape_name, "batch": batch, "slots": num_slots, "slot_sets": len(slot_sets)}

    state = torch.randn(num_slots, H, P, N, device=dev)
    sets = itertools.cycle(slot_sets)
    row["ours_conv_us"] = time_graph_us(
        lambda: conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=next(sets), out=out), n)
    row["mamba_ssm_default_us"] = time_graph_us(triton_step(mod, state, x, dt, A, B, C, D, z, dt_bias, slot_sets), n)
    best = (float("inf"), None)
    for bm, nw in sweep:
        us = time_graph_us(triton_step(mod, state, x, dt, A, B, C, D, z, dt_bias, slot_sets, bm, nw), n)
        best = min(best, (us, f"M{bm}/w{nw}"))
    row["mamba_ssm_best_us"], row["mamba_ssm_best_cfg"] = best
    state = None  # frees the state (the timed closures are done with it)
    torch.cuda.empty_cache()

    for L in Ls:
        pool = Mamba2StatePool(shape, num_slots, ReplayConfig(L, torch.float32, torch.bfloat16), device=dev)
        pool.checkpoint.normal_()
        pool.ring_x.normal_()
        pool.ring_B.normal_()
        pool.ring_dt.uniform_(0.01, 0.3)
        # Flush phases staggered across rows: the p-th slot the graph visits starts with p mod L records.
        order = torch.cat(slot_sets).long()
        pool.set_cursor(order, torch.arange(order.numel(), device=dev, dtype=torch.int32) % L)
        sets = itertools.cycle(slot_sets)
        step = lambda: replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=next(sets), out=out)
        row[f"replay_L{L}_us"] = time_graph_us(step, graph_launches(launches, len(slot_sets), L))
        if L == 16:
            # Decomposition: every row on the output-only route (history L/2) or every row flushing.
            hist = pool.cursor[..., CURSOR_HISTORY]
            fill_us = time_graph_us(lambda: hist.fill_(L // 2), n)
            row["nonflush_L16_us"] = time_graph_us(lambda: (hist.fill_(L // 2), step()), n) - fill_us
            row["allflush_L16_us"] = time_graph_us(lambda: (hist.fill_(L - 1), step()), n) - fill_us
        pool = step = None  # frees the pool (the step closure holds it)
        torch.cuda.empty_cache()
    return row


def render(rows, copy_gbs, Ls, device_name, cold_l2):
    lines = [f"# Mamba-2 decode, one layer ({device_name})", "",
             f"fp32 state, bf16 activations, z gate, D, dt_bias, softplus. CUDA graphs, median µs per step. "
             f"Copy bandwidth (read+write) measured in the same run: **{copy_gbs / 1e3:.2f} TB/s**. "
             f"`conv` = our conventional kernel; `mamba-ssm` = `selective_state_update` (Triton) at its defaults "
             f"and at the best launch settings of a sweep; `replay Lk` = ReplaySSM amortised over k steps with "
             f"staggered flush phases. Ratios are against the faster conventional kernel; TB/s is the bytes model "
             f"(trtllm_replayssm/bench/bytes_model.py) over the time. Non-flush / all-flush: one step with every row "
             f"on the output-only route (history L/2) or every row flushing (L=16). Steps whose rows' checkpoints "
             f"total at most {DEFAULT_LATENCY_ROUTE_BYTES >> 20} MiB take the latency route (the library's "
             f"default, docs/mamba2.md): every row flushes in the conventional kernel's mapping, so there `replay` "
             f"is the steady state (history 0) and non-flush / all-flush fold L/2 or L-1 records first. "
             + ("The launches of a graph rotate over disjoint sets of rows until twice the L2 size of state is "
                "touched (cold L2 at every batch)." if cold_l2 else
                "Every launch in a graph reuses the same rows (small batches run from a warm L2)."), ""]
    head = ["shape", "batch", "conv µs", "mamba-ssm default", "mamba-ssm best (cfg)", "conv TB/s"]
    for L in Ls:
        head += [f"replay L{L} µs", "x"]
    head += ["replay L16 TB/s", "non-flush step µs", "all-flush step µs"] if 16 in Ls else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        shape = SHAPES[r["shape"]]
        base = min(r["ours_conv_us"], r["mamba_ssm_best_us"], r["mamba_ssm_default_us"])
        conv_tbs = mamba2_conventional_bytes(shape, 4, 2) * r["batch"] / (r["ours_conv_us"] * 1e-6) / 1e12
        cells = [r["shape"], str(r["batch"]), f"{r['ours_conv_us']:.1f}", f"{r['mamba_ssm_default_us']:.1f}",
                 f"{r['mamba_ssm_best_us']:.1f} ({r['mamba_ssm_best_cfg']})", f"{conv_tbs:.2f}"]
        for L in Ls:
            us = r[f"replay_L{L}_us"]
            cells += [f"{us:.1f}", f"{base / us:.2f}x"]
        if 16 in Ls:
            tb = mamba2_replay_amortised_bytes(shape, 16, 4, 2) * r["batch"] / (r["replay_L16_us"] * 1e-6) / 1e12
            cells += [f"{tb:.2f}", f"{r['nonflush_L16_us']:.1f}", f"{r['allflush_L16_us']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mamba-ssm-sdist", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/mamba2_decode.md"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--batches", default="1,8,32,64,128,256,512")
    ap.add_argument("--Ls", default="4,8,16,32")
    ap.add_argument("--launches", type=int, default=32, help="launches per CUDA graph (at least)")
    ap.add_argument("--cold-l2", action=argparse.BooleanOptionalAction, default=True,
                    help="rotate disjoint slot sets across the launches of a graph (default: on)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    mod = load_mamba_ssm_kernel(args.mamba_ssm_sdist)
    Ls = [int(v) for v in args.Ls.split(",")]
    sweep = list(itertools.product((4, 8, 16, 32), (1, 2, 4)))
    copy_gbs = copy_bandwidth_gbs()
    print(f"# copy bandwidth (read+write): {copy_gbs / 1e3:.2f} TB/s", flush=True)
    rows = []
    t0 = time.time()
    for name in args.shapes.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            r = bench_point(name, SHAPES[name], batch, Ls, mod, sweep, args.launches, args.cold_l2)
            rows.append(r)
            print(json.dumps(r), flush=True)
    text = render(rows, copy_gbs, Ls, torch.cuda.get_device_name(), args.cold_l2)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy_gbs, "cold_l2": args.cold_l2, "rows": rows}, indent=1))
    print(f"# {time.time() - t0:.0f} s")
    print(text)


if __name__ == "__main__":
    main()
