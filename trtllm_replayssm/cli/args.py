"""What every `trtllm-replayssm` subcommand shares: argument types that refuse bad values while parsing, argument
groups with their defaults and help text, the errors `main()` reports in one line, and progress bars.

A subcommand is a module with `register(sub)`, which adds its parser to the subparsers action and sets `func`,
and `main(args) -> int`. Its options come from the groups and types here, so every command checks values the
same way and says so in the same words:

    from trtllm_replayssm.cli import args as cli

    def register(sub):
        p = sub.add_parser("bench", help="time decode steps")
        cli.add_model(p)                                    # --config: bundled name, model directory, config.json
        cli.add_replay(p)                                   # --buffer-len, --state-dtype, --act-dtype
        p.add_argument("--batch", type=cli.int_range(1, cli.MAX_BATCH), default=8, help="requests per step")
        cli.add_device(p)                                   # --device cpu | cuda | cuda:N (None: the default)
        cli.add_quiet(p)                                    # --quiet: no progress bar
        p.set_defaults(func=main)

    def main(args) -> int:
        with cli.usage_errors():                            # checks of several values together, before any work
            model = cli.load_model(args.config)
            device = cli.resolve_device(args.device, kernels=True)
            cfg = ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype)
            cfg.validate()
        for step in cli.progress(range(n), args, desc="decode"):
            ...
        if bad_result:
            raise cli.Failure("ReplaySSM output is not finite at layer 3, step 7")
        return 0

What the user sees (`trtllm_replayssm.cli.main` does the reporting):
- a value refused by a type here, or a UsageError (which `usage_errors()` makes of the ValueError, OSError or
  NotImplementedError the project's own checks raise): `trtllm-replayssm <cmd>: error: <message>`, exit 2;
- a Failure (the work ran and found a wrong result): `trtllm-replayssm <cmd>: <message>`, exit 1;
- never a traceback for bad input, a closed output pipe (`| head`) or Ctrl-C.
Progress bars go to stderr, only when it is a terminal, and never with --quiet.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from trtllm_replayssm import _lib
from trtllm_replayssm.config import (DEFAULT_BUFFER_LEN, MAMBA2_ACT_DTYPES, MAMBA2_STATE_DTYPES, MAX_BUFFER_LEN,
                                     MIN_BUFFER_LEN, dtype_name)
from trtllm_replayssm.model_config import DEFAULT_CONFIG, ModelPlan, analyze, bundled_configs, load_config

# Limits of the command line's own sizes: far beyond what a run on one GPU uses, small enough that a typo (an
# extra zero or three) is refused at once instead of allocating or looping for hours.
MAX_BATCH = 4096
MAX_STEPS = 1_000_000
MAX_CONTEXT = 1 << 24
MAX_SEED = 2**63 - 1
STATE_DTYPES = tuple(dtype_name(d) for d in MAMBA2_STATE_DTYPES)  # both families take the same three
ACT_DTYPES = tuple(dtype_name(d) for d in MAMBA2_ACT_DTYPES)


class UsageError(ValueError):
    """The arguments cannot work together (found after parsing, before any work): one line, exit 2."""


class Failure(RuntimeError):
    """The work ran and its result is wrong (e.g. a non-finite output): one line, exit 1."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, `<prog>: error: <message>`, and exit 2 (no usage block:
    `--help` prints it)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {one_line(message)}\n")


def one_line(message: str) -> str:
    return " ".join(str(message).split("\n"))


# ---- argument types: each returns the parsed value or raises ArgumentTypeError naming the value and the range


def int_range(lo: int, hi: int):
    """An argparse type: an integer in lo..hi."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer (expected {lo}..{hi})") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({lo}..{hi})")
        return value

    parse.__name__ = f"integer in {lo}..{hi}"
    return parse


def float_range(lo: float, hi: float, lo_open: bool = False):
    """An argparse type: a finite number in lo..hi (above lo when lo_open)."""
    span = f"{'more than ' if lo_open else ''}{lo:g} up to {hi:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number (expected {span})") from None
        if not math.isfinite(value) or value < lo or value > hi or (lo_open and value == lo):
            raise argparse.ArgumentTypeError(f"{text} is out of range ({span})")
        return value

    parse.__name__ = f"number in {span}"
    return parse


def comma_list(item, choices=None):
    """An argparse type: a comma-separated, non-empty list of `item` (a type such as int_range(...)) or of
    names out of `choices`."""

    def parse(text: str) -> list:
        parts = [p.strip() for p in text.split(",")]
        if not all(parts):
            raise argparse.ArgumentTypeError(f"{text!r} has an empty entry (expected a comma-separated list)")
        if choices is not None:
            unknown = [p for p in parts if p not in choices]
            if unknown:
                raise argparse.ArgumentTypeError(f"{unknown[0]!r} is not one of: {', '.join(choices)}")
            return parts
        return [item(p) for p in parts]

    parse.__name__ = "comma-separated list"
    return parse


def model_ref(text: str) -> str:
    """An argparse type: the name of a bundled config, a model directory holding config.json, or a config file."""
    if text in bundled_configs():
        return text
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty name (expected a bundled config, a model directory or a config.json)")
    path = Path(text)
    if path.is_dir() and not (path / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"model directory {text} has no config.json")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r} is neither a bundled config ({', '.join(bundled_configs())}) "
                                         f"nor an existing model directory or config.json")
    return text


def non_empty(text: str) -> str:
    """An argparse type: any non-blank string."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty value")
    return text


