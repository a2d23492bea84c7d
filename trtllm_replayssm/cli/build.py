"""`trtllm-replayssm build --model M --output DIR`: ONNX phase graphs, TensorRT engines and config.json
(trtllm_replayssm/builder/build.py); `--dry-run` prints the layer plan and stops."""

from __future__ import annotations

from trtllm_replayssm.builder.build import BuildSettings, build
from trtllm_replayssm.builder.dry_run import format_plan
from trtllm_replayssm.builder.engine import EngineBuildError
from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.config import READ_FORMATS, SPEC_MAX_WINDOW, SPEC_MIN_WINDOW, ReplayConfig
from trtllm_replayssm.network.model import MODES


def register(sub):
    p = sub.add_parser("build", help="compile a model into TensorRT engines with the ReplaySSM plugins")
    cli.add_model(p, flag="--model")
    p.add_argument("--output", type=cli.non_empty, default=None, metavar="DIR",
                   help="folder for the ONNX graphs, engines, plugin library, config.json and build.log")
    p.add_argument("--dry-run", action="store_true", help="print the layer plan and stop")
    cli.add_replay(p)
    p.add_argument("--read-format", default="none", choices=READ_FORMATS,
                   help="low-precision read copy (engines: none only; default %(default)s)")
    p.add_argument("--mode", choices=MODES, default="replay",
                   help="SSM plugins' mode: replay, or conventional (the A/B baseline); default %(default)s")
    p.add_argument("--max-batch", type=cli.int_range(1, cli.MAX_BATCH), default=8,
                   help="request slots and the largest batch (default %(default)s)")
    p.add_argument("--max-seq-len", type=cli.int_range(2, 1 << 20), default=1024,
                   help="tokens per request, prompt included (default %(default)s)")
    p.add_argument("--spec-tokens", type=cli.int_range(0, SPEC_MAX_WINDOW), default=0,
                   help=f"speculative verify window T ({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW}; 0: plain decode, "
                        "the default): verify and commit engines instead of decode")
    p.add_argument("--target", type=cli.comma_list(cli.int_range(50, 130)), default=None, metavar="SM[,SM]",
                   help="SM targets, e.g. 89 or 86,89 (default: the local GPU, else 89)")
    p.add_argument("--onnx-only", action="store_true", help="write the ONNX graphs and config.json, no engines")
    cli.add_quiet(p)
    p.set_defaults(func=main)


def main(args) -> int:
    if args.dry_run:
        model = cli.load_model(args.model)
        with cli.usage_errors():
            cfg = ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype)
            cfg.validate()
        print(format_plan(model, cfg))
        return 0
    if args.output is None:
        raise cli.UsageError("--output DIR is required (or --dry-run to print the plan)")
    if args.spec_tokens == 1:
        raise cli.UsageError(f"--spec-tokens 1 is out of range ({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW}, or 0)")
    cli.load_model(args.model)  # refuses an unreadable or unsupported config in one line
    settings = BuildSettings(args.buffer_len, args.state_dtype, args.act_dtype, args.read_format, args.mode,
                             args.max_batch, args.max_seq_len, args.spec_tokens, args.target, args.onnx_only)
    try:
        with cli.usage_errors():
            build(args.model, args.output, settings, log=print)
    except EngineBuildError as e:
        raise cli.Failure(f"engine build failed: {e}") from e
    return 0
