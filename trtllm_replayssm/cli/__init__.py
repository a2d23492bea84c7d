"""`trtllm-replayssm` command line: subcommands as small modules over shared argument groups (cli/args.py).

Bad input gets one line, `trtllm-replayssm <cmd>: error: <message>`, and exit status 2, before any work starts;
a run that finds a wrong result says so in one line and exits 1; a closed output pipe (`| head`) ends the
command quietly."""

from __future__ import annotations

import os
import sys

from trtllm_replayssm.cli import bench_serve, build, drift, info, inspect, plan, run, serve, triton
from trtllm_replayssm.cli.args import Failure, Parser, UsageError, one_line

PROG = "trtllm-replayssm"
COMMANDS = (run, plan, build, inspect, drift, info, serve, bench_serve, triton)


def build_parser() -> Parser:
    parser = Parser(prog=PROG, description=__doc__)
    sub = parser.add_subparsers(dest="command")
    for module in COMMANDS:
        module.register(sub)
    parser.commands = sub.choices  # name -> the subcommand's parser, which reports its errors
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command is None:
            parser.error(f"a command is required: one of {', '.join(parser.commands)}")
        command = parser.commands[args.command]
        if extra:
            command.error(f"unrecognized arguments: {' '.join(extra)}")
        try:
            code = int(args.func(args) or 0)
        except UsageError as e:
            command.error(str(e))
        except Failure as e:
            print(f"{command.prog}: {one_line(e)}", file=sys.stderr)
            code = 1
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        _discard_stdout()
        return 141  # as a command stopped by SIGPIPE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _discard_stdout() -> None:
    """Points stdout at /dev/null so that Python's own flush at exit does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (captured in-process)
        pass


if __name__ == "__main__":
    sys.exit(main())