def host(text: str) -> str:
    """An argparse type: a host name or address this machine can resolve."""
    import socket

    try:
        socket.getaddrinfo(text, None)
    except (socket.gaierror, UnicodeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a resolvable host name or address") from None
    return text


def http_url(text: str) -> str:
    """An argparse type: an http(s) URL with a host."""
    from urllib.parse import urlparse

    u = urlparse(text)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
    return text.rstrip("/")


def device(text: str) -> torch.device:
    """An argparse type: cpu, cuda or cuda:N, refused when this machine has no such device."""
    try:
        dev = torch.device(text)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device here (expected cpu, cuda or cuda:N)")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"{text}: no CUDA device is usable on this machine (use --device cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s) "
                                             f"(cuda:0..cuda:{torch.cuda.device_count() - 1})")
    return dev


# ---- argument groups: one place for the shared options' names, defaults and help text


def add_model(p, flag: str = "--config") -> None:
    p.add_argument(flag, type=model_ref, default=None, metavar="MODEL",
                   help=f"bundled config name ({', '.join(bundled_configs())}), a model directory or its "
                        f"config.json (default: {DEFAULT_CONFIG})")


def add_buffer_len(p) -> None:
    p.add_argument("--buffer-len", type=int_range(MIN_BUFFER_LEN, MAX_BUFFER_LEN), default=DEFAULT_BUFFER_LEN,
                   help=f"ReplaySSM ring length L ({MIN_BUFFER_LEN}..{MAX_BUFFER_LEN}, default %(default)s)")


def add_replay(p, state_dtype: str = "fp32", act_dtype: str = "bf16") -> None:
    """--buffer-len, --state-dtype, --act-dtype: a ReplayConfig's settings (config.py)."""
    add_buffer_len(p)
    p.add_argument("--state-dtype", default=state_dtype, choices=STATE_DTYPES,
                   help="checkpoint (recurrence) dtype (default %(default)s)")
    p.add_argument("--act-dtype", default=act_dtype, choices=ACT_DTYPES,
                   help="activation dtype (default %(default)s)")


def add_device(p) -> None:
    p.add_argument("--device", type=device, default=None,
                   help="cpu, cuda or cuda:N (default: cuda when a CUDA device and the kernel library are present)")


def add_seed(p) -> None:
    p.add_argument("--seed", type=int_range(0, MAX_SEED), default=0, help="random seed (default %(default)s)")


def add_quiet(p) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bar (there is none when stderr is not a terminal)")


# ---- checks after parsing (inside usage_errors) and the work's helpers


@contextlib.contextmanager
def usage_errors():
    """Turns the project's own validation errors (ValueError, NotImplementedError, OSError) raised inside the
    block into a UsageError: wrap the checks and set-up that come before any work."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, NotImplementedError, OSError) as e:
        raise UsageError(str(e)) from e


def load_model(ref: str | None) -> ModelPlan:
    """The layer plan of a model reference (model_ref; None: the bundled default); errors as UsageError."""
    try:
        cfg = load_config(ref)
        if not isinstance(cfg, dict):
            raise ValueError(f"expected a JSON object, got a {type(cfg).__name__}")
        return analyze(cfg)
    except (ValueError, OSError) as e:
        raise UsageError(f"model config {ref or DEFAULT_CONFIG}: {e}") from e
    except (TypeError, KeyError, AttributeError) as e:  # a field of the wrong type in the user's file
        raise UsageError(f"model config {ref or DEFAULT_CONFIG} is malformed: {type(e).__name__}: {e}") from e


def resolve_device(dev: torch.device | None, kernels: bool = False) -> torch.device:
    """The device to run on: `dev` (from --device), or cuda when a CUDA device (and, with kernels=True, the
    kernel library) is present, else cpu. A CUDA device without the kernel library is refused when kernels=True."""
    has_lib = _lib.available() if kernels else True
    if dev is None:
        return torch.device("cuda" if torch.cuda.is_available() and has_lib else "cpu")
    if dev.type == "cuda" and not has_lib:
        raise UsageError(f"--device {dev} needs the kernel library, which is not built ({_lib.library_path()}); "
                         f"use --device cpu for the PyTorch reference")
    return dev


def available_bytes(dev: torch.device) -> int | None:
    """Free memory on `dev` (host: MemAvailable of /proc/meminfo), or None where it cannot be told."""
    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(nbytes: int, dev: torch.device, what: str) -> None:
    """Refuses (UsageError) a run whose buffers would not fit in the free memory of `dev`."""
    free = available_bytes(dev)
    if free is not None and nbytes > free:
        raise UsageError(f"{what} need {nbytes / 2**30:.1f} GiB on {dev}, {free / 2**30:.1f} GiB is free")


def progress(iterable=None, args=None, **kw) -> tqdm:
    """A tqdm progress bar on stderr: shown only on a terminal and never with --quiet."""
    quiet = bool(getattr(args, "quiet", False))
    return tqdm(iterable, file=sys.stderr, disable=True if quiet else None, leave=False, dynamic_ncols=True, **kw)
