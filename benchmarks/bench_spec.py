"""Speculative decoding step of one SSM layer on the GPU: ReplaySSM (verify + commit, flushes amortised) against
one conventional standard decode step (our kernel) and against the snapshot path that engines run today
(snapshot verify: the state after every token stored; commit: the accepted snapshot copied back).

Steady state, as a serving engine sees it: every row's history is drawn from the stationary distribution of the
cursor (a Markov chain over verify + commit steps with accepted counts uniform in 1..T), origins are random, and
each step inside the captured CUDA graph commits a different table of accepted counts (16 tables, uniform 1..T,
used in turn; a graph replay repeats the same sequence), so flushes fall on the rows and steps where they would.
Every timing: CUDA graph of many launches, warm-up, median of event-timed replays (trtllm_replayssm/bench/
timing.py), a pool of state slots larger than L2 with shuffled slot indices, random inputs. fp32 state, bf16
activations, z gate, D, dt_bias, softplus.

Family keyed: FAMILIES maps a family name to its shapes and its point function; a family's point returns the
per-step times and the bytes each path moves per row (the bytes model below), and rendering is shared.

    python benchmarks/bench_spec.py --out benchmarks/spec_decode.md --json benchmarks/spec_decode.json
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch

from trtllm_replayssm.bench.bytes_model import mamba2_conventional_bytes, mamba2_io_bytes
from trtllm_replayssm.bench.timing import copy_bandwidth_gbs, pool_slots, time_graph_us
from trtllm_replayssm.config import CURSOR_HISTORY, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_verify, snapshot_verify
from trtllm_replayssm.ops.slots import snapshot_commit, spec_commit
from trtllm_replayssm.pool import Mamba2StatePool
from trtllm_replayssm.bench.bytes_model import gdn_conventional_bytes, gdn_io_bytes
from trtllm_replayssm.config import GdnLayerShape
from trtllm_replayssm.ops.gdn import gdn_conventional_decode
from trtllm_replayssm.ops.gdn import replay_verify as gdn_replay_verify
from trtllm_replayssm.ops.gdn import snapshot_verify as gdn_snapshot_verify
from trtllm_replayssm.ops.gdn.reference import gdn_gating, l2norm
from trtllm_replayssm.pool import GdnStatePool
from trtllm_replayssm.quant import quantize_state

ACCEPT_TABLES = 16  # tables of accepted counts the captured steps use in turn


def cursor_chain(T: int, L: int, rows: int, seed: int = 0):
    """Histories before a verify, drawn from the stationary distribution of verify (flush when h + 2T > L) +
    commit (h += a, a uniform in 1..T); and the chain's flush fraction and mean history (for the bytes model)."""
    rng = random.Random(seed)

    def advance(h):
        return (0 if h + 2 * T > L else h) + rng.randint(1, T)

    hist = []
    for _ in range(rows):
        h = 0
        for _ in range(rng.randint(64, 127)):
            h = advance(h)
        hist.append(h)
    h, flushes, total, n = 0, 0, 0, 100_000
    for _ in range(n):
        flushes += h + 2 * T > L
        total += h
        h = advance(h)
    return hist, flushes / n, total / n


# ---- Mamba-2 ------------------------------------------------------------------------------------------------

MAMBA2_SHAPES = {
    "Nemotron-3-Super": Mamba2LayerShape(128, 64, 128, 8),
    "Nemotron-3-Nano-30B": Mamba2LayerShape(64, 64, 128, 8),
}


def accepted_counts(T, batch, dev):
    """A function giving the next of ACCEPT_TABLES random tables of accepted counts (1..T per row) on each call:
    the captured steps commit varying counts without a host sync."""
    tables = [torch.randint(1, T + 1, (batch,), device=dev, dtype=torch.int32) for _ in range(ACCEPT_TABLES)]
    turn = [0]

    def next_accepted():
        turn[0] += 1
        return tables[turn[0] % ACCEPT_TABLES]

    return next_accepted


