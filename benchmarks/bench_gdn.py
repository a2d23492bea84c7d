"""One Gated DeltaNet layer decode step on the GPU: our conventional kernel, fla-core's Triton
`fused_recurrent_gated_delta_rule` (its public function at its defaults, and its kernel launched directly at the
best layout / BV / num_warps / num_stages of a sweep), and ReplaySSM amortised over L steps with flush phases
staggered across rows. fp32 state, bf16 activations.

fla-core is taken from its wheel at run time (--fla-wheel, git-ignored under .cache/wheels) and never committed.
Every timing: CUDA graph of many launches, warm-up, median of event-timed replays, a pool of state slots larger
than L2 with shuffled slot indices, random inputs. By default consecutive launches in a graph work on disjoint
sets of rows until twice the L2 size of state has been touched, so small batches are timed with a cold L2 too
(--no-cold-l2: every launch reuses one set of rows, as benchmarks/bench_mamba2.py does).

    python benchmarks/bench_gdn.py --fla-wheel .cache/wheels/fla_core-0.6.0-py3-none-any.whl \\
        --out benchmarks/gdn_decode.md --json benchmarks/gdn_decode.json
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import sys
import tempfile
import time
import types
import warnings
import zipfile
from pathlib import Path

import torch

from trtllm_replayssm.bench.bytes_model import gdn_conventional_bytes, gdn_replay_amortised_bytes
from trtllm_replayssm.bench.timing import (cold_slot_sets, copy_bandwidth_gbs, graph_launches, median_of_passes,
                                           pool_slots, time_graph_us)
from trtllm_replayssm.config import CURSOR_HISTORY, DEFAULT_LATENCY_ROUTE_BYTES, GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.gdn.reference import gdn_gating, gdn_step, l2norm
from trtllm_replayssm.pool import GdnStatePool

SHAPES = {
    "Qwen3.5-4B": GdnLayerShape(16, 32, 128, 128),
    "Qwen3.5-122B-A10B": GdnLayerShape(16, 64, 128, 128),
}
DEFAULT_WHEEL = Path(".cache/wheels/fla_core-0.6.0-py3-none-any.whl")
FLA_MODULE = "fla.ops.gated_delta_rule.fused_recurrent"


def load_fla_module(wheel: Path, module: str):
    """Imports one module of fla-core (e.g. fla/ops/gated_delta_rule/fused_recurrent.py) from the wheel without
    installing it.

    The wheel is extracted into a temporary folder. The packages above the module (fla, fla.ops, ...) and
    fla.ops.utils are stand-in modules whose __path__ points into that folder, so their __init__ files (which
    import every op, its layers and models, and einops) never run; the modules the kernel file imports
    (fla.utils, fla.ops.utils.op, fla.ops.utils.softplus, fla.backends, ...) load from the folder as usual.
    fla.utils touches the GPU when it is imported, so call this after CUDA is available. Returns (module, fla
    version).
    """
    if any(name == "fla" or name.startswith("fla.") for name in sys.modules):
        raise RuntimeError("a module named fla is already imported; run this benchmark in a fresh interpreter")
    root = Path(tempfile.mkdtemp(prefix="fla_core_"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root)
    meta = next(root.glob("fla_core-*.dist-info/METADATA")).read_text()
    version = next(line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Version:"))
    parts = module.split(".")
    packages = {".".join(parts[:i]) for i in range(1, len(parts))} | {"fla.ops.utils"}
    for name in sorted(packages):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = pkg
    sys.modules["fla"].__version__ = version  # fla.utils.decorators reads it
    return importlib.import_module(module), version


def load_fla_fused_recurrent(wheel: Path):
    """fla-core's GDN decode module (load_fla_module)."""
    return load_fla_module(wheel, FLA_MODULE)


def fla_public_step(fr, windows, q4, k4, v4, g3, b3):
    """fla's public function at its defaults ([K, V] state layout, BV 8, one warp): initial state read from the
    next window, final state written to a new tensor (fla-core 0.6.0 has no in-place or indexed variant)."""
    it = itertools.cycle(windows)
    return lambda: fr.fused_recurrent_gated_delta_rule(q4, k4, v4, g=g3, beta=b3, scale=1.0, initial_state=next(it),
                                                       output_final_state=True)


