"""`trtllm-replayssm bench-serve`: concurrent streaming requests against a running server (`serve`, or `triton`
with `--api triton`); prints throughput, time to first token and inter-token latency percentiles (`--json` for
tools)."""

from __future__ import annotations

import asyncio
import json

from trtllm_replayssm.cli import args as cli


def register(sub):
    p = sub.add_parser("bench-serve", help="load a running server (OpenAI-compatible or Triton) and report latencies")
    p.add_argument("--url", type=cli.http_url, default="http://127.0.0.1:8000", help="server base URL (default %(default)s)")
    p.add_argument("--api", choices=("openai", "triton"), default="openai",
                   help="openai: /v1/completions (serve); triton: /v2/models/MODEL/generate_stream "
                        "(default %(default)s)")
    p.add_argument("--model", type=cli.non_empty, default=None,
                   help="model name (default: the server's first ready one)")
    p.add_argument("--num-requests", type=cli.int_range(1, 1_000_000), default=64, help="requests in all")
    p.add_argument("--concurrency", type=cli.int_range(1, 100_000), default=16, help="requests in flight at most")
    p.add_argument("--prompt-len", type=cli.int_range(1, 1 << 20), default=32, help="prompt tokens per request")
    p.add_argument("--output-len", type=cli.int_range(1, 1 << 20), default=32, help="generated tokens per request")
    p.add_argument("--vocab", type=cli.int_range(2, 1 << 24), default=100,
                   help="prompt token ids are drawn from 1..VOCAB-1 (default %(default)s)")
    cli.add_seed(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    cli.add_quiet(p)
    p.set_defaults(func=main)


def main(args) -> int:
    import httpx

    from trtllm_replayssm.serve.bench import run

    try:
        res = asyncio.run(run(args.url.rstrip("/"), args.num_requests, args.concurrency, args.prompt_len,
                              args.output_len, args.model, args.seed, args.quiet, args.vocab, args.api))
    except (httpx.HTTPError, ValueError) as e:
        raise cli.UsageError(f"cannot reach {args.url}: {e}") from None
    s = res.summary()
    if args.json:
        print(json.dumps(s))
    else:
        for k, v in s.items():
            print(f"{k:>22}  {v}")
        for e in res.errors[:5]:
            print(f"error: {e}")
    if res.failed:
        raise cli.Failure(f"{res.failed} of {args.num_requests} requests failed (first: {res.errors[0]})")
    return 0
