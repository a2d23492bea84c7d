"""`bench-serve`: a load generator for a running OpenAI-compatible server. N requests of given prompt and
output lengths, at most C in flight, each streamed; reports throughput, time to first token (TTFT) and
inter-token latency (ITL) percentiles."""

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


async def _one(client: httpx.AsyncClient, url: str, model: str, prompt: list, max_tokens: int, res: Result):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    t0 = time.perf_counter()
    last, n = None, 0
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                res.failed += 1
                res.errors.append(f"HTTP {r.status_code}: {(await r.aread()).decode()[:200]}")
                return
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                got = len(json.loads(line[6:])["choices"][0].get("token_ids", []))
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
    except httpx.HTTPError as e:
        res.failed += 1
        res.errors.append(f"{type(e).__name__}: {e}")


async def run(url: str, num_requests: int, concurrency: int, prompt_len: int, output_len: int,
              model: str | None = None, seed: int = 0, quiet: bool = False, vocab: int = 100) -> Result:
    rng = random.Random(seed)
    res = Result()
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0)) as client:
        if model is None:
            model = (await client.get(f"{url}/v1/models")).json()["data"][0]["id"]
        sem = asyncio.Semaphore(concurrency)
        bar = tqdm(total=num_requests, desc="requests", disable=True if quiet else None, leave=False)

        async def task():
            async with sem:
                prompt = [rng.randrange(1, vocab) for _ in range(prompt_len)]
                await _one(client, url, model, prompt, output_len, res)
                bar.update(1)

        t0 = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(num_requests)))
        res.wall_s = time.perf_counter() - t0
        bar.close()
    return res
