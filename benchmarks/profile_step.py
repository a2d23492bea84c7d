"""One conventional and one ReplaySSM (output-only route) decode step, three times, for a profiler:
    ncu --clock-control none -k regex:output_only_kernel python benchmarks/profile_step.py --batch 256
Mamba-2: the Super shape; --family gdn: Qwen3.5-122B-A10B. --read-format fp16 / bf16 / fp8 / nvfp4 (Mamba-2): the
ReplaySSM step reads a copy in that format (fp32 checkpoint). Every row sits at --history records (non-flush), or with
--stagger (Mamba-2) slot s at s mod L: one row in L flushes, as in the amortised step (nvfp4: the flush-only launch
of decode_kernel, then the output-only kernel).
--windows (GDN): also our conventional kernel on a contiguous window of the pool, no slot indices.
--fla VK/BV8/w1/s3 (GDN): also fla-core's fused_recurrent kernel (bench_gdn.py's direct launch, its state on a
contiguous [batch, HV, V, K] (VK) or [batch, HV, K, V] (KV) window; the wheel from --fla-wheel), for a side-by-side
profile with our conventional kernel.
"""

import argparse
import math

import torch

from trtllm_replayssm.config import CURSOR_HISTORY, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool
from trtllm_replayssm.quant import quantize_state


def fla_steps(batch, cfg, wheel, dev):
    """fla-core's kernel three times at cfg ("VK/BV8/w1/s3"), as bench_gdn.py launches it (final state in place)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_gdn import fla_kernel_step, load_fla_fused_recurrent, parse_fla_cfg
    fr, _ = load_fla_fused_recurrent(Path(wheel))
    v_first, bv, warps, stages = parse_fla_cfg(cfg)
    H, HV, K, V = 16, 64, 128, 128
    state = torch.randn(batch, HV, V, K, device=dev)
    if not v_first:
        state = state.view(batch, HV, K, V)
    q4 = torch.nn.functional.normalize(torch.randn(batch, 1, H, K, device=dev), dim=-1).bfloat16()
    k4 = torch.nn.functional.normalize(torch.randn(batch, 1, H, K, device=dev), dim=-1).bfloat16()
    v4 = torch.randn(batch, 1, HV, V, device=dev).bfloat16()
    g3, b3 = -torch.rand(batch, 1, HV, device=dev) * 0.5, torch.rand(batch, 1, HV, device=dev)
    run = fla_kernel_step(fr, [state], q4, k4, v4, g3, b3, torch.empty_like(v4), v_first, bv, warps, stages)
    for _ in range(3):
        run()


def gdn_steps(batch, L, history, dev, windows=False):
    shape = GdnLayerShape(16, 64, 128, 128)
    pool = GdnStatePool(shape, 2 * batch, ReplayConfig(L, torch.float32, torch.bfloat16), device=dev)
    pool.checkpoint.normal_()
    pool.ring_u.normal_()
    pool.ring_k.normal_(0.0, 128 ** -0.5)
    pool.ring_g.uniform_(-0.3, -0.01)
    q = torch.nn.functional.normalize(torch.randn(batch, 16, 128, device=dev), dim=-1).bfloat16()
    k = torch.nn.functional.normalize(torch.randn(batch, 16, 128, device=dev), dim=-1).bfloat16()
    v = torch.randn(batch, 64, 128, device=dev).bfloat16()
    g, beta = -torch.rand(batch, 64, device=dev) * 0.5, torch.rand(batch, 64, device=dev)
    idx = torch.randperm(2 * batch, device=dev)[:batch].to(torch.int32)
    kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, out=torch.empty_like(v), slot_idx=idx)
    for _ in range(3):
        pool.cursor[..., CURSOR_HISTORY] = history
        gdn_conventional_decode(pool.checkpoint, shape, q, k, v, **kw)
        gdn_replay_decode(pool, q, k, v, **kw)
    if windows:  # the conventional kernel on a contiguous window of the pool, no slot indices (fla-core's layout)
        kw.pop("slot_idx")
        for _ in range(3):
            gdn_conventional_decode(pool.checkpoint[:batch], shape, q, k, v, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--history", type=int, default=8)
    ap.add_argument("--read-format", default="none")
    ap.add_argument("--family", choices=("mamba2", "gdn"), default="mamba2")
    ap.add_argument("--fla", default=None, help="GDN: also fla-core's kernel at this configuration, e.g. VK/BV8/w1/s3")
    ap.add_argument("--fla-wheel", default=".cache/wheels/fla_core-0.6.0-py3-none-any.whl")
    ap.add_argument("--windows", action="store_true",
                    help="GDN: also our conventional kernel on a contiguous window of the pool with no slot indices")
    ap.add_argument("--stagger", action="store_true",
                    help="Mamba-2: slot s at history s mod L (one row in L flushes: the amortised step's mix)")
    args = ap.parse_args()
    if args.family == "gdn":
        gdn_steps(args.batch, args.L, args.history, torch.device("cuda"), args.windows)
        if args.fla:
            fla_steps(args.batch, args.fla, args.fla_wheel, torch.device("cuda"))
        torch.cuda.synchronize()
        return
    shape = Mamba2LayerShape(128, 64, 128, 8)
    dev = torch.device("cuda")
    b, H, P, N, G = args.batch, 128, 64, 128, 8
    slots = 2 * b
    pool = Mamba2StatePool(shape, slots, ReplayConfig(args.L, torch.float32, torch.bfloat16, args.read_format),
                           device=dev)
    pool.checkpoint.normal_()
    if args.read_format != "none":
        for name, part in quantize_state(pool.checkpoint, args.read_format).items():
            pool.buffers[name].copy_(part)
    pool.ring_x.normal_()
    pool.ring_B.normal_()
    pool.ring_dt.uniform_(0.01, 0.3)
    A = -torch.exp(torch.rand(H, device=dev) * math.log(16.0))
    D, dt_bias = torch.randn(H, device=dev), torch.rand(H, device=dev) * 3 - 4
    x, z = torch.randn(b, H, P, device=dev).bfloat16(), torch.randn(b, H, P, device=dev).bfloat16()
    dt = torch.randn(b, H, device=dev).bfloat16()
    B, C = torch.randn(b, G, N, device=dev).bfloat16(), torch.randn(b, G, N, device=dev).bfloat16()
    idx = torch.randperm(slots, device=dev)[:b].to(torch.int32)
    out = torch.empty_like(x)
    for _ in range(3):
        if args.stagger:
            pool.cursor[..., CURSOR_HISTORY] = (torch.arange(slots, device=dev, dtype=torch.int32) % args.L).view(
                slots, *([1] * (pool.cursor.dim() - 2)))
        else:
            pool.cursor[..., CURSOR_HISTORY] = args.history
        conventional_decode(pool.checkpoint, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=idx, out=out)
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=idx, out=out)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
