"""`bench-serve`: a load generator for a running server, OpenAI-compatible (`/v1/completions`) or Triton
(`/v2/models/<model>/generate_stream`, Triton's LLM conventions). N requests of given prompt and output lengths,
at most C in flight, each streamed and told to ignore the end token; reports throughput, time to first token
(TTFT) and inter-token latency (ITL) percentiles."""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field

import httpx
from tqdm import tqdm


@dataclass
class Result:
    ok: int = 0
    failed: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    ttft: list = field(default_factory=list)
    itl: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def summary(self) -> dict:
        def pct(xs, q):
            return statistics.quantiles(xs, n=100)[q - 1] * 1e3 if len(xs) >= 2 else (xs[0] * 1e3 if xs else 0.0)

        return {"requests_ok": self.ok, "requests_failed": self.failed, "output_tokens": self.tokens,
                "wall_s": round(self.wall_s, 3), "output_tokens_per_s": round(self.tokens / max(self.wall_s, 1e-9), 1),
                "ttft_ms_p50": round(pct(self.ttft, 50), 2), "ttft_ms_p99": round(pct(self.ttft, 99), 2),
                "itl_ms_p50": round(pct(self.itl, 50), 2), "itl_ms_p99": round(pct(self.itl, 99), 2)}


APIS = ("openai", "triton")


def _request(api: str, model: str, prompt: list, max_tokens: int) -> tuple:
    """(path, JSON body) of one streamed request that ignores the end token."""
    if api == "openai":
        return "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                                   "ignore_eos": True}
    return f"/v2/models/{model}/generate_stream", {"input_ids": prompt, "max_tokens": max_tokens, "stream": True,
                                                  "ignore_eos": True}


def _event_tokens(api: str, event: dict) -> int:
    """Tokens carried by one server-sent event; a Triton error event raises."""
    if api == "openai":
        return len(event["choices"][0].get("token_ids", []))
    if "error" in event:
        raise ValueError(event["error"])
    ids = event.get("output_ids", [])
    return len(ids) if isinstance(ids, list) else 1  # Triton writes a one-element output as a scalar


async def _one(client: httpx.AsyncClient, url: str, model: str, prompt: list, max_tokens: int, res: Result,
               api: str = "openai"):
    path, body = _request(api, model, prompt, max_tokens)
    t0 = time.perf_counter()
    last, n = None, 0
    try:
        async with client.stream("POST", url + path, json=body) as r:
            if r.status_code != 200:
                res.failed += 1
                res.errors.append(f"HTTP {r.status_code}: {(await r.aread()).decode()[:200]}")
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                got = _event_tokens(api, json.loads(line[6:]))
                if not got:
                    continue
                now = time.perf_counter()
                if last is None:
                    res.ttft.append(now - t0)
                else:
                    res.itl.append((now - last) / got)
                last, n = now, n + got
        res.ok += 1
        res.tokens += n
    except (httpx.HTTPError, ValueError) as e:
        res.failed += 1
        res.errors.append(f"{type(e).__name__}: {e}")


async def _first_model(client: httpx.AsyncClient, url: str, api: str) -> str:
    if api == "openai":
        return (await client.get(f"{url}/v1/models")).json()["data"][0]["id"]
    ready = [m["name"] for m in (await client.post(f"{url}/v2/repository/index")).json() if m.get("state") == "READY"]
    if not ready:
        raise ValueError(f"no model is ready on {url}")
    return ready[0]


async def run(url: str, num_requests: int, concurrency: int, prompt_len: int, output_len: int,
              model: str | None = None, seed: int = 0, quiet: bool = False, vocab: int = 100,
              api: str = "openai") -> Result:
    """api: "openai" (`serve`) or "triton" (a Triton model with this project's inputs)."""
    if api not in APIS:
        raise ValueError(f"api={api!r} is not supported (supported: {', '.join(APIS)})")
    rng = random.Random(seed)
    res = Result()
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        if model is None:
            model = await _first_model(client, url, api)
        sem = asyncio.Semaphore(concurrency)
        bar = tqdm(total=num_requests, desc="requests", disable=True if quiet else None, leave=False)

        async def task():
            async with sem:
                prompt = [rng.randrange(1, vocab) for _ in range(prompt_len)]
                await _one(client, url, model, prompt, output_len, res, api)
                bar.update(1)

        t0 = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(num_requests)))
        res.wall_s = time.perf_counter() - t0
        bar.close()
    return res
