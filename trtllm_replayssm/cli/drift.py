"""`trtllm-replayssm drift`: output error against fp32 conventional decoding over many steps, per precision."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.config import MAMBA2_DSTATES, MAMBA2_HEAD_DIMS, Mamba2LayerShape
from trtllm_replayssm.drift import CONFIGS, format_table, plot, summarize, timed_run
from trtllm_replayssm.pool import read_copy_specs

MAX_HEADS = 1024  # the reference runs on the host: a few Nemotron-3-Super layers' worth of heads at most


def register(sub):
    p = sub.add_parser("drift", help="output drift over long generations per state-precision configuration")
    p.add_argument("--steps", type=cli.int_range(1, cli.MAX_STEPS), default=1024,
                   help="decode steps (default %(default)s)")
    p.add_argument("--checkpoints", type=cli.comma_list(cli.int_range(1, cli.MAX_STEPS)),
                   default=[1024, 4096, 16384, 65536, 131072],
                   help="comma-separated step counts to report; those beyond --steps are left out "
                        "(default 1024,4096,16384,65536,131072)")
    p.add_argument("--heads", type=cli.int_range(1, MAX_HEADS), default=8, help="Mamba-2 heads (default %(default)s)")
    p.add_argument("--head-dim", type=int, choices=MAMBA2_HEAD_DIMS, default=64, help="head_dim (default %(default)s)")
    p.add_argument("--dstate", type=int, choices=MAMBA2_DSTATES, default=64, help="d_state (default %(default)s)")
    p.add_argument("--groups", type=cli.int_range(1, MAX_HEADS), default=2,
                   help="groups sharing B and C; must divide --heads (default %(default)s)")
    p.add_argument("--batch", type=cli.int_range(1, cli.MAX_BATCH), default=2, help="requests (default %(default)s)")
    cli.add_buffer_len(p)
    p.add_argument("--configs", type=cli.comma_list(str, choices=tuple(CONFIGS)), default=list(CONFIGS),
                   help="comma-separated subset of: " + ", ".join(CONFIGS) + " (default: all)")
    cli.add_seed(p)
    p.add_argument("--png", default=None, help="write a plot here (needs matplotlib)")
    cli.add_quiet(p)
    p.set_defaults(func=main)


def main(args) -> int:
    with cli.usage_errors():
        if args.heads % args.groups:
            raise cli.UsageError(f"--groups {args.groups} does not divide --heads {args.heads}")
        shape = Mamba2LayerShape(args.heads, args.head_dim, args.dstate, args.groups)
        shape.validate()
        for name in args.configs:  # the formats' layout conditions (quantisation blocks), as run_drift meets them
            read_copy_specs((args.heads, args.head_dim, args.dstate), CONFIGS[name][1])
        # fp32 states of the reference and of each configuration, twice over for rings, copies and temporaries
        state_bytes = args.batch * args.heads * args.head_dim * args.dstate * 4
        cli.check_memory(2 * (len(args.configs) + 1) * state_bytes, torch.device("cpu"),
                         f"{len(args.configs)} configurations' states of a batch of {args.batch}")
        if args.png:
            _check_png(Path(args.png))
    checkpoints = sorted({c for c in args.checkpoints if c <= args.steps}) or [args.steps]
    errors, secs = timed_run(args.steps, shape, batch=args.batch, buffer_len=args.buffer_len, seed=args.seed,
                             configs=tuple(args.configs),
                             progress=lambda steps: cli.progress(steps, args, desc="drift", unit="step"))
    print(f"{shape}, batch {args.batch}, L={args.buffer_len}, {args.steps} steps in {secs:.0f} s "
          f"(mean relative output error vs fp32 conventional over the last tenth of the steps up to each count)")
    print(format_table(summarize(errors, checkpoints), checkpoints))
    if args.png:
        plot(errors, args.png)
        print(f"plot: {args.png}")
    return 0


def _check_png(path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise cli.UsageError("--png needs matplotlib, which is not installed (pip install matplotlib)")
    if not path.parent.is_dir():
        raise cli.UsageError(f"--png {path}: the folder {path.parent} does not exist")
    if path.is_dir():
        raise cli.UsageError(f"--png {path} is a folder")
