"""Does a timing depend on its place in the run? One GDN layer (Qwen3.5-122B-A10B, fp32 state, bf16 activations)
at one batch: our conventional step (`conv`) and the ReplaySSM step (`replay`, the latency route at small
batches) timed as the tables time them (CUDA graphs over disjoint cold slot sets, trtllm_replayssm.bench.timing),
in the order given, on one pool, then again on a fresh pool.

    python benchmarks/timing_order.py --order conv,conv,replay,conv,replay [--batch 1] [--pools 2]
"""

import argparse
import itertools

import torch

from trtllm_replayssm.bench.timing import cold_slot_sets, copy_bandwidth_gbs, graph_launches, pool_slots, time_graph_us_raw
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.pool import GdnStatePool


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", default="conv,conv,replay,conv,replay")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--pools", type=int, default=2)
    ap.add_argument("--L", type=int, default=16)
    args = ap.parse_args()
    dev, batch, L = torch.device("cuda"), args.batch, args.L
    print(f"copy bandwidth {copy_bandwidth_gbs() / 1e3:.2f} TB/s", flush=True)
    shape, (H, HV, K) = GdnLayerShape(16, 64, 128, 128), (16, 64, 128)
    for pool_no in range(args.pools):
        slots = pool_slots(batch, HV * K * K * 4)
        slot_sets = cold_slot_sets(slots, batch, HV * K * K * 4, device=dev)
        n = graph_launches(64, len(slot_sets), L)
        q = torch.nn.functional.normalize(torch.randn(batch, H, K, device=dev), dim=-1).bfloat16()
        k = torch.nn.functional.normalize(torch.randn(batch, H, K, device=dev), dim=-1).bfloat16()
        v = torch.randn(batch, HV, K, device=dev).bfloat16()
        g, beta = -torch.rand(batch, HV, device=dev) * 0.5, torch.rand(batch, HV, device=dev)
        kw = dict(g=g, beta=beta, use_qk_l2norm=False, scale=1.0, out=torch.empty_like(v))
        pool = GdnStatePool(shape, slots, ReplayConfig(L, torch.float32, torch.bfloat16), device=dev)
        pool.checkpoint.normal_()
        sets = itertools.cycle(slot_sets)
        steps = {
            "conv": lambda: gdn_conventional_decode(pool.checkpoint, shape, q, k, v, slot_idx=next(sets), **kw),
            "replay": lambda: gdn_replay_decode(pool, q, k, v, slot_idx=next(sets), **kw),
        }
        times = [f"{name} {time_graph_us_raw(steps[name], n):.2f}" for name in args.order.split(",")]
        print(f"pool {pool_no} b{batch} ({n} launches per graph): " + "  ".join(times), flush=True)
        pool = steps = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
