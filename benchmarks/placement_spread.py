"""How much the non-flush step moves with where the pool and the batch's rows land (GPU; measurement only).

    python benchmarks/placement_spread.py [SEED]

Mamba-2 Nemotron-3-Super b256 L16 (fp32 reads and the nvfp4 read copy) and GDN Qwen3.5-122B b256 L16, fp32 state,
bf16 activations. Five trials in one process, each with a spacer allocation of random size before fresh pools
(shifting their addresses) and a fresh random set of batch rows; the non-flush step (every row at history L/2)
timed as benchmarks/bench_read_copy.py times it, twice per pool. Run it in several processes to see the spread
across processes too (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200 section 4)."""
import sys

import torch

from trtllm_replayssm.bench.inputs import gdn_step_inputs, mamba2_step_inputs
from trtllm_replayssm.bench.timing import pool_slots, time_graph_us
from trtllm_replayssm.config import CURSOR_HISTORY, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2 import replay_decode
from trtllm_replayssm.ops.gdn import gdn_replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool
from trtllm_replayssm.quant import quantize_state


def main(seed=0):
    dev = torch.device("cuda")
    torch.manual_seed(seed)
    L, batch, launches = 16, 256, 64
    shape = Mamba2LayerShape(128, 64, 128, 8)
    num_slots = pool_slots(batch, 128 * 64 * 128 * 4)
    inp = mamba2_step_inputs(shape, batch, dev)
    x, dt, B, C, A = (inp[n] for n in ("x", "dt", "B", "C", "A"))
    mkw = {n: inp[n] for n in ("D", "z", "dt_bias", "out")}

    def nonflush(pool, step):
        hist = pool.cursor[..., CURSOR_HISTORY]
        fill = time_graph_us(lambda: hist.fill_(L // 2), launches)
        return [time_graph_us(lambda: (hist.fill_(L // 2), step()), launches) - fill for _ in range(2)]

    gshape = GdnLayerShape(16, 64, 128, 128)
    gslots = pool_slots(batch, 64 * 128 * 128 * 4)
    ginp = gdn_step_inputs(gshape, batch, dev)
    q, k, v = ginp["q"], ginp["k"], ginp["v"]
    gkw = dict(g=ginp["g"], beta=ginp["beta"], use_qk_l2norm=False, scale=1.0, out=ginp["out"])
    print(f"slots: mamba2 {num_slots}, gdn {gslots}")
    for trial in range(5):
        spacer = torch.empty(int(torch.randint(1, 4096, (1,))) * 65536, dtype=torch.uint8, device=dev)
        idx = torch.randperm(num_slots, device=dev)[:batch].to(torch.int32)
        res = {}
        for fmt in ("none", "nvfp4"):
            pool = Mamba2StatePool(shape, num_slots, ReplayConfig(L, torch.float32, torch.bfloat16, fmt), device=dev)
            pool.checkpoint.normal_()
            pool.ring_x.normal_()
            pool.ring_B.normal_()
            pool.ring_dt.uniform_(0.01, 0.3)
            if fmt != "none":
                for name, part in quantize_state(pool.checkpoint, fmt).items():
                    pool.buffers[name].copy_(part)
            pool.set_cursor(idx.long(), torch.arange(batch, device=dev, dtype=torch.int32) % L)
            step = lambda: replay_decode(pool, x, dt, B, C, A, slot_idx=idx, **mkw)  # noqa: E731
            res[fmt] = nonflush(pool, step)
            del pool
            torch.cuda.empty_cache()
        gidx = torch.randperm(gslots, device=dev)[:batch].to(torch.int32)
        gpool = GdnStatePool(gshape, gslots, ReplayConfig(L, torch.float32, torch.bfloat16), device=dev)
        gpool.checkpoint.normal_()
        gpool.ring_u.normal_()
        gpool.ring_k.normal_()
        gpool.ring_g.uniform_(-0.3, -0.01)
        gpool.set_cursor(gidx.long(), torch.arange(batch, device=dev, dtype=torch.int32) % L)
        gres = nonflush(gpool, lambda: gdn_replay_decode(gpool, q, k, v, slot_idx=gidx, **gkw))
        del gpool
        torch.cuda.empty_cache()
        nf0, nf1 = res["none"], res["nvfp4"]
        print(f"trial {trial} spacer {spacer.numel() >> 20:5d} MiB  mamba2 fp32 reads {nf0[0]:6.1f} / {nf0[1]:6.1f}  "
              f"nvfp4 {nf1[0]:5.1f} / {nf1[1]:5.1f}  ratio {nf0[0] / nf1[0]:.3f} / {nf0[1] / nf1[1]:.3f}   "
              f"gdn {gres[0]:6.1f} / {gres[1]:6.1f}", flush=True)
        del spacer


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
