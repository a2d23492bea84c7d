"""`trtllm-replayssm build --model DIR --dry-run`: the layer plan of the ReplaySSM rewrite.

Only the dry run exists so far: the rewrite itself is the builder's next step."""

from __future__ import annotations

from trtllm_replayssm.builder.dry_run import format_plan
from trtllm_replayssm.config import ReplayConfig
from trtllm_replayssm.model_config import analyze, bundled_configs, load_config


def register(sub):
    p = sub.add_parser("build", help="plan (--dry-run) the ReplaySSM rewrite of a model")
    p.add_argument("--model", default=None,
                   help=f"model directory, config.json or bundled name ({', '.join(bundled_configs())})")
    p.add_argument("--dry-run", action="store_true", help="print the layer plan and stop")
    p.add_argument("--buffer-len", type=int, default=16)
    p.add_argument("--state-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--act-dtype", default="bf16", choices=["fp32", "fp16", "bf16"])
    p.set_defaults(func=main)


def main(args) -> int:
    if not args.dry_run:
        raise SystemExit("build: only --dry-run is available so far: compiling an engine is not implemented yet "
                         "(the PyTorch rewrite of a loaded model is trtllm_replayssm.builder.rewrite; see examples/rewrite_decode.py)")
    model = analyze(load_config(args.model))
    print(format_plan(model, ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype)))
    return 0