def point_row(family, shape_name, shape, batch, T, L, num_slots, bytes_fn):
    """(the rows' steady-state histories, the result row with the point and its bytes model)."""
    hist, flush_frac, mean_hist = cursor_chain(T, L, batch)
    row = {"family": family, "shape": shape_name, "batch": batch, "T": T, "L": L, "slots": num_slots,
           "flush_frac": flush_frac, "mean_hist": mean_hist}
    row["bytes"] = bytes_fn(shape, T, L, flush_frac, mean_hist)
    return hist, row


def fill_read_copy(pool, fmt: str) -> None:
    """The pool's read copy written from its checkpoint (the state a flush would leave), for read format fmt."""
    if fmt != "none":
        for name, part in quantize_state(pool.checkpoint, fmt).items():
            pool.buffers[name].copy_(part)


def replay_timings(pool, verify, next_accepted, idx, hist, T: int, L: int, launches: int) -> dict:
    """The replay step (verify + commit, steady-state cursors) and its decomposition (no commit, cursors reset
    every step: every row on the non-flush route, history 0, or every row flushing, history L - T, the most
    records a fold can take). Leaves the pool's cursors as it found them."""
    batch = idx.numel()
    pool.set_cursor(idx.long(), torch.tensor(hist, device=idx.device, dtype=torch.int32),
                    torch.randint(0, L, (batch,), device=idx.device, dtype=torch.int32))
    cursor_start = pool.cursor.clone()
    out = {"replay_us": time_graph_us(
        lambda: (verify(), spec_commit(pool, next_accepted(), slot_idx=idx, window=T)), launches)}
    hist_field = pool.cursor[..., CURSOR_HISTORY]
    fill_us = time_graph_us(lambda: hist_field.fill_(0), launches)
    out["verify_nonflush_us"] = time_graph_us(lambda: (hist_field.fill_(0), verify()), launches) - fill_us
    out["verify_allflush_us"] = time_graph_us(lambda: (hist_field.fill_(L - T), verify()), launches) - fill_us
    pool.cursor.copy_(cursor_start)
    return out


def mamba2_bytes(shape: Mamba2LayerShape, T: int, L: int, flush_frac: float, mean_hist: float, act: int = 2,
                 state: int = 4) -> dict:
    """Bytes per row and step that each path must move through HBM (each read once, each write once)."""
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    S = H * P * N * state
    record = act * (H * P + G * N) + 4 * H  # x, B, processed dt
    io_window = T * mamba2_io_bytes(shape, act)
    cursor = 2 * H * 8 * 8  # commit: read and write every replica
    return {
        "conv": mamba2_conventional_bytes(shape, state, act),
        # checkpoint read; written on flush rows; committed records read; the window's records written
        "replay": S * (1 + flush_frac) + record * (mean_hist + T) + io_window + cursor,
        # state read, T snapshots written, commit copies one snapshot back
        "snapshot": S * (1 + T) + 2 * S + io_window,
        "snapshot_verify": S * (1 + T) + io_window,
    }


