"""Where a decode step's GPU time goes: the runtime's decode step (CUDA graph replay, then the greedy argmax) on
the serve_decode.py configs at one batch, replay and conventional, under torch.profiler; kernel time per category
(SSM kernels, GEMMs, attention, everything else), in microseconds per step.

    python benchmarks/step_breakdown.py --batch 256 --out benchmarks/step_breakdown.md
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_decode import PROMPT, _write, configs, fill  # noqa: E402

from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.network import load_network  # noqa: E402
from trtllm_replayssm.runtime.runner import ModelRunner  # noqa: E402

CATEGORIES = [  # first match wins
    ("conv1d", r"conv1d"),
    ("gated RMSNorm (fused)", r"replayssm::norm::"),
    ("SSM (ReplaySSM / conventional kernels)", r"replayssm|rssm|output_only|decode_kernel|mamba2|gdn|flush"),
    ("GEMM (projections, MLP, LM head)", r"gemm|xmma|cutlass|nvjet|sm90_|ampere_|cublas|matmul"),
    ("softmax / reductions", r"softmax|reduce|argmax|max_|sum"),
    ("gather / scatter / index", r"index|gather|scatter|copy"),
]


def category(name: str) -> str:
    low = name.lower()
    for label, pattern in CATEGORIES:
        if re.search(pattern, low):
            return label
    return "other elementwise / norms"


def profile(runner: ModelRunner, batch: int, steps: int) -> tuple[dict, dict]:
    slots, tok, pos = list(range(batch)), [1] * batch, [PROMPT] * batch
    for _ in range(3):  # capture and warm up
        runner.decode(tok, pos, slots).argmax(-1).tolist()
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            runner.decode(tok, pos, slots).argmax(-1).tolist()
        torch.cuda.synchronize()
    per_cat, per_kernel = defaultdict(float), defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per_cat[category(e.name)] += e.device_time / steps
            per_kernel[e.name] += e.device_time / steps
    return per_cat, per_kernel


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--buffer-len", type=int, default=16)
    p.add_argument("--configs", default="Super-7M1A")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    lines = [f"Decode step GPU time by kernel category, µs per step ({torch.cuda.get_device_name()}, batch "
             f"{args.batch}, L={args.buffer_len}, fp32 state, bf16, CUDA graph per step + greedy argmax; "
             "`benchmarks/step_breakdown.py`):", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs.split(","):
            cfg = configs(False)[name]
            result, tops = {}, {}
            for mode in ("conventional", "replay"):
                net = load_network(_write(cfg, Path(tmp) / name), device="cuda", mode=mode, dtype=torch.bfloat16,
                                   replay=ReplayConfig(args.buffer_len, "fp32"))
                runner = ModelRunner(net, args.batch, PROMPT + 64)
                fill(runner, args.batch)
                result[mode], kernels = profile(runner, args.batch, args.steps)
                tops[mode] = sorted(kernels.items(), key=lambda kv: -kv[1])[:8]
                del runner, net
                torch.cuda.empty_cache()
            cats = sorted(set(result["conventional"]) | set(result["replay"]),
                          key=lambda c: -result["conventional"].get(c, 0))
            lines += [f"**{name}**", "", "| category | conventional | replay |", "|---|---:|---:|"]
            for c in cats:
                lines.append(f"| {c} | {result['conventional'].get(c, 0):.0f} | {result['replay'].get(c, 0):.0f} |")
            lines.append(f"| total | {sum(result['conventional'].values()):.0f} | {sum(result['replay'].values()):.0f} |")
            lines += ["", "Largest kernels (replay), µs per step:", ""]
            lines += [f"- {v:.0f}  {k[:110]}" for k, v in tops["replay"]]
            lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
