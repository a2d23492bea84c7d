"""`trtllm-replayssm triton-repo --output REPO [MODEL]` writes a Triton model repository (Python backend,
decoupled, in-flight batching inside); `trtllm-replayssm triton [MODEL]` writes one to a temporary folder and runs
tritonserver on it (a system tritonserver, else the one of the `[triton]` extra), until Ctrl-C."""

from __future__ import annotations

import socket
import sys
import tempfile
from pathlib import Path

from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.cli.serve import add_runtime, check_runtime_args


def _settings(args) -> dict:
    check_runtime_args(args)
    dev = cli.resolve_device(args.device, kernels=True)
    return {"model": None if args.model is None else str(Path(args.model).resolve()) if Path(args.model).exists()
            else args.model, "device": str(dev), "mode": args.mode, "buffer_len": args.buffer_len,
            "state_dtype": args.state_dtype, "read_format": args.read_format, "dtype": args.dtype,
            "max_batch": args.max_batch, "max_seq_len": args.max_seq_len, "max_queue": args.max_queue,
            "pool_gib": args.pool_gib, "seed": args.seed,
            "engine": None if args.engine is None else str(Path(args.engine).resolve()), "executor": args.executor}


def _common(p) -> None:
    add_runtime(p)
    p.add_argument("--name", type=cli.non_empty, default="replayssm", help="the model's name in the repository")


def register(sub):
    p = sub.add_parser("triton-repo", help="write a Triton model repository (Python backend) for a model")
    _common(p)
    p.add_argument("--output", required=True, metavar="REPO", help="repository folder to write")
    p.set_defaults(func=main_repo)
    q = sub.add_parser("triton", help="run tritonserver on a model repository written for MODEL")
    _common(q)
    q.add_argument("--http-port", type=cli.int_range(1, 65535), default=8000, help="HTTP port (default %(default)s)")
    q.add_argument("--grpc-port", type=cli.int_range(1, 65535), default=8001, help="gRPC port (default %(default)s)")
    q.add_argument("--metrics-port", type=cli.int_range(1, 65535), default=8002, help="metrics port")
    q.add_argument("--model-control-mode", choices=("none", "explicit"), default="none",
                   help="explicit: the model is loaded at start and can be unloaded and loaded again through "
                        "Triton's repository API (default %(default)s)")
    q.set_defaults(func=main_server)


def main_repo(args) -> int:
    from trtllm_replayssm.serve.triton_repo import write_repository

    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise cli.UsageError(f"--output {out} exists and is not a folder")
    with cli.usage_errors():
        model = write_repository(out, args.name, _settings(args))
    print(f"wrote {model}/config.pbtxt and {model}/1/model.py")
    return 0


def main_server(args) -> int:
    from trtllm_replayssm.serve.triton_env import TritonUnavailable, find_server
    from trtllm_replayssm.serve.triton_repo import write_repository

    settings = _settings(args)
    ports = {args.http_port, args.grpc_port, args.metrics_port}
    if len(ports) < 3:
        raise cli.UsageError("--http-port, --grpc-port and --metrics-port must differ")
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise cli.UsageError(f"port {port} is already in use")
    try:
        server = find_server()
    except TritonUnavailable as e:
        raise cli.UsageError(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="replayssm-triton-") as repo:
        write_repository(Path(repo), args.name, settings)
        proc = server.start(Path(repo), args.http_port, args.grpc_port, args.metrics_port,
                            explicit=args.model_control_mode == "explicit", load=[args.name])
        print(f"tritonserver: HTTP http://127.0.0.1:{args.http_port} (generate: /v2/models/{args.name}/generate, "
              f"generate_stream), gRPC 127.0.0.1:{args.grpc_port}, metrics :{args.metrics_port}; Ctrl-C stops it",
              file=sys.stderr, flush=True)
        try:
            for line in proc.stdout:
                sys.stderr.write(line)
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(30)
            return 130
