"""Run-to-run determinism of the decode, verify and flush kernels: the same inputs on the same pool contents, run
twice, must give bitwise identical outputs and pools (every buffer: checkpoint, rings, cursors, read copies).

    python benchmarks/determinism.py [--out FILE.md]      # needs a CUDA device and the kernel library

Each case runs several steps past flushes (L=4) with rows at different ring positions (staggered starts) and a
padding row (its output rows are not compared: nothing writes them); exits 1 and names the case and tensor on the first difference.
"""

from __future__ import annotations

import argparse
import sys

import torch

from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.bench.inputs import gdn_step_inputs, mamba2_step_inputs
from trtllm_replayssm.ops import gdn, mamba2
from trtllm_replayssm.ops.slots import spec_commit
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

STEPS, L, T, BATCH, SLOTS = 9, 4, 2, 6, 9


def _slots(device):
    s = torch.randperm(SLOTS, device=device)[:BATCH].to(torch.int32)
    s[2] = -1  # a padding row
    return s


def _staggered(pool, slot_idx):
    """Rows at different ring positions: slot i starts with i % L records' worth of history."""
    hist = torch.arange(pool.num_slots, device=pool.device, dtype=torch.int32) % (L - 1)
    pool.set_cursor(torch.arange(pool.num_slots, device=pool.device), hist, hist % L)


def _mamba2_pool(device, read_format="none"):
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=128, ngroups=2)
    pool = Mamba2StatePool(shape, SLOTS, ReplayConfig(L, "fp32", "bf16", read_format=read_format,
                                                      latency_route_bytes=0), device=device)
    for s in range(SLOTS):
        pool.reset_slot(s, torch.randn(8, 64, 128, device=device) * 0.1)
    for name in ("ring_x", "ring_B", "ring_dt"):
        pool.buffers[name].copy_(torch.randn_like(pool.buffers[name], dtype=torch.float32) * 0.1)
    return shape, pool


def _gdn_pool(device, read_format="none"):
    shape = GdnLayerShape(num_k_heads=2, num_v_heads=4, head_k_dim=128, head_v_dim=128)
    pool = GdnStatePool(shape, SLOTS, ReplayConfig(L, "fp32", "bf16", read_format=read_format,
                                                   latency_route_bytes=0), device=device)
    for s in range(SLOTS):
        pool.reset_slot(s, torch.randn(4, 128, 128, device=device) * 0.1)
    for name in ("ring_u", "ring_k", "ring_g"):
        pool.buffers[name].copy_(torch.randn_like(pool.buffers[name], dtype=torch.float32) * 0.1)
    return shape, pool


def _decode_run(family, read_format, device, seed):
    torch.manual_seed(seed)
    shape, pool = (_mamba2_pool if family == "mamba2" else _gdn_pool)(device, read_format)
    slots = _slots(device)
    _staggered(pool, slots)
    outs = []
    for _ in range(STEPS):
        if family == "mamba2":
            i = mamba2_step_inputs(shape, BATCH, device)
            outs.append(mamba2.replay_decode(pool, i["x"], i["dt"], i["B"], i["C"], i["A"], D=i["D"], z=i["z"],
                                             dt_bias=i["dt_bias"], slot_idx=slots).clone())
        else:
            i = gdn_step_inputs(shape, BATCH, device)
            outs.append(gdn.gdn_replay_decode(pool, i["q"], i["k"], i["v"], g=i["g"], beta=i["beta"],
                                              use_qk_l2norm=False, scale=1.0, slot_idx=slots).clone())
    return [o[slots >= 0] for o in outs], pool


def _verify_run(family, device, seed):
    torch.manual_seed(seed)
    shape, pool = (_mamba2_pool if family == "mamba2" else _gdn_pool)(device)
    pool.set_cursor(torch.arange(SLOTS, device=device), 0, 0)
    slots = _slots(device)
    outs = []
    for _ in range(STEPS):
        if family == "mamba2":
            xs = [mamba2_step_inputs(shape, BATCH, device) for _ in range(T)]
            cat = {k: torch.stack([x[k] for x in xs], 1) for k in ("x", "dt", "B", "C", "z")}
            y = mamba2.replay_verify(pool, cat["x"], cat["dt"], cat["B"], cat["C"], xs[0]["A"], D=xs[0]["D"],
                                     z=cat["z"], dt_bias=xs[0]["dt_bias"], slot_idx=slots)
        else:
            xs = [gdn_step_inputs(shape, BATCH, device) for _ in range(T)]
            cat = {k: torch.stack([x[k] for x in xs], 1) for k in ("q", "k", "v", "g", "beta")}
            y = gdn.replay_verify(pool, cat["q"], cat["k"], cat["v"], cat["g"], cat["beta"], use_qk_l2norm=False,
                                  scale=1.0, slot_idx=slots)
        outs.append(y.clone())
        accepted = torch.randint(1, T + 1, (BATCH,), device=device, dtype=torch.int32)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
    return [o[slots >= 0] for o in outs], pool


CASES = {
    "mamba2 decode + flush (fp32)": lambda d, s: _decode_run("mamba2", "none", d, s),
    "mamba2 decode + flush (nvfp4 read copy)": lambda d, s: _decode_run("mamba2", "nvfp4", d, s),
    "gdn decode + flush (fp32)": lambda d, s: _decode_run("gdn", "none", d, s),
    "gdn decode + flush (fp8 read copy)": lambda d, s: _decode_run("gdn", "fp8", d, s),
    "mamba2 verify + commit": lambda d, s: _verify_run("mamba2", d, s),
    "gdn verify + commit": lambda d, s: _verify_run("gdn", d, s),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="write the result table (markdown) here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("determinism: needs a CUDA device", file=sys.stderr)
        return 2
    rows, bad = [], 0
    for name, run in CASES.items():
        (y1, p1), (y2, p2) = run("cuda", 7), run("cuda", 7)
        diff = [f"y step {i}" for i, (a, b) in enumerate(zip(y1, y2)) if not torch.equal(a.view(torch.uint8),
                                                                                          b.view(torch.uint8))]
        diff += [k for k in p1.buffers if not torch.equal(p1.buffers[k].view(torch.uint8),
                                                          p2.buffers[k].view(torch.uint8))]
        bad += bool(diff)
        rows.append(f"| {name} | {STEPS} | {'bitwise identical' if not diff else 'DIFFERS: ' + ', '.join(diff)} |")
    table = "\n".join(["| case | steps | two runs |", "|---|---|---|", *rows])
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