def fla_kernel_step(fr, windows, q4, k4, v4, g3, b3, o4, v_first, bv, warps, stages):
    """fla's Triton kernel launched directly: no output or final-state allocation, final state written over the
    initial state (ht = h0: each program reads and writes the same tile), the given layout and launch settings."""
    kernel = fr.fused_recurrent_gated_delta_rule_fwd_kernel
    n, _, H, K = k4.shape
    HV, V = v4.shape[2:]
    grid = (math.ceil(V / bv) * n * HV,)
    block_k = 1 << (K - 1).bit_length()  # the kernel holds all of K in one block
    it = itertools.cycle(windows)

    def run():
        h = next(it)
        kernel[grid](q=q4, k=k4, v=v4, g=g3, gk=None, gv=None, beta=b3, A_log=None, dt_bias=None, o=o4, h0=h, ht=h,
                     cu_seqlens=None, scale=1.0, T=1, H=H, HV=HV, K=K, V=V, BK=block_k, BV=bv,
                     USE_QK_L2NORM_IN_KERNEL=False, IS_BETA_HEADWISE=True, STATE_V_FIRST=v_first,
                     APPLY_BETA_SIGMOID=False, ALLOW_NEG_EIGVAL=False, num_warps=warps, num_stages=stages)
    return run


def fla_cfg_name(v_first, bv, warps, stages):
    return f"{'VK' if v_first else 'KV'}/BV{bv}/w{warps}/s{stages}"


def parse_fla_cfg(name):
    """(v_first, bv, warps, stages) of a configuration name such as VK/BV8/w1/s3 (the inverse of fla_cfg_name)."""
    layout, bv, warps, stages = name.split("/")
    if layout not in ("VK", "KV") or not (bv.startswith("BV") and warps.startswith("w") and stages.startswith("s")):
        raise ValueError(f"fla-core configuration {name!r} is not LAYOUT/BVn/wn/sn with LAYOUT VK or KV")
    return layout == "VK", int(bv[2:]), int(warps[1:]), int(stages[1:])


def ours_step(entry, slot_sets, q, k, v, g, beta, out, state=None, shape=None, pool=None):
    """One step of our conventional kernel (state, shape) or ReplaySSM kernel (pool), cycling over the slot sets.

    entry "op": the public op (gdn_conventional_decode / gdn_replay_decode) with prepared inputs, use_qk_l2norm
    off and scale 1; whatever it launches besides the kernel is timed too (the notes list it). entry "kernel":
    the kernel binding alone (params filled outside the timed graph, one launch per step), as fla's kernel is
    launched below."""
    sets = itertools.cycle(slot_sets)
    kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, out=out)
    if entry == "op" and pool is None:
        return lambda: gdn_conventional_decode(state, shape, q, k, v, slot_idx=next(sets), **kw)
    if entry == "op":
        return lambda: gdn_replay_decode(pool, q, k, v, slot_idx=next(sets), **kw)
    from trtllm_replayssm.ops.gdn import kernels

    if pool is None:
        params = [kernels.fill_params(kernels.CONVENTIONAL, state, q, k, v, g, beta, out, idx) for idx in slot_sets]
    else:
        params = [kernels.fill_params(kernels.REPLAY, pool.checkpoint, q, k, v, g, beta, out, idx, -1, pool.ring_u,
                                      pool.ring_k, pool.ring_g, pool.cursor, pool.buffer_len) for idx in slot_sets]
    params = itertools.cycle(params)
    return lambda: kernels.launch(next(params), v.device)


def ours_windows_step(entry, windows, q, k, v, g, beta, out, shape):
    """One step of our conventional kernel on the next of `windows` (contiguous [batch, HV, V, K] views of a pool)
    with no slot indices: the op (or the kernel binding alone, entry "kernel") on rows 0 .. batch - 1 of the view."""
    it = itertools.cycle(windows)
    if entry == "op":
        kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, out=out, slot_idx=None)
        return lambda: gdn_conventional_decode(next(it), shape, q, k, v, **kw)
    from trtllm_replayssm.ops.gdn import kernels

    params = itertools.cycle([kernels.fill_params(kernels.CONVENTIONAL, w, q, k, v, g, beta, out, None)
                              for w in windows])
    return lambda: kernels.launch(next(params), v.device)