def mamba2_point(shape_name: str, shape: Mamba2LayerShape, batch: int, T: int, L: int, launches: int,
                 read_formats=("none",)) -> list:
    dev = torch.device("cuda")
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    state_bytes = H * P * N * 4
    num_slots = pool_slots(batch, state_bytes)
    A = -torch.exp(torch.rand(H, device=dev) * math.log(16.0))
    D = torch.randn(H, device=dev)
    dt_bias = torch.rand(H, device=dev) * 3 - 4
    bf = dict(device=dev, dtype=torch.bfloat16)
    x, z = torch.randn(batch, T, H, P, **bf), torch.randn(batch, T, H, P, **bf)
    dt = torch.randn(batch, T, H, **bf) * 0.5
    B, C = torch.randn(batch, T, G, N, **bf), torch.randn(batch, T, G, N, **bf)
    x1, z1, dt1, B1, C1 = (t[:, 0].contiguous() for t in (x, z, dt, B, C))
    idx = torch.randperm(num_slots, device=dev)[:batch].to(torch.int32)
    out, out1 = torch.empty_like(x), torch.empty_like(x1)
    next_accepted = accepted_counts(T, batch, dev)
    hist, base = point_row("mamba2", shape_name, shape, batch, T, L, num_slots, mamba2_bytes)

    rows = []
    for fmt in read_formats:
        pool = Mamba2StatePool(shape, num_slots, ReplayConfig(L, torch.float32, torch.bfloat16, fmt), device=dev)
        pool.checkpoint.normal_()
        fill_read_copy(pool, fmt)
        pool.ring_x.normal_()
        pool.ring_B.normal_()
        pool.ring_dt.uniform_(0.01, 0.3)
        verify = lambda: replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=idx, out=out)  # noqa: E731
        row = dict(base, read=fmt)
        if not rows:
            row["conv_us"] = time_graph_us(lambda: conventional_decode(
                pool.checkpoint, x1, dt1, B1, C1, A, D=D, z=z1, dt_bias=dt_bias, slot_idx=idx, out=out1), launches)
        row.update(replay_timings(pool, verify, next_accepted, idx, hist, T, L, launches))
        rows.append(row)
        pool = None  # frees the pool (the timed closures are done with it)
        torch.cuda.empty_cache()

    state = torch.randn(num_slots, H, P, N, device=dev)
    snaps = torch.zeros(num_slots, T, H, P, N, device=dev)
    snap_verify = lambda: snapshot_verify(state, snaps, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=idx,
                                          out=out)
    snap = {"snapshot_verify_us": time_graph_us(snap_verify, launches)}
    snap["snapshot_us"] = time_graph_us(
        lambda: (snap_verify(), snapshot_commit(state, snaps, next_accepted(), slot_idx=idx)), launches)
    state = snaps = None  # frees the snapshot buffers
    torch.cuda.empty_cache()
    return share_baselines(rows, snap)


def share_baselines(rows: list, snap: dict) -> list:
    """Every read format's row gets the point's conventional and snapshot timings (measured once)."""
    for row in rows:
        row.setdefault("conv_us", rows[0]["conv_us"])
        row.update(snap)
    return rows


# ---- Gated DeltaNet -----------------------------------------------------------------------------------------
# Inputs prepared outside the timed graphs (q, k L2-normalised, q scaled by K^-1/2, in bf16; g, beta in fp32 from
# the gating formula with serving-like parameters), so every path is called with use_qk_l2norm off and scale 1.

GDN_SHAPES = {
    "Qwen3.5-122B-A10B": GdnLayerShape(16, 64, 128, 128),
    "Qwen3.5-4B": GdnLayerShape(16, 32, 128, 128),
}
GDN_PREPARED = dict(use_qk_l2norm=False, scale=1.0)


