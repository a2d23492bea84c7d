"""Diagnostic for issue 3's parity gap: the conventional GDN step written in Triton (this project's own kernels, not
a library's), timed in one process against our CUDA conventional step and fla-core's kernel on the same pool.

    python benchmarks/triton_probe.py [--batches 64,256,512] [--passes 2] [--variants NAMES | all | none]
        [--env RSSM_AB_CONV=0,1]

Lines: `conv` our CUDA step on shuffled slots; `conv (windows)` on fla-core's contiguous windows through slot indices
in order; `conv (windows, no index)` on each window itself with no slot indices; `fla` fla-core 0.6.0's kernel at
--fla-cfg on the same windows (benchmarks/bench_gdn.py fla_kernel_step); then each Triton variant on the windows.
Every variant is one one-warp program per (8-row tile, value head, batch row) of the state [slots, HV, V, K] fp32,
prepared inputs (q, k normalised, g and beta given), checked against our CUDA step on one step (state and y, unused
slots untouched) before it is timed; its registers are printed and, under $OUT, its PTX and cubin written.
  tri vec           three-dimensional grid, slot index, no masks: Triton proves the rows contiguous (16-byte loads)
  tri masked        the same with (always true) bounds masks on the tile, as fla-core writes its kernel
  tri masked s3     tri masked at num_stages 3 (fla-core's best setting)
  tri masked noidx  tri masked without the slot index: row b's state is slot b of the window passed
  tri masked bar    tri masked with a block barrier right after the tile's loads (they issue together)
  tri masked bar noidx, flat idx, flat idx r64 (at most 64 registers), flat (no index), flat loop (the token inside
                    a loop over a runtime T = 1, as fla-core), flat loop s3, flat idx loop s3: one-dimensional grid
                    with 64-bit program arithmetic (_gdn_step_flat)
  tri scalar        tri vec with the columns' offsets times an unspecialised stride (contiguity hidden from Triton)
--variants picks them by name, joined by commas (default: the pair that isolates the slot index). --env times
every line once per value of a knob the library reads at launch (temporary A/B switches of a build). Qwen3.5-122B-A10B
shape, bf16 activations, CUDA graphs rotating over disjoint rows (trtllm_replayssm.bench.timing), µs per step.
Records: A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200. Needs Triton (the device's PyTorch has it); not part of the package.
"""

import argparse
import itertools
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from trtllm_replayssm.bench.inputs import gdn_step_inputs
from trtllm_replayssm.bench.timing import cold_slot_sets, copy_bandwidth_gbs, graph_launches, pool_slots, time_graph_us
from trtllm_replayssm.config import GdnLayerShape
from trtllm_replayssm.ops.gdn import gdn_conventional_decode

sys.path.insert(0, str(Path(__file__).resolve().parent))

LAUNCHES = 64