def make_inputs(shape: GdnLayerShape, batch: int, dev):
    """Prepared inputs as both kernels read them: q, k L2-normalised (q scaled by K^-1/2) in bf16; g, beta in fp32
    from the gating formula with serving-like parameters."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    q = (l2norm(torch.randn(batch, H, K, device=dev)) * K ** -0.5).bfloat16()
    k = l2norm(torch.randn(batch, H, K, device=dev)).bfloat16()
    v = torch.randn(batch, HV, V, device=dev).bfloat16()
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16))
    dt_bias = torch.log(torch.expm1(torch.empty(HV, device=dev).uniform_(1e-3, 1e-1)))
    g, beta = gdn_gating(torch.randn(batch, HV, device=dev), torch.randn(batch, HV, device=dev), A_log, dt_bias)
    return q, k, v, g.contiguous(), beta.contiguous()


def check_fla(fr, shape: GdnLayerShape, dev, batch=3):
    """The fla calls used here against our reference step (gdn_step): output and final state, both layouts."""
    HV, K, V = shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    q, k, v, g, beta = make_inputs(shape, batch, dev)
    S = torch.randn(batch, HV, V, K, device=dev)
    y_ref, S_ref = gdn_step(S, q, k, v, g, beta)
    args = (q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None])
    for v_first in (False, True):
        h = S.clone() if v_first else S.transpose(-1, -2).contiguous()
        o = torch.empty_like(args[2])
        fla_kernel_step(fr, [h], *args, o, v_first, 16, 1, 1)()
        h_vk = h if v_first else h.transpose(-1, -2)
        name = fla_cfg_name(v_first, 16, 1, 1)
        torch.testing.assert_close(o[:, 0].float(), y_ref, atol=2e-2, rtol=2e-2, msg=lambda m: f"fla {name} y: {m}")
        torch.testing.assert_close(h_vk, S_ref, atol=1e-4, rtol=1e-4, msg=lambda m: f"fla {name} state: {m}")
    o, ht = fla_public_step(fr, [S.transpose(-1, -2).contiguous()], *args)()
    torch.testing.assert_close(o[:, 0].float(), y_ref, atol=2e-2, rtol=2e-2, msg=lambda m: f"fla public y: {m}")
    torch.testing.assert_close(ht.transpose(-1, -2), S_ref, atol=1e-4, rtol=1e-4,
                               msg=lambda m: f"fla public state: {m}")


def kernels_per_step(step):
    """Names of the GPU kernels (and memsets/copies) one step() launches, from the PyTorch profiler; None if the
    profiler gives no GPU events."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # the profiler warns that it keeps only one cycle's events: one is wanted
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return names or None


def bench_conventional(shape, batch, slot_sets, fr, sweep, launches, entry, row, kernels):
    dev = torch.device("cuda")
    HV, K, V = shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    q, k, v, g, beta = make_inputs(shape, batch, dev)
    out = torch.empty_like(v)
    num_slots = row["slots"]
    n = graph_launches(launches, len(slot_sets))

    state = torch.randn(num_slots, HV, V, K, device=dev)
    ours = ours_step(entry, slot_sets, q, k, v, g, beta, out, state=state, shape=shape)
    row["ours_conv_us"] = time_graph_us(ours, n)
    # The same kernel on fla's contiguous windows (below): slot indices j * batch .. (j + 1) * batch - 1, in order.
    windows = [torch.arange(j * batch, (j + 1) * batch, device=dev, dtype=torch.int32) for j in range(len(slot_sets))]
    row["ours_conv_windows_us"] = time_graph_us(
        ours_step(entry, windows, q, k, v, g, beta, out, state=state, shape=shape), n)
    # ... and given the windows themselves as its state, with no slot indices (rows 0 .. batch - 1 of each): the
    # same memory, the same order as fla's launches below, and no index load before the state's.
    row["ours_conv_windows_noidx_us"] = time_graph_us(
        ours_windows_step(entry, [state[j * batch:(j + 1) * batch] for j in range(len(slot_sets))], q, k, v, g, beta,
                          out, shape), n)

    # fla reads rows [b*j, b*(j+1)) of a contiguous state, so each of our slot sets becomes one contiguous window
    # of the same pool; gathering a pool's rows into it and scattering them back is not timed.
    args = (q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None])
    o4 = torch.empty_like(args[2])
    win = lambda st: [st[j * batch:(j + 1) * batch] for j in range(len(slot_sets))]
    layouts = {True: win(state), False: win(state.view(num_slots, HV, K, V))}
    public = fla_public_step(fr, layouts[False], *args)
    row["fla_default_us"] = time_graph_us(public, n)
    row["fla_sweep_us"] = {}
    for v_first, bv, warps, stages in sweep:
        step = fla_kernel_step(fr, layouts[v_first], *args, o4, v_first, bv, warps, stages)
        row["fla_sweep_us"][fla_cfg_name(v_first, bv, warps, stages)] = round(time_graph_us(step, n), 2)
    row["fla_best_cfg"] = min(row["fla_sweep_us"], key=row["fla_sweep_us"].get)
    row["fla_best_us"] = row["fla_sweep_us"][row["fla_best_cfg"]]
    if kernels is not None and not kernels:
        v_first, bv, warps, stages = next(c for c in sweep if fla_cfg_name(*c) == row["fla_best_cfg"])
        kernels["ours_conv"] = kernels_per_step(ours)
        kernels["fla_default"] = kernels_per_step(public)
        kernels["fla_best"] = kernels_per_step(fla_kernel_step(fr, layouts[v_first], *args, o4, v_first, bv, warps,
                                                               stages))


