"""`trtllm-replayssm inspect DIR|ENGINE`: what a build holds (trtllm_replayssm/builder/inspect.py)."""

from __future__ import annotations

import json

from trtllm_replayssm.builder.inspect import H200_BYTES, format_summary, summary
from trtllm_replayssm.cli import args as cli


def register(sub):
    p = sub.add_parser("inspect", help="layers, state, engine I/O and concurrency of a `build` output")
    p.add_argument("path", type=cli.non_empty, metavar="DIR|ENGINE", help="a build folder or one of its engines")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--gpu-gb", type=cli.float_range(0.0, 1e6, lo_open=True), default=H200_BYTES / 1e9,
                   help="GPU memory the concurrency figures assume, in GB (default %(default)g: an H200)")
    p.set_defaults(func=main)


def main(args) -> int:
    with cli.usage_errors():
        report = summary(args.path, args.gpu_gb * 1e9)
    print(json.dumps(report, indent=2) if args.json else format_summary(report))
    return 0
