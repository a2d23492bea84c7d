"""`trtllm-replayssm serve [MODEL]`: an OpenAI-compatible server (FastAPI + uvicorn, the `[serve]` extra) over
the in-flight-batching runtime. Defaults work on the bundled config (token-id prompts: it has no tokenizer)."""

from __future__ import annotations

import sys
from pathlib import Path

from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.config import READ_FORMATS, ReplayConfig
from trtllm_replayssm.network import MODES
from trtllm_replayssm.runtime.built import EXECUTORS


def add_runtime(p) -> None:
    """The runtime's options, shared by `serve` and the Triton commands."""
    p.add_argument("model", nargs="?", type=cli.model_ref, default=None, metavar="MODEL",
                   help="bundled config name, model directory (config.json + safetensors, tokenizer when present) "
                        "or config.json (default: the bundled default)")
    cli.add_device(p)
    p.add_argument("--mode", choices=MODES, default="replay", help="SSM decode: replay or conventional (A/B)")
    cli.add_buffer_len(p)
    p.add_argument("--state-dtype", default="fp32", choices=cli.STATE_DTYPES, help="checkpoint dtype")
    p.add_argument("--read-format", default="none", choices=READ_FORMATS, help="low-precision read copy")
    p.add_argument("--dtype", default=None, choices=cli.ACT_DTYPES,
                   help="weights and activations (default: fp32 on CPU, the config's dtype on CUDA)")
    p.add_argument("--max-batch", type=cli.int_range(1, cli.MAX_BATCH), default=8,
                   help="request slots (concurrent requests; default %(default)s)")
    p.add_argument("--max-seq-len", type=cli.int_range(2, 1 << 20), default=1024,
                   help="tokens per request, prompt included (default %(default)s)")
    p.add_argument("--pool-gib", type=cli.float_range(0.0, 1 << 20, lo_open=True), default=None,
                   help="GiB of per-request state (SSM pools, conv state, KV cache) the slots may take: caps "
                        "--max-batch at what fits (default: no cap)")
    p.add_argument("--max-queue", type=cli.int_range(0, 1 << 20), default=256,
                   help="requests waiting for a slot before new ones get a busy error (default %(default)s)")
    cli.add_seed(p)
    p.add_argument("--engine", type=cli.non_empty, default=None, metavar="DIR",
                   help="serve a `build` output folder instead of MODEL (its slots and max_seq_len; the model "
                        "options above do not apply)")
    p.add_argument("--executor", choices=EXECUTORS, default="tensorrt",
                   help="with --engine: tensorrt (the engines, on a GPU TensorRT supports) or onnx (its ONNX "
                        "graphs through onnx.reference on the CPU: slow, for checking); default %(default)s")


def check_runtime_args(args) -> None:
    """The runtime options' checks that need no work (before extras are looked for)."""
    if args.engine is not None:
        if args.model is not None:
            raise cli.UsageError("give MODEL or --engine DIR, not both")
        if not (Path(args.engine) / "config.json").is_file():
            raise cli.UsageError(f"--engine {args.engine}: no config.json (a folder written by "
                                 "`trtllm-replayssm build`)")


def engine_from_args(args):
    """An Engine from the runtime options; project validation errors become one-line usage errors."""
    from trtllm_replayssm.runtime import Engine

    check_runtime_args(args)
    if args.engine is not None:
        try:
            with cli.usage_errors():
                return Engine.from_build(args.engine, executor=args.executor, max_queue=args.max_queue)
        except ImportError as e:
            raise cli.UsageError(f"--executor {args.executor} needs {e.name}, which is not installed") from None
    with cli.usage_errors():
        device = cli.resolve_device(args.device, kernels=True)
        replay = ReplayConfig(args.buffer_len, args.state_dtype, read_format=args.read_format)
        engine = Engine.create(args.model, device=device, mode=args.mode, replay=replay, dtype=args.dtype,
                               seed=args.seed, max_batch=args.max_batch, max_seq_len=args.max_seq_len,
                               max_queue=args.max_queue,
                               pool_budget=None if args.pool_gib is None else int(args.pool_gib * 2**30))
    return engine


def register(sub):
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    add_runtime(p)
    p.add_argument("--host", type=cli.host, default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=cli.int_range(1, 65535), default=8000, help="port (default %(default)s)")
    p.add_argument("--served-model-name", type=cli.non_empty, default=None, help="the model name clients send (default: MODEL's name)")
    p.set_defaults(func=main)


def main(args) -> int:
    check_runtime_args(args)
    try:
        import uvicorn

        from trtllm_replayssm.serve.openai_server import create_app
    except ImportError as e:
        raise cli.UsageError(f"serve needs the serving extra ({e.name} is missing): pip install '.[serve]'") from None
    engine = engine_from_args(args)
    name = args.served_model_name or engine.net.name
    engine.runner.capture_all()
    engine.start()
    print(f"serving {name} ({engine.net.mode}, {engine.max_batch} slots, {engine.runner.device}) on "
          f"http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(create_app(engine, name), host=args.host, port=args.port, log_level="warning")
    return 0