def bench_replay(shape, batch, slot_sets, Ls, split_L, launches, entry, row, kernels):
    dev = torch.device("cuda")
    K = shape.head_k_dim
    q, k, v, g, beta = make_inputs(shape, batch, dev)
    out = torch.empty_like(v)
    order = torch.cat(slot_sets).long()  # every slot in the order the graph visits it
    for L in Ls:
        pool = GdnStatePool(shape, row["slots"], ReplayConfig(L, torch.float32, torch.bfloat16), device=dev)
        pool.checkpoint.normal_()
        pool.ring_u.normal_()
        pool.ring_k.normal_(0.0, K ** -0.5)  # rows of about unit norm, like normalised keys
        pool.ring_g.uniform_(-0.3, -0.01)
        # Flush phases staggered across rows: the p-th slot the graph visits starts with p mod L records.
        pool.set_cursor(order, torch.arange(order.numel(), device=dev, dtype=torch.int32) % L)
        step = ours_step(entry, slot_sets, q, k, v, g, beta, out, pool=pool)
        row[f"replay_L{L}_us"] = time_graph_us(step, graph_launches(launches, len(slot_sets), L))
        if L == split_L:
            # Decomposition: every row on the output-only route (history L/2) or every row flushing.
            n = graph_launches(launches, len(slot_sets))
            hist = pool.cursor[..., CURSOR_HISTORY]
            fill_us = time_graph_us(lambda: hist.fill_(L // 2), n)
            row[f"nonflush_L{L}_us"] = time_graph_us(lambda: (hist.fill_(L // 2), step()), n) - fill_us
            row[f"allflush_L{L}_us"] = time_graph_us(lambda: (hist.fill_(L - 1), step()), n) - fill_us
            if kernels is not None and "ours_replay" not in kernels:
                kernels["ours_replay"] = kernels_per_step(step)
        pool = step = None  # frees the pool (the step closure holds it)
        torch.cuda.empty_cache()


def bench_point(shape_name, shape, batch, Ls, split_L, fr, sweep, launches, cold_l2, entry, kernels=None,
                reverse=False):
    """One (shape, batch) row: the conventional kernels (ours, fla's) then ReplaySSM, or (reverse) the other way
    round. `kernels`, when an empty dict, is filled with the kernels each method launches."""
    dev = torch.device("cuda")
    state_bytes = shape.num_v_heads * shape.head_v_dim * shape.head_k_dim * 4
    num_slots = pool_slots(batch, state_bytes)
    slot_sets = cold_slot_sets(num_slots, batch, state_bytes, cold_l2, dev)
    row = {"shape": shape_name, "batch": batch, "slots": num_slots, "slot_sets": len(slot_sets)}
    parts = [lambda: bench_conventional(shape, batch, slot_sets, fr, sweep, launches, entry, row, kernels),
             lambda: bench_replay(shape, batch, slot_sets, Ls, split_L, launches, entry, row, kernels)]
    for part in reversed(parts) if reverse else parts:
        part()
        torch.cuda.empty_cache()
    return row


def render(rows, copy_gbs, Ls, split_L, device_name, fla_version, kernels, cold_l2, entry, passes=1):
    def launched(names):
        return "not seen" if not names else f"{len(names)} ({', '.join(sorted(set(n[:48] for n in names)))})"

    kern = "; ".join(f"{shape}: " + ", ".join(f"{m} {launched(ks.get(m))}" for m in
                                              ("ours_conv", "ours_replay", "fla_default", "fla_best"))
                     for shape, ks in kernels.items())
    notes = [
        f"fp32 state, bf16 activations. CUDA graphs, median µs per step. Copy bandwidth (read+write) measured in "
        f"the same run: **{copy_gbs / 1e3:.2f} TB/s**.",
        "Inputs are prepared outside the timed graphs: q and k L2-normalised (q scaled by K^-1/2) in bf16, g and "
        "beta computed in fp32, so every method is called with use_qk_l2norm off, scale 1 and no gating work.",
        "`conv` = our conventional kernel on a state pool [slots, HV, V, K] through shuffled slot indices; "
        "`conv (fla's windows)` = the same kernel given fla's contiguous windows (slot indices in order); "
        "`conv (windows, no index)` = the same kernel given each window itself as its state and no slot indices "
        "(the memory and order of fla's launches, no index load), "
        + ("called through the public ops (`gdn_conventional_decode`, `gdn_replay_decode`): any preparation kernels "
           "they launch are timed too and listed below." if entry == "op" else
           "launched through the kernel binding alone (trtllm_replayssm.ops.gdn.kernels, params filled outside "
           "the graph)."),
        f"`fla` = fla-core {fla_version} `fused_recurrent_gated_delta_rule` (Triton). It has no per-row state "
        "indices and no in-place final state, so it runs on contiguous [batch, HV, K, V] or [batch, HV, V, K] "
        "windows of the same pool: the gather and scatter an engine would need around it are not timed. "
        "`fla default` = its public function at its defaults ([K, V] layout, BV 8, 1 warp; final state into a new "
        "tensor); `fla best` = its kernel launched directly, final state written over the initial state, at the "
        "best layout (KV or VK) / BV / num_warps / num_stages of a sweep.",
        "`replay Lk` = ReplaySSM amortised over k steps with staggered flush phases. Ratios are against the "
        "fastest conventional kernel (any column); TB/s is the bytes model (trtllm_replayssm/bench/bytes_model.py) "
        f"over the time. Non-flush / all-flush: one step with every row on the output-only route (history L/2) or "
        f"every row flushing (L={split_L}). Steps whose rows' checkpoints total at most "
        f"{DEFAULT_LATENCY_ROUTE_BYTES >> 20} MiB take the latency route (the library's default, docs/gdn.md): every "
        "row flushes in the conventional kernel's mapping, so there `replay` is the steady state (history 0) and "
        "non-flush / all-flush fold L/2 or L-1 records first.",
        "Consecutive launches in a graph use disjoint sets of rows until twice the L2 size of state has been "
        "touched (cold L2 at every batch)." if cold_l2 else
        "Every launch in a graph reuses the same rows (small batches run from a warm L2).",
        f"Kernels launched per timed step: {kern}.",
    ]
    if passes > 1:
        notes.append(f"Each figure is the median of {passes} passes over its point, every other pass timing "
                     "ReplaySSM first and the conventional kernels after it; `fla best` is the configuration with "
                     "the best median.")
    lines = [f"# Gated DeltaNet decode, one layer ({device_name})", "", " ".join(notes), ""]
    head = ["shape", "batch", "conv µs", "conv (fla's windows) µs", "conv (windows, no index) µs", "fla default µs",
            "fla best µs (cfg)",
            "conv TB/s", "fla best TB/s"]
    for L in Ls:
        head += [f"replay L{L} µs", "x"]
    head += [f"replay L{split_L} TB/s", "non-flush step µs", "all-flush step µs"] if split_L in Ls else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        shape = SHAPES[r["shape"]]
        base = min(r["ours_conv_us"], r["ours_conv_windows_us"], r["ours_conv_windows_noidx_us"], r["fla_best_us"],
                   r["fla_default_us"])
        tbs = lambda nbytes, us: f"{nbytes * r['batch'] / (us * 1e-6) / 1e12:.2f}"
        conv_bytes = gdn_conventional_bytes(shape, 4, 2)
        cells = [r["shape"], str(r["batch"]), f"{r['ours_conv_us']:.1f}", f"{r['ours_conv_windows_us']:.1f}",
                 f"{r['ours_conv_windows_noidx_us']:.1f}", f"{r['fla_default_us']:.1f}",
                 f"{r['fla_best_us']:.1f} ({r['fla_best_cfg']})", tbs(conv_bytes, r["ours_conv_us"]),
                 tbs(conv_bytes, r["fla_best_us"])]
        for L in Ls:
            us = r[f"replay_L{L}_us"]
            cells += [f"{us:.1f}", f"{base / us:.2f}x"]
        if split_L in Ls:
            cells += [tbs(gdn_replay_amortised_bytes(shape, split_L, 4, 2), r[f"replay_L{split_L}_us"]),
                      f"{r[f'nonflush_L{split_L}_us']:.1f}", f"{r[f'allflush_L{split_L}_us']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fla-wheel", type=Path, default=DEFAULT_WHEEL, help="fla-core wheel (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/gdn_decode.md"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--batches", default="1,8,32,64,128,256,512")
    ap.add_argument("--Ls", default="4,8,16,32")
    ap.add_argument("--split-L", type=int, default=16, help="L of the non-flush / all-flush decomposition")
    ap.add_argument("--launches", type=int, default=32, help="launches per CUDA graph (at least)")
    ap.add_argument("--fla-bv", default="8,16,32,64", help="BV values of fla's sweep")
    ap.add_argument("--fla-warps", default="1,2,4", help="num_warps values of fla's sweep")
    ap.add_argument("--fla-stages", default="3", help="num_stages values of fla's sweep (its default, 3: with one "
                                                      "token the loop has one iteration; 1 and 3 timed the same)")
    ap.add_argument("--ours-entry", choices=("op", "kernel"), default="op",
                    help="time our kernels through the public ops (default) or through the kernel binding alone")
    ap.add_argument("--cold-l2", action=argparse.BooleanOptionalAction, default=True,
                    help="rotate disjoint slot sets across the launches of a graph (default: on)")
    ap.add_argument("--passes", type=int, default=1,
                    help="passes over each point, every other one in the opposite order; each figure is the median "
                         "over the passes (fla best: the sweep's best median; use an odd number)")
    args = ap.parse_args(argv)
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        ap.error(f"unknown shapes {unknown} (known: {', '.join(SHAPES)})")
    if not args.fla_wheel.is_file():
        ap.error(f"no fla-core wheel at {args.fla_wheel}")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    fr, fla_version = load_fla_fused_recurrent(args.fla_wheel)
    Ls = ints(args.Ls)
    sweep = list(itertools.product((False, True), ints(args.fla_bv), ints(args.fla_warps), ints(args.fla_stages)))
    copy_gbs = copy_bandwidth_gbs()
    print(f"# copy bandwidth (read+write): {copy_gbs / 1e3:.2f} TB/s", flush=True)
    rows, pass_rows, kernels = [], [], {}
    t0 = time.time()
    for name in args.shapes.split(","):
        check_fla(fr, SHAPES[name], dev)
        print(f"# fla-core {fla_version} matches the reference step on {name} (both state layouts)", flush=True)
        kernels[name] = {}
        for batch in ints(args.batches):
            passes = [bench_point(name, SHAPES[name], batch, Ls, args.split_L, fr, sweep, args.launches,
                                  args.cold_l2, args.ours_entry, kernels[name], reverse=i % 2 == 1)
                      for i in range(args.passes)]
            pass_rows.append(passes)
            r = median_of_passes(passes)
            r["fla_best_cfg"] = min(r["fla_sweep_us"], key=r["fla_sweep_us"].get)  # of the medians
            r["fla_best_us"] = r["fla_sweep_us"][r["fla_best_cfg"]]
            rows.append(r)
            print(json.dumps(r), flush=True)
        print(f"# kernels per step, {name}: {json.dumps(kernels[name])}", flush=True)
    text = render(rows, copy_gbs, Ls, args.split_L, torch.cuda.get_device_name(), fla_version, kernels,
                  args.cold_l2, args.ours_entry, args.passes)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy_gbs, "fla_version": fla_version, "cold_l2": args.cold_l2,
                                         "ours_entry": args.ours_entry, "kernels": kernels, "rows": rows,
                                         "passes": args.passes, "pass_rows": pass_rows if args.passes > 1 else None},
                                        indent=1))
    print(f"# {time.time() - t0:.0f} s")
    print(text)


if __name__ == "__main__":
    main()
