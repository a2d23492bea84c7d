"""Whether the GDN conventional step's speed depends on the order of the batch's slots or on their contiguity (GPU;
measurement only).

    python benchmarks/slot_order.py [--batches 64,256,512] [--passes 2] [--replay]

Qwen3.5-122B-A10B (H 16, HV 64, K = V = 128), fp32 state, bf16 activations, prepared inputs, a pool of
pool_slots(batch) slots; our conventional step timed (CUDA graphs) with the batch's slot indices: `window` the
contiguous slots 0 .. batch-1 in order, `window shuffled` the same slots in random order, `window reversed` in
descending order, `random sorted` a random subset of the pool's slots in ascending order, `random shuffled` the same
subset in random order (the benchmark tables' `conv` column). --replay: also the ReplaySSM step (L16, amortised over
staggered cursors) on a pool of the same slots, with the same orders. A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200 section 6."""
import argparse

import torch

from trtllm_replayssm.bench.inputs import gdn_step_inputs
from trtllm_replayssm.bench.timing import pool_slots, time_graph_us
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.pool import GdnStatePool


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="64,256,512")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--replay", action="store_true", help="also the ReplaySSM step (L16, amortised)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    shape, (HV, K) = GdnLayerShape(16, 64, 128, 128), (64, 128)
    for batch in (int(b) for b in args.batches.split(",")):
        slots = pool_slots(batch, HV * K * K * 4)
        state = torch.randn(slots, HV, K, K, device=dev)
        inp = gdn_step_inputs(shape, batch, dev)
        q, k, v = inp["q"], inp["k"], inp["v"]
        kw = dict(g=inp["g"], beta=inp["beta"], use_qk_l2norm=False, scale=1.0, out=inp["out"])
        window = torch.arange(batch, device=dev, dtype=torch.int32)
        subset = torch.randperm(slots, device=dev)[:batch].to(torch.int32)
        orders = {"window": window, "window shuffled": window[torch.randperm(batch, device=dev)],
                  "window reversed": window.flip(0), "random sorted": subset.sort().values,
                  "random shuffled": subset}
        for p in range(args.passes):
            line = []
            for name, idx in orders.items():
                us = time_graph_us(lambda: gdn_conventional_decode(state, shape, q, k, v, slot_idx=idx, **kw), 64)
                line.append(f"{name} {us:7.1f}")
            print(f"b{batch:<4d} pass {p + 1}  conv    " + "  ".join(line), flush=True)
        del state
        torch.cuda.empty_cache()
        if not args.replay:
            continue
        L = 16
        pool = GdnStatePool(shape, slots, ReplayConfig(L, torch.float32, torch.bfloat16), device=dev)
        pool.checkpoint.normal_()
        pool.ring_u.normal_()
        pool.ring_k.normal_()
        pool.ring_g.uniform_(-0.3, -0.01)
        for p in range(args.passes):
            line = []
            for name, idx in orders.items():
                pool.set_cursor(idx.long(), torch.arange(batch, device=dev, dtype=torch.int32) % L)
                us = time_graph_us(lambda: gdn_replay_decode(pool, q, k, v, slot_idx=idx, **kw), 8 * L, replays=20)
                line.append(f"{name} {us:7.1f}")
            print(f"b{batch:<4d} pass {p + 1}  replay  " + "  ".join(line), flush=True)
        del pool
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
