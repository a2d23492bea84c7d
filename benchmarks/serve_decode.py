"""Decode throughput through the serving runtime: ReplaySSM vs conventional SSM decode in the same network, the
runtime's model runner with a CUDA graph per batch bucket, on SSM-heavy configs at the target models' layer
shapes (a few layers, seeded random weights).

    python benchmarks/serve_decode.py --out benchmarks/serve_decode.md        # H200: bf16, batch 1 / 64 / 256
    python benchmarks/serve_decode.py --smoke                                 # any machine: tiny, seconds

Configs (the bundled full configs' SSM and attention shapes, hidden size and vocabulary; 7 SSM layers + 1
attention layer; no MoE blocks: the runtime evaluates MoE experts densely, which would dominate a step):
- Super-7M1A: Nemotron-3-Super (Mamba-2 H=128 P=64 N=128 G=8, hidden 4096, vocab 131072), pattern MMMMMMM*.
- Qwen122B-7G1A: Qwen3.5-122B-A10B (GDN H=16 HV=64 K=V=128, hidden 3072, vocab 248320), dense MLP of 1024.
Every slot of the pool is filled by prefill (8-token prompts), then each measured step is what the engine runs:
the decode graph's replay plus the greedy sample's copy to the host. Per step time: the median of 5 runs of
4L steps each (CUDA events, after 2L warm-up steps), so every run spans whole flush cycles of staggered rows.
Also the requests that fit a fixed state budget (16 GiB) per mode: from the planner and from the StateSet's real
bytes per slot.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.model_config import analyze, load_config  # noqa: E402
from trtllm_replayssm.network import load_network  # noqa: E402
from trtllm_replayssm.planner import PlanSettings, request_bytes  # noqa: E402
from trtllm_replayssm.runtime.runner import ModelRunner  # noqa: E402

BUDGET = 16 << 30
PROMPT = 8


def configs(smoke: bool) -> dict:
    if smoke:
        return {"tiny": load_config("nemotron_h_tiny") | {"hybrid_override_pattern": "MM*M"}}
    sup = load_config("nemotron3_super")
    q = load_config("qwen3_5_122b_a10b")
    q = q.get("text_config", q)
    keep = ("hidden_size", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel",
            "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")
    super_cfg = {k: sup[k] for k in keep} | {"model_type": "nemotron_h", "hybrid_override_pattern": "MMMMMMM*",
                                             "num_hidden_layers": 8, "intermediate_size": 1024}
    qkeep = ("hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
             "linear_value_head_dim", "linear_conv_kernel_dim", "num_attention_heads", "num_key_value_heads",
             "head_dim", "vocab_size")
    qwen_cfg = {k: q[k] for k in qkeep} | {"model_type": "qwen3_5_text", "num_hidden_layers": 8,
                                           "layer_types": ["linear_attention"] * 7 + ["full_attention"],
                                           "intermediate_size": 1024}
    return {"Super-7M1A": super_cfg, "Qwen122B-7G1A": qwen_cfg}


def time_steps(runner: ModelRunner, batch: int, steps: int, runs: int) -> float:
    """Median seconds per engine decode step (graph replay + greedy sample to the host) over `runs` runs."""
    slots = list(range(batch))
    pos = [PROMPT] * batch
    tok = [1] * batch

    def one():
        nonlocal pos, tok
        logits = runner.decode(tok, pos, slots)
        tok = logits.argmax(-1).tolist()
        pos = [p + 1 for p in pos]

    for _ in range(steps // 2):
        one()
    times = []
    for _ in range(runs):
        if runner.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                one()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / steps)
        else:
            import time
            t0 = time.perf_counter()
            for _ in range(steps):
                one()
            times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def fill(runner: ModelRunner, batch: int) -> None:
    """Prefills `batch` slots with 8-token prompts of different tokens, then staggers the rows' flush phases
    (ReplaySSM): slot s starts with s % (L-1) records in its ring (zeros, which the pools allow), so the rows of a
    step flush at different steps, as requests that arrived at different times do."""
    for s0 in range(0, batch, 64):
        slots = list(range(s0, min(batch, s0 + 64)))
        runner.prefill([[1 + (s * 7 + j) % 50 for j in range(PROMPT)] for s in slots], slots)
    for pool in runner.state.pools.values():
        L = pool.buffer_len
        if L > 1:
            idx = torch.arange(batch, device=pool.device)
            pool.set_cursor(idx, (idx % (L - 1)).to(torch.int32), torch.zeros_like(idx, dtype=torch.int32))


def run(args) -> list[dict]:
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    batches = [1, 2] if args.smoke else args.batches
    rows = []
    for name, cfg in configs(args.smoke).items():
        plan = analyze(cfg)
        settings = PlanSettings(context_len=PROMPT + args.steps * 3, buffer_len=args.buffer_len)
        per_mode = {}
        for mode in ("conventional", "replay"):
            net = load_network(_write(cfg, args.tmp / name), device=device, mode=mode, dtype=dtype,
                               replay=ReplayConfig(args.buffer_len, "fp32"))
            runner = ModelRunner(net, max(batches), PROMPT + args.steps * (args.runs + 2) + 8)
            fill(runner, max(batches))
            per_mode[mode] = {b: time_steps(runner, b, args.steps, args.runs) for b in batches}
            real = runner.state.bytes_per_slot
            planned = request_bytes(plan, mode, settings)["total"]
            per_mode[mode]["fit"] = (BUDGET // real, BUDGET // planned)
            del runner, net
            if device.type == "cuda":
                torch.cuda.empty_cache()
        for b in batches:
            c, r = per_mode["conventional"][b], per_mode["replay"][b]
            rows.append({"config": name, "batch": b, "conventional_ms": c * 1e3, "replay_ms": r * 1e3,
                         "conventional_tok_s": b / c, "replay_tok_s": b / r, "speedup": c / r})
        rows.append({"config": name, "fit_conventional": per_mode["conventional"]["fit"],
                     "fit_replay": per_mode["replay"]["fit"]})
    return rows


def _write(cfg: dict, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return str(folder)


def table(rows, args) -> str:
    dev = "CPU (smoke)" if args.smoke else torch.cuda.get_device_name()
    out = [f"Decode through the runtime (ModelRunner, CUDA graph per bucket, greedy sample to the host each step); "
           f"{dev}; L={args.buffer_len}, fp32 checkpoint, bf16 weights and activations; median of {args.runs} "
           f"runs of {args.steps} steps. Produced by `python benchmarks/serve_decode.py`.", "",
           "| config | batch | conventional ms/step | replay ms/step | conventional tok/s | replay tok/s | replay speed-up |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "batch" in r:
            out.append(f"| {r['config']} | {r['batch']} | {r['conventional_ms']:.3f} | {r['replay_ms']:.3f} | "
                       f"{r['conventional_tok_s']:.0f} | {r['replay_tok_s']:.0f} | {r['speedup']:.2f}x |")
    out += ["", f"Requests that fit a {BUDGET >> 30} GiB state budget (SSM pools, conv state and a KV cache of "
            f"{PROMPT + args.steps * 3} tokens; real: the StateSet's bytes per slot, planned: trtllm_replayssm/planner.py):", "",
            "| config | conventional real / planned | replay real / planned |", "|---|---|---|"]
    for r in rows:
        if "fit_replay" in r:
            c, p = r["fit_conventional"], r["fit_replay"]
            out.append(f"| {r['config']} | {c[0]} / {c[1]} | {p[0]} / {p[1]} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny config on the CPU (checks the script, no figures)")
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 64, 256])
    p.add_argument("--buffer-len", type=int, default=16)
    p.add_argument("--steps", type=int, default=None, help="steps per timed run (default 4L; smoke: 4)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--out", help="write the markdown table here")
    p.add_argument("--tmp", type=Path, default=Path("/tmp/serve_decode_configs"))
    args = p.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("serve_decode: needs a CUDA device (or --smoke)", file=sys.stderr)
        return 2
    args.steps = args.steps or (4 if args.smoke else 4 * args.buffer_len)
    if args.smoke:
        args.runs = min(args.runs, 2)
    text = table(run(args), args)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