@triton.jit(do_not_specialize=["col_stride"])
def _gdn_step(state, slot_idx, q, k, v, g, beta, y, col_stride, HV: tl.constexpr, GROUP: tl.constexpr,
              V: tl.constexpr, K: tl.constexpr, RW: tl.constexpr, HIDE_CONTIGUITY: tl.constexpr,
              MASKED: tl.constexpr, INDEXED: tl.constexpr = True, BARRIER: tl.constexpr = False):
    """One tile of RW state rows of one (batch row, value head): S <- e^g S; u = beta (v - S k); S += u k^T;
    y = S q; S stored in place. col_stride is 1; with HIDE_CONTIGUITY the columns' offsets are multiplied by it,
    an unspecialised argument, so that Triton cannot prove the rows contiguous. MASKED: the tile's accesses under
    a (always true) bounds mask, rows < V and columns < K, as fla-core writes them (Triton 3.6 still emits 16-byte
    accesses for them). INDEXED: the state through slot_idx, else row b's state at slot b. BARRIER: see below."""
    tile = tl.program_id(0)
    hv = tl.program_id(1)
    b = tl.program_id(2)
    kh = hv // GROUP
    if INDEXED:
        slot = tl.load(slot_idx + b).to(tl.int64)
    else:
        slot = b
    rows = tile * RW + tl.arange(0, RW)
    cols = tl.arange(0, K)
    col_off = cols * col_stride if HIDE_CONTIGUITY else cols
    ptrs = state + (slot * HV + hv) * (V * K) + rows[:, None] * K + col_off[None, :]
    if MASKED:
        mask = (rows[:, None] < V) & (cols[None, :] < K)
        s = tl.load(ptrs, mask=mask, other=0.0)
    else:
        s = tl.load(ptrs)
    if BARRIER:  # a block barrier (one warp): nothing is scheduled across it, so the tile's loads issue together
        tl.debug_barrier()
    kv = tl.load(k + (b * (HV // GROUP) + kh) * K + cols).to(tl.float32)
    qv = tl.load(q + (b * (HV // GROUP) + kh) * K + cols).to(tl.float32)
    vv = tl.load(v + (b * HV + hv) * V + rows).to(tl.float32)
    gv = tl.load(g + b * HV + hv)
    bv = tl.load(beta + b * HV + hv)
    s = s * tl.exp(gv)
    u = bv * (vv - tl.sum(s * kv[None, :], axis=1))
    s = s + u[:, None] * kv[None, :]
    yv = tl.sum(s * qv[None, :], axis=1)
    tl.store(y + (b * HV + hv) * V + rows, yv.to(y.dtype.element_ty))
    if MASKED:
        tl.store(ptrs, s, mask=mask)
    else:
        tl.store(ptrs, s)


@triton.jit
def _gdn_step_flat(state, slot_idx, q, k, v, g, beta, y, T, HV: tl.constexpr, GROUP: tl.constexpr,
                   V: tl.constexpr, K: tl.constexpr, RW: tl.constexpr, INDEXED: tl.constexpr, LOOP: tl.constexpr):
    """The masked step on a one-dimensional grid (program = tile + V / RW (value head + HV batch row), 64-bit
    program arithmetic); INDEXED: the state through slot_idx, else row b's state at slot b (a contiguous window);
    LOOP: the token's loads, update and y inside a loop over T (a runtime 1) between the state's load and store."""
    pid = tl.program_id(0).to(tl.int64)
    NT: tl.constexpr = V // RW
    tile = pid % NT
    bh = pid // NT
    b = bh // HV
    hv = bh % HV
    kh = hv // GROUP
    if INDEXED:
        slot = tl.load(slot_idx + b).to(tl.int64)
    else:
        slot = b
    rows = tile * RW + tl.arange(0, RW)
    cols = tl.arange(0, K)
    mask = (rows[:, None] < V) & (cols[None, :] < K)
    ptrs = state + (slot * HV + hv) * (V * K) + rows[:, None] * K + cols[None, :]
    s = tl.load(ptrs, mask=mask, other=0.0)
    pq = q + (b * (HV // GROUP) + kh) * K + cols
    pk = k + (b * (HV // GROUP) + kh) * K + cols
    pv = v + (b * HV + hv) * V + rows
    py = y + (b * HV + hv) * V + rows
    if LOOP:
        for _ in tl.range(0, T):
            kv = tl.load(pk).to(tl.float32)
            qv = tl.load(pq).to(tl.float32)
            vv = tl.load(pv).to(tl.float32)
            s = s * tl.exp(tl.load(g + b * HV + hv))
            u = tl.load(beta + b * HV + hv) * (vv - tl.sum(s * kv[None, :], axis=1))
            s = s + u[:, None] * kv[None, :]
            tl.store(py, tl.sum(s * qv[None, :], axis=1).to(y.dtype.element_ty))
    else:
        kv = tl.load(pk).to(tl.float32)
        qv = tl.load(pq).to(tl.float32)
        vv = tl.load(pv).to(tl.float32)
        s = s * tl.exp(tl.load(g + b * HV + hv))
        u = tl.load(beta + b * HV + hv) * (vv - tl.sum(s * kv[None, :], axis=1))
        s = s + u[:, None] * kv[None, :]
        tl.store(py, tl.sum(s * qv[None, :], axis=1).to(y.dtype.element_ty))
    tl.store(ptrs, s, mask=mask)


def make_flat_kernel(indexed, loop, stages=1, maxnreg=None):
    """A launch of _gdn_step_flat. Without `indexed` the slot indices given must be a window b0 .. b0 + batch - 1:
    the state passed is then that window of the pool (as fla-core is called)."""

    def run(state, shape, q, k, v, g, beta, out, slot_idx):
        H, HV, V, K = shape.num_k_heads, shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
        batch = q.shape[0]
        st = state if indexed else window_view(run, state, slot_idx, batch)
        extra = {} if maxnreg is None else dict(maxnreg=maxnreg)
        run.compiled = _gdn_step_flat[(V // 8 * HV * batch,)](st, slot_idx, q, k, v, g, beta, out, 1, HV=HV,
                                                              GROUP=HV // H, V=V, K=K, RW=8, INDEXED=indexed,
                                                              LOOP=loop, num_warps=1, num_stages=stages, **extra)
    run.windows, run.indexed = {}, indexed
    return run


def make_kernel(scalar=False, masked=False, stages=1, indexed=True, barrier=False):
    """A launch of _gdn_step (`scalar`: the rows' contiguity hidden; `masked`: bounds masks on the tile's accesses;
    `stages`: Triton's num_stages; `indexed`, `barrier`: as the kernel's flags). run.compiled keeps the last
    compiled kernel (main prints its registers and writes its PTX and cubin)."""

    def run(state, shape, q, k, v, g, beta, out, slot_idx):
        H, HV, V, K = shape.num_k_heads, shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
        batch = q.shape[0]
        st = state
        if not indexed:
            st = window_view(run, state, slot_idx, batch)
        run.compiled = _gdn_step[(V // 8, HV, batch)](st, slot_idx, q, k, v, g, beta, out, 1, HV=HV, GROUP=HV // H,
                                                      V=V, K=K, RW=8, HIDE_CONTIGUITY=scalar, MASKED=masked,
                                                      INDEXED=indexed, BARRIER=barrier, num_warps=1,
                                                      num_stages=stages)
    if not indexed:
        run.windows = {}
    run.indexed = indexed
    return run


def window_view(run, state, slot_idx, batch):
    """The pool's window that slot_idx (b0 .. b0 + batch - 1) names: registered by line() for its windows (no host
    read inside a graph capture), else read here."""
    st = run.windows.get((state.data_ptr(), id(slot_idx)))
    if st is None:
        b0 = int(slot_idx[0])
        st = state[b0:b0 + batch]
    return st


def check_against_cuda(run, shape, dev):
    """One step of `run` against our CUDA conventional step on 33 shuffled rows of a 40-slot pool (y poisoned)."""
    torch.manual_seed(1)
    HV, V, K = shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
    inp = gdn_step_inputs(shape, 33, dev)
    idx = torch.randperm(40, device=dev)[:33].to(torch.int32)
    if not getattr(run, "indexed", True):
        idx = torch.arange(5, 38, device=dev, dtype=torch.int32)  # a contiguous window
    s0 = torch.randn(40, HV, V, K, device=dev)
    s_ref, s_tri = s0.clone(), s0.clone()
    y_ref, y_tri = (torch.full_like(inp["v"], float("nan")) for _ in range(2))
    gdn_conventional_decode(s_ref, shape, inp["q"], inp["k"], inp["v"], g=inp["g"], beta=inp["beta"],
                            use_qk_l2norm=False, scale=1.0, out=y_ref, slot_idx=idx)
    run(s_tri, shape, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], y_tri, idx)
    torch.cuda.synchronize()
    ds = (s_tri - s_ref).abs().max().item()
    dy = (y_tri.float() - y_ref.float()).abs().max().item()
    untouched = torch.ones(40, dtype=torch.bool, device=dev)
    untouched[idx.long()] = False
    assert torch.equal(s_tri[untouched], s0[untouched]), "unused slots changed"
    assert ds < 1e-5 and dy < 2e-2 * y_ref.float().abs().max().item(), (ds, dy)
    return ds, dy


def line(batch, dev, fla, variants):
    shape, (HV, K) = GdnLayerShape(16, 64, 128, 128), (64, 128)
    slots = pool_slots(batch, HV * K * K * 4)
    slot_sets = cold_slot_sets(slots, batch, HV * K * K * 4, device=dev)
    n = graph_launches(LAUNCHES, len(slot_sets), 16)
    inp = gdn_step_inputs(shape, batch, dev)
    q, k, v, g, beta, out = (inp[n] for n in ("q", "k", "v", "g", "beta", "out"))
    state = torch.randn(slots, HV, K, K, device=dev)
    windows = [torch.arange(j * batch, (j + 1) * batch, device=dev, dtype=torch.int32) for j in range(len(slot_sets))]
    res = {}
    kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, out=out)
    for name, idx_sets in (("conv", slot_sets), ("conv (windows)", windows)):
        it = itertools.cycle(idx_sets)
        res[name] = time_graph_us(lambda: gdn_conventional_decode(state, shape, q, k, v, slot_idx=next(it), **kw), n)
    views = itertools.cycle([state[j * batch:(j + 1) * batch] for j in range(len(slot_sets))])
    res["conv (windows, no index)"] = time_graph_us(
        lambda: gdn_conventional_decode(next(views), shape, q, k, v, slot_idx=None, **kw), n)
    for vname, run in variants:
        if hasattr(run, "windows"):
            run.windows.update({(state.data_ptr(), id(w)): state[j * batch:(j + 1) * batch]
                                for j, w in enumerate(windows)})
        it = itertools.cycle(windows)
        res[f"{vname} (windows)"] = time_graph_us(lambda: run(state, shape, q, k, v, g, beta, out, next(it)), n)
        if hasattr(run, "windows"):
            run.windows.clear()
    if fla is not None:
        from bench_gdn import fla_kernel_step

        fr, (v_first, bv, warps, stages) = fla
        st = state if v_first else state.view(slots, HV, K, K)
        args = (q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None])
        step = fla_kernel_step(fr, [st[j * batch:(j + 1) * batch] for j in range(len(slot_sets))], *args,
                               torch.empty_like(args[2]), v_first, bv, warps, stages)
        res["fla"] = time_graph_us(step, n)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="64,256,512")
    ap.add_argument("--fla-cfg", default="VK/BV8/w1/s3")
    ap.add_argument("--fla-wheel", default=".cache/wheels/fla_core-0.6.0-py3-none-any.whl")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--variants", default="tri masked,tri masked noidx",
                    help="Triton variants to time: names joined by commas, all, or none")
    ap.add_argument("--env", default=None, help="VAR=v1,v2: every pass once per value of a knob the library reads "
                    "at launch (A/B builds)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    fla = None
    if args.fla_cfg:
        from bench_gdn import load_fla_fused_recurrent, parse_fla_cfg

        fr, _ = load_fla_fused_recurrent(Path(args.fla_wheel))
        fla = (fr, parse_fla_cfg(args.fla_cfg))
    shape = GdnLayerShape(16, 64, 128, 128)
    variants = [("tri vec", make_kernel()), ("tri masked", make_kernel(masked=True)),
                ("tri masked s3", make_kernel(masked=True, stages=3)),
                ("tri masked noidx", make_kernel(masked=True, indexed=False)),
                ("tri masked bar", make_kernel(masked=True, barrier=True)),
                ("tri masked bar noidx", make_kernel(masked=True, indexed=False, barrier=True)),
                ("flat idx", make_flat_kernel(True, False)), ("flat idx r64", make_flat_kernel(True, False, maxnreg=64)),
                ("flat", make_flat_kernel(False, False)), ("flat loop", make_flat_kernel(False, True)),
                ("flat loop s3", make_flat_kernel(False, True, 3)), ("flat idx loop s3", make_flat_kernel(True, True, 3)),
                ("tri scalar", make_kernel(scalar=True))]
    if args.variants != "all":
        variants = [(n, r) for n, r in variants if n in args.variants.split(",")]
    out_dir = os.environ.get("OUT")
    for vname, run in variants:
        ds, dy = check_against_cuda(run, shape, dev)
        ck = run.compiled
        print(f"{vname}: matches the CUDA step (state max diff {ds:.2e}, y max diff {dy:.2e}); "
              f"{ck.n_regs} registers, {ck.n_spills} spills", flush=True)
        if out_dir:
            stem = Path(out_dir, vname.replace(" ", "_"))
            stem.with_suffix(".ptx").write_text(ck.asm["ptx"])
            stem.with_suffix(".cubin").write_bytes(ck.asm["cubin"])
    print(f"copy bandwidth {copy_bandwidth_gbs() / 1e3:.2f} TB/s", flush=True)
    var, values = args.env.split("=", 1) if args.env else (None, "-")
    for p in range(args.passes):
        for value in values.split(","):
            if var:
                os.environ[var] = value
            for batch in (int(b) for b in args.batches.split(",")):
                res = line(batch, dev, fla, variants)
                print(f"pass {p + 1} {var or ''}={value} b{batch:<4d} " +
                      "  ".join(f"{k} {v:7.1f}" for k, v in res.items()), flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
