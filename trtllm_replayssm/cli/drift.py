"""`trtllm-replayssm drift`: output error against fp32 conventional decoding over many steps, per precision."""

from __future__ import annotations

from trtllm_replayssm.config import Mamba2LayerShape
from trtllm_replayssm.drift import CONFIGS, format_table, plot, summarize, timed_run


def register(sub):
    p = sub.add_parser("drift", help="output drift over long generations per state-precision configuration")
    p.add_argument("--steps", type=int, default=1024)
    p.add_argument("--checkpoints", default="1024,4096,16384,65536,131072",
                   help="step counts to report (those beyond --steps are left out)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dstate", type=int, default=64)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--buffer-len", type=int, default=16)
    p.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of: " + ", ".join(CONFIGS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--png", default=None, help="write a plot here (needs matplotlib)")
    p.set_defaults(func=main)


def main(args) -> int:
    shape = Mamba2LayerShape(args.heads, args.head_dim, args.dstate, args.groups)
    checkpoints = [c for c in (int(v) for v in args.checkpoints.split(",")) if c <= args.steps] or [args.steps]
    errors, secs = timed_run(args.steps, shape, batch=args.batch, buffer_len=args.buffer_len, seed=args.seed,
                             configs=tuple(args.configs.split(",")))
    print(f"{shape}, batch {args.batch}, L={args.buffer_len}, {args.steps} steps in {secs:.0f} s "
          f"(mean relative output error vs fp32 conventional over the last tenth of the steps up to each count)")
    print(format_table(summarize(errors, checkpoints), checkpoints))
    if args.png:
        print(f"plot: {args.png}" if plot(errors, args.png) else "plot skipped: matplotlib is not installed")
    return 0
