"""`trtllm-replayssm` command line: subcommands as small modules over shared argument groups."""

from __future__ import annotations

import argparse
import sys

from trtllm_replayssm.cli import build, drift, info, plan, run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="trtllm-replayssm", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (run, plan, build, drift, info):
        module.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
