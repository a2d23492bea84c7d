"""`trtllm-replayssm build --model DIR --dry-run`: the layer plan of the ReplaySSM rewrite.

Only the dry run exists so far: the rewrite itself is the builder's next step."""

from __future__ import annotations

from trtllm_replayssm.builder.dry_run import format_plan
from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.config import ReplayConfig


def register(sub):
    p = sub.add_parser("build", help="plan (--dry-run) the ReplaySSM rewrite of a model")
    cli.add_model(p, flag="--model")
    p.add_argument("--dry-run", action="store_true", help="print the layer plan and stop")
    cli.add_replay(p)
    p.set_defaults(func=main)


def main(args) -> int:
    if not args.dry_run:
        raise cli.UsageError("only --dry-run is available so far: compiling an engine is not implemented yet "
                             "(the PyTorch rewrite of a loaded model is trtllm_replayssm.builder.rewrite; see "
                             "examples/rewrite_decode.py)")
    model = cli.load_model(args.model)
    with cli.usage_errors():
        cfg = ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype)
        cfg.validate()
    print(format_plan(model, cfg))
    return 0