def gdn_bytes(shape: GdnLayerShape, T: int, L: int, flush_frac: float, mean_hist: float, act: int = 2,
              state: int = 4) -> dict:
    """Bytes per row and step that each path must move through HBM (each read once, each write once)."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    S = HV * V * K * state
    record = act * (HV * V + H * K) + 4 * HV  # u, k, g
    io_window = T * gdn_io_bytes(shape, act)
    cursor = 2 * HV * 8 * 8  # commit: read and write every replica
    return {
        "conv": gdn_conventional_bytes(shape, state, act),
        # checkpoint read; written on flush rows; committed records read; the window's records written
        "replay": S * (1 + flush_frac) + record * (mean_hist + T) + io_window + cursor,
        # state read, T snapshots written, commit copies one snapshot back
        "snapshot": S * (1 + T) + 2 * S + io_window,
        "snapshot_verify": S * (1 + T) + io_window,
    }


def gdn_point(shape_name: str, shape: GdnLayerShape, batch: int, T: int, L: int, launches: int,
              read_formats=("none",)) -> list:
    dev = torch.device("cuda")
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    state_bytes = HV * V * K * 4
    num_slots = pool_slots(batch, state_bytes)
    q = (l2norm(torch.randn(batch, T, H, K, device=dev)) * K ** -0.5).bfloat16()
    k = l2norm(torch.randn(batch, T, H, K, device=dev)).bfloat16()
    v = torch.randn(batch, T, HV, V, device=dev).bfloat16()
    A_log = torch.log(torch.empty(HV, device=dev).uniform_(1, 16))
    dt_bias = torch.log(torch.expm1(torch.empty(HV, device=dev).uniform_(1e-3, 1e-1)))
    g, beta = gdn_gating(torch.randn(batch, T, HV, device=dev), torch.randn(batch, T, HV, device=dev), A_log, dt_bias)
    g, beta = g.contiguous(), beta.contiguous()
    q1, k1, v1, g1, beta1 = (t[:, 0].contiguous() for t in (q, k, v, g, beta))
    idx = torch.randperm(num_slots, device=dev)[:batch].to(torch.int32)
    out, out1 = torch.empty_like(v), torch.empty_like(v1)
    next_accepted = accepted_counts(T, batch, dev)
    hist, base = point_row("gdn", shape_name, shape, batch, T, L, num_slots, gdn_bytes)

    rows = []
    for fmt in read_formats:
        pool = GdnStatePool(shape, num_slots, ReplayConfig(L, torch.float32, torch.bfloat16, fmt), device=dev)
        pool.checkpoint.normal_()
        fill_read_copy(pool, fmt)
        pool.ring_u.normal_()
        pool.ring_k.normal_(0.0, K ** -0.5)  # rows of about unit norm, like normalised keys
        pool.ring_g.uniform_(-0.3, -0.01)
        verify = lambda: gdn_replay_verify(pool, q, k, v, g, beta, slot_idx=idx, out=out, **GDN_PREPARED)  # noqa: E731
        row = dict(base, read=fmt)
        if not rows:
            row["conv_us"] = time_graph_us(lambda: gdn_conventional_decode(
                pool.checkpoint, shape, q1, k1, v1, g=g1, beta=beta1, slot_idx=idx, out=out1, **GDN_PREPARED),
                launches)
        row.update(replay_timings(pool, verify, next_accepted, idx, hist, T, L, launches))
        rows.append(row)
        pool = None  # frees the pool (the timed closures are done with it)
        torch.cuda.empty_cache()

    state = torch.randn(num_slots, HV, V, K, device=dev)
    snaps = torch.zeros(num_slots, T, HV, V, K, device=dev)
    snap_verify = lambda: gdn_snapshot_verify(state, snaps, q, k, v, g, beta, slot_idx=idx, out=out, **GDN_PREPARED)
    snap = {"snapshot_verify_us": time_graph_us(snap_verify, launches)}
    snap["snapshot_us"] = time_graph_us(
        lambda: (snap_verify(), snapshot_commit(state, snaps, next_accepted(), slot_idx=idx)), launches)
    state = snaps = None  # frees the snapshot buffers
    torch.cuda.empty_cache()
    return share_baselines(rows, snap)


# ---- Families -----------------------------------------------------------------------------------------------

FAMILIES = {
    "mamba2": dict(shapes=MAMBA2_SHAPES, point=mamba2_point, default_shapes="Nemotron-3-Super"),
    "gdn": dict(shapes=GDN_SHAPES, point=gdn_point, default_shapes="Qwen3.5-122B-A10B"),
}

# Targets (issue 4), checked at batch 256, T = 8 of the family's first default shape: spec step / conventional
# step at most `max_vs_conv`, snapshot path / spec step at least `min_vs_snapshot`.
TARGETS = {"mamba2": dict(max_vs_conv=1.3, min_vs_snapshot=4.0), "gdn": dict(max_vs_conv=1.5, min_vs_snapshot=3.0)}


def tbs(nbytes: float, batch: int, us: float) -> float:
    return nbytes * batch / (us * 1e-6) / 1e12


def render(rows, copy_gbs, device_name):
    lines = [f"# Speculative decoding step, one SSM layer ({device_name})", "",
             "fp32 state, bf16 activations. CUDA graphs, median µs per step. Copy bandwidth (read+write) measured "
             f"in the same run: **{copy_gbs / 1e3:.2f} TB/s**. `conv` = one conventional standard decode step (our "
             "kernel); `replay` = ReplaySSM verify of T tokens + commit, steady-state cursors (flushes amortised "
             "where they fall); `snapshot` = snapshot verify (T states stored) + commit (accepted state copied "
             "back), as engines run it today; `snap. verify` = its verify alone. `non-flush` / `all-flush` = one "
             "verify with every row on one route (no commit). `read` = the read copy the replay verify reads (fp32 "
             "checkpoint; `none`: the checkpoint itself). TB/s = bytes model (bench_spec.py, no read copy) over the time; "
             "`flush %` = rows flushing per step in steady state.", ""]
    head = ["family", "shape", "batch", "T", "L", "read", "conv µs", "replay µs", "replay / conv", "snapshot µs",
            "snapshot / replay", "snap. verify µs", "non-flush µs", "all-flush µs", "flush %", "conv TB/s",
            "replay TB/s", "snapshot TB/s"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        nb = r["bytes"]
        plain = r.get("read", "none") == "none"  # the bytes model counts no read copy
        cells = [r["family"], r["shape"], str(r["batch"]), str(r["T"]), str(r["L"]), r.get("read", "none"),
                 f"{r['conv_us']:.1f}",
                 f"{r['replay_us']:.1f}", f"{r['replay_us'] / r['conv_us']:.2f}x", f"{r['snapshot_us']:.1f}",
                 f"{r['snapshot_us'] / r['replay_us']:.2f}x", f"{r['snapshot_verify_us']:.1f}",
                 f"{r['verify_nonflush_us']:.1f}", f"{r['verify_allflush_us']:.1f}", f"{100 * r['flush_frac']:.0f}",
                 f"{tbs(nb['conv'], r['batch'], r['conv_us']):.2f}",
                 f"{tbs(nb['replay'], r['batch'], r['replay_us']):.2f}" if plain else "-",
                 f"{tbs(nb['snapshot'], r['batch'], r['snapshot_us']):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    checks = []
    for r in rows:
        tgt = TARGETS.get(r["family"])
        if tgt and r.get("read", "none") == "none" and r["batch"] == 256 and r["T"] == 8 and r["shape"] == FAMILIES[r["family"]]["default_shapes"].split(",")[0]:
            vs_conv, vs_snap = r["replay_us"] / r["conv_us"], r["snapshot_us"] / r["replay_us"]
            ok = vs_conv <= tgt["max_vs_conv"] and vs_snap >= tgt["min_vs_snapshot"]
            checks.append(f"- {r['family']} {r['shape']} batch 256, T=8, L={r['L']}: replay step {vs_conv:.2f}x a "
                          f"conventional step (target <= {tgt['max_vs_conv']}x), snapshot path {vs_snap:.2f}x the "
                          f"replay step (target >= {tgt['min_vs_snapshot']}x): **{'met' if ok else 'NOT met'}**")
    if checks:
        lines += ["", "Targets (issue 4):", ""] + checks
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/spec_decode.md"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--shapes", default=None, help="comma list (default: each family's default shapes)")
    ap.add_argument("--batches", default="64,256,512")
    ap.add_argument("--windows", default="2,4,8", help="T values (tokens verified per row)")
    ap.add_argument("--ring-extra", type=int, default=16, help="L = T + this (16: the issue's setting)")
    ap.add_argument("--launches", type=int, default=24, help="launches per CUDA graph")
    ap.add_argument("--read-formats", default="none",
                    help="comma list of read copies the replay rows read (none, fp16, bf16, fp8): one row each")
    args = ap.parse_args(argv)
    read_formats = args.read_formats.split(",")
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth_gbs()
    print(f"# copy bandwidth (read+write): {copy_gbs / 1e3:.2f} TB/s", flush=True)
    rows, t0 = [], time.time()
    for fam in args.families.split(","):
        spec = FAMILIES[fam]
        for name in (args.shapes or spec["default_shapes"]).split(","):
            if name not in spec["shapes"]:
                continue
            for batch in (int(v) for v in args.batches.split(",")):
                for T in (int(v) for v in args.windows.split(",")):
                    point = spec["point"](name, spec["shapes"][name], batch, T, T + args.ring_extra, args.launches,
                                          read_formats)
                    rows += point
                    for r in point:
                        print(json.dumps(r), flush=True)
    text = render(rows, copy_gbs, torch.cuda.get_device_name())
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy_gbs, "rows": rows}, indent=1))
    print(f"# {time.time() - t0:.0f} s")
    print(text)


if __name__ == "__main__":
    main()
