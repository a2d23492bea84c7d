"""Decode throughput through Triton (`trtllm-replayssm triton`: tritonserver, the Python-backend model repository)
against `trtllm-replayssm serve` on the same engine settings, and a load / unload leak check of the Triton model.

    python benchmarks/triton_vs_serve.py OUT                        # GPU: Super-7M1A, bf16, 64 concurrent streams
    python benchmarks/triton_vs_serve.py OUT --device cpu --config tiny --requests 4 --output-len 8   # any machine

Throughput: R concurrent streaming requests (fixed prompt and output lengths, greedy, end token ignored), sent by
C client processes (`trtllm_replayssm.serve.bench`, so that one Python client does not cap the servers), one
warm-up round, then output tokens per second of wall time over the measured rounds; every request must return
exactly its output length. Both servers run the same engine settings (R slots, CUDA graphs per batch bucket on a
GPU). `serve` runs as its own process when FastAPI and uvicorn are importable, else (or with --serve engine) the
same requests go to the runtime engine driven in this process; the table says which.

Leak check: the Triton server runs with --model-control-mode explicit. Each cycle (the first is the throughput
run's) loads the model (the first at start), runs a round of requests and unloads it; recorded: the model's
replayssm_free_slots metric after each load and after its requests, the GPU memory in use (nvidia-smi) with the
model loaded and after each unload, and the Python-backend stub processes still alive after each unload. Memory
after every unload must equal the first unload's within --tolerance-mib (the server keeps its own CUDA context).

Configs: benchmarks/serve_decode.py's (Super-7M1A: Nemotron-3-Super's layer shapes, 7 Mamba-2 layers + 1
attention layer, seeded random weights; tiny: the bundled tiny config). The table is printed last and written to
OUT/triton_vs_serve.md (raw figures: OUT/triton_vs_serve.json; server logs: OUT/triton.log, OUT/serve.log).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from serve_decode import configs  # noqa: E402

NAME = "replayssm"
STUB = "triton_python_b"  # the Python-backend stub's process name, as /proc/PID/comm truncates it


# ---- processes, ports, probes ----

def free_ports(n: int) -> list:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start(cmd: list, log_path: Path, ready_url: str, timeout_s: float) -> subprocess.Popen:
    """Starts `cmd` in its own process group (its output appended to log_path) and waits until ready_url answers
    200; raises with the log's tail if the process exits or the time runs out."""
    log = open(log_path, "a")
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    if not wait_until(lambda: _status(ready_url) == 200, timeout_s, proc):
        status = "still starting" if proc.poll() is None else f"exit status {proc.returncode}"
        msg = f"{cmd[3]} did not get ready in {timeout_s:.0f} s ({status}; {log_path.name}: {_last_line(log_path)})"
        stop(proc)
        raise RuntimeError(msg)
    return proc


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C to the process group (the command and its server), then SIGKILL after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_until(cond, timeout_s: float, proc: subprocess.Popen | None = None, every_s: float = 0.25) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(every_s)
    return cond()


def _status(url: str) -> int | None:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return None


def _last_line(path: Path) -> str:
    lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()] if path.exists() else []
    return lines[-1][:300] if lines else "(empty)"


def nvidia_smi(field: str) -> str | None:
    """One field of the first GPU from nvidia-smi (this process itself never touches CUDA, so that the memory
    readings hold only the servers'); None without a GPU."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else None


def gpu_mib() -> int | None:
    """GPU memory in use (MiB), all processes."""
    used = nvidia_smi("memory.used")
    return None if used is None else int(used)


def settled_gpu_mib(timeout_s: float = 20.0) -> int | None:
    """GPU memory once two readings half a second apart agree (a process's memory is returned shortly after it
    exits)."""
    last = gpu_mib()
    end = time.monotonic() + timeout_s
    while last is not None and time.monotonic() < end:
        time.sleep(0.5)
        now = gpu_mib()
        if now == last:
            break
        last = now
    return last


def descendants(pid: int) -> list:
    """(pid, name) of every live descendant of `pid`, from /proc."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            comm_end = stat.rindex(")")
            parent[int(d.name)] = (int(stat[comm_end + 2:].split()[1]), stat[stat.index("(") + 1:comm_end])
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [(c, name) for c, (pp, name) in parent.items() if pp == p]
        found += kids
        todo += [c for c, _ in kids]
    return found


def free_slots(metrics_url: str) -> float | None:
    """The Triton model's replayssm_free_slots gauge; None while the model is not loaded (the gauge goes with it)."""
    text = httpx.get(metrics_url, timeout=5).text
    for line in text.splitlines():
        if line.startswith(f'replayssm_free_slots{{model="{NAME}"}}'):
            return float(line.split()[-1])
    return None


# ---- load ----

def _client(url, api, model, n, prompt_len, output_len, seed, vocab) -> dict:
    """One client process: n concurrent streamed requests."""
    from trtllm_replayssm.serve.bench import run

    t0 = time.time()
    res = asyncio.run(run(url, n, n, prompt_len, output_len, model, seed=seed, quiet=True, vocab=vocab, api=api))
    return {"t0": t0, "t1": time.time(), "ok": res.ok, "failed": res.failed, "tokens": res.tokens,
            "ttft": res.ttft, "itl": res.itl, "errors": res.errors[:3]}


def http_round(pool, url: str, api: str, args, seed: int) -> dict:
    """One round of args.requests streamed requests split over the client processes of `pool`."""
    shares = [args.requests // args.clients + (i < args.requests % args.clients) for i in range(args.clients)]
    futs = [pool.submit(_client, url, api, NAME if api == "triton" else None, n, args.prompt_len, args.output_len,
                        seed * 1000 + i, args.vocab) for i, n in enumerate(shares) if n]
    parts = [f.result() for f in futs]
    return _merge(parts, min(p["t0"] for p in parts), max(p["t1"] for p in parts))


def _merge(parts: list, t0: float, t1: float) -> dict:
    ttft = [x for p in parts for x in p["ttft"]]
    itl = [x for p in parts for x in p["itl"]]
    return {"wall_s": t1 - t0, "ok": sum(p["ok"] for p in parts), "failed": sum(p["failed"] for p in parts),
            "tokens": sum(p["tokens"] for p in parts), "ttft": ttft, "itl": itl,
            "errors": [e for p in parts for e in p["errors"]][:3]}


def engine_round(engine, args, seed: int) -> dict:
    """One round of args.requests requests submitted at once to an in-process engine."""
    from trtllm_replayssm.runtime import SamplingParams

    rng = random.Random(seed)
    done, lock = threading.Event(), threading.Lock()
    state = {"left": args.requests, "tokens": 0, "ok": 0}
    ttft, itl = [], []

    def listener(t_submit):
        last = [None]

        def on_event(req, tokens):
            now = time.perf_counter()
            with lock:
                if tokens:
                    (ttft.append(now - t_submit) if last[0] is None else itl.append((now - last[0]) / len(tokens)))
                    last[0] = now
                if req.done:
                    state["tokens"] += len(req.tokens)
                    state["ok"] += req.finish_reason not in ("cancelled", "error")
                    state["left"] -= 1
                    if state["left"] == 0:
                        done.set()
        return on_event

    params = SamplingParams(max_tokens=args.output_len, ignore_eos=True)
    t0 = time.perf_counter()
    for _ in range(args.requests):
        prompt = [rng.randrange(1, args.vocab) for _ in range(args.prompt_len)]
        engine.submit(prompt, params, listener(time.perf_counter()))
    done.wait(600)
    return {"wall_s": time.perf_counter() - t0, "ok": state["ok"], "failed": args.requests - state["ok"],
            "tokens": state["tokens"], "ttft": ttft, "itl": itl, "errors": []}


def measure(round_fn, args) -> dict:
    """A warm-up round, then args.rounds measured rounds: tokens/s over their summed wall time."""
    round_fn(0)
    rounds = [round_fn(r + 1) for r in range(args.rounds)]
    want = args.requests * args.output_len
    short = [r for r in rounds if r["failed"] or r["tokens"] != want]
    if short:
        raise RuntimeError(f"a round returned {short[0]['tokens']} tokens of {want} ({short[0]['failed']} requests "
                           f"failed; {short[0]['errors'][:1]})")
    wall = sum(r["wall_s"] for r in rounds)
    ms = {k: round(statistics.median(x for r in rounds for x in r[k]) * 1e3, 2) if any(r[k] for r in rounds)
          else None for k in ("ttft", "itl")}
    return {"tokens_per_s": round(sum(r["tokens"] for r in rounds) / wall, 1),
            "rounds_tokens_per_s": [round(r["tokens"] / r["wall_s"], 1) for r in rounds],
            "ttft_ms_p50": ms["ttft"], "itl_ms_p50": ms["itl"], "requests_ok": sum(r["ok"] for r in rounds)}


# ---- the two servers ----

def runtime_options(args, model_dir: Path) -> list:
    return [str(model_dir), "--device", args.device, "--dtype", args.dtype, "--max-batch", str(args.requests),
            "--max-seq-len", str(args.prompt_len + args.output_len + 8), "--seed", "0"]


def cli(*argv) -> list:
    return [sys.executable, "-m", "trtllm_replayssm.cli", *argv]


def run_serve(args, model_dir: Path, pool) -> dict:
    """`serve` over HTTP (or the engine in process when FastAPI / uvicorn are missing or --serve engine)."""
    http = args.serve == "http" or (args.serve == "auto" and all(
        importlib.util.find_spec(m) for m in ("fastapi", "uvicorn")))
    if not http:
        return {"route": "runtime engine in process (no HTTP)", **_serve_engine(args, model_dir)}
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    proc = start(cli("serve", *runtime_options(args, model_dir), "--port", str(port)), args.out / "serve.log",
                 f"{url}/health", args.ready_timeout)
    try:
        return {"route": "serve: HTTP /v1/completions, streamed",
                **measure(lambda r: http_round(pool, url, "openai", args, r), args)}
    finally:
        stop(proc)


def _serve_engine(args, model_dir: Path) -> dict:
    import torch

    from trtllm_replayssm.runtime import Engine

    engine = Engine.create(str(model_dir), device=args.device, dtype=args.dtype, seed=0, max_batch=args.requests,
                           max_seq_len=args.prompt_len + args.output_len + 8)
    engine.runner.capture_all()
    engine.start()
    try:
        return measure(lambda r: engine_round(engine, args, r), args)
    finally:
        engine.stop()
        del engine
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run_triton(args, model_dir: Path, pool, res: dict, save) -> None:
    """Throughput through `trtllm-replayssm triton --model-control-mode explicit` (res["triton"]), then the load /
    unload cycles (res["cycles"]); save() after each step, so that a run cut short still leaves its figures."""
    http, grpc, metrics = free_ports(3)
    url, metrics_url = f"http://127.0.0.1:{http}", f"http://127.0.0.1:{metrics}/metrics"
    model_url = f"{url}/v2/models/{NAME}"
    proc = start(cli("triton", *runtime_options(args, model_dir), "--name", NAME, "--model-control-mode", "explicit",
                     "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)),
                 args.out / "triton.log", f"{model_url}/ready", args.ready_timeout)
    try:
        for cycle in range(args.cycles):
            row = {"cycle": cycle + 1}
            if cycle:
                _repository(url, "load", cycle, args)
            row["free_slots_after_load"] = free_slots(metrics_url)
            if cycle == 0:
                res["triton"] = {"route": "triton: HTTP generate_stream, streamed (Python backend)",
                                 **measure(lambda r: http_round(pool, url, "triton", args, r), args)}
                row["requests_ok"] = res["triton"]["requests_ok"]
                save()
            else:
                row["requests_ok"] = http_round(pool, url, "triton", args, 100 + cycle)["ok"]
            wait_until(lambda: free_slots(metrics_url) == args.requests, 30)
            row["free_slots_after_run"] = free_slots(metrics_url)
            row["gpu_mib_loaded"] = gpu_mib()
            row["stubs_loaded"] = len(_stubs(proc.pid))
            _repository(url, "unload", cycle, args)
            wait_until(lambda: _status(f"{model_url}/ready") != 200, 60)
            wait_until(lambda: not _stubs(proc.pid), 120)
            row["stubs_after_unload"] = len(_stubs(proc.pid))
            row["free_slots_after_unload"] = free_slots(metrics_url)
            row["gpu_mib_after_unload"] = settled_gpu_mib()
            res["cycles"].append(row)
            save()
            print(f"cycle {cycle + 1}: {row}", file=sys.stderr, flush=True)
    finally:
        stop(proc)


def _repository(url: str, action: str, cycle: int, args) -> None:
    r = httpx.post(f"{url}/v2/repository/models/{NAME}/{action}", timeout=args.ready_timeout)
    if r.status_code != 200:
        raise RuntimeError(f"{action} {cycle + 1} failed: HTTP {r.status_code} {r.text[:200]}")


def _stubs(pid: int) -> list:
    return [p for p, name in descendants(pid) if name.startswith(STUB)]


# ---- report ----

def leak_verdict(cycles: list, args) -> str:
    if not cycles:
        return "not run"
    slots = all(c["free_slots_after_load"] == args.requests and c["free_slots_after_run"] == args.requests
                and c["free_slots_after_unload"] is None for c in cycles)
    stubs = all(c["stubs_loaded"] > 0 and c["stubs_after_unload"] == 0 for c in cycles)
    mem = [c["gpu_mib_after_unload"] for c in cycles]
    if None in mem:
        memory = "GPU memory not measured (no nvidia-smi)"
        ok = slots and stubs
    else:
        drift = max(abs(m - mem[0]) for m in mem)
        memory = (f"GPU memory after every unload within {drift} MiB of the first unload's {mem[0]} MiB "
                  f"(tolerance {args.tolerance_mib} MiB)")
        ok = slots and stubs and drift <= args.tolerance_mib
    return (f"{'no leak' if ok else 'LEAK'}: {memory}; free slots {'always' if slots else 'NOT always'} "
            f"{args.requests} after load and after the requests, gone after unload; Python-backend stub processes: "
            f"{'one per load, none after unload' if stubs else 'NOT one per load and none after unload'}")


def _n(x) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def table(res: dict, args) -> str:
    out = [f"Triton vs serve, {args.config} ({res['device']}, {args.dtype}): {args.requests} concurrent streamed "
           f"requests from {args.clients} client processes, prompt {args.prompt_len} / output {args.output_len} "
           f"tokens, greedy, end token ignored; {args.rounds} measured rounds after one warm-up; the same engine "
           f"settings in both (max batch {args.requests}, ReplaySSM L=16). Produced by "
           f"`python benchmarks/triton_vs_serve.py` (`bash benchmarks/device_triton.sh OUT` on the GPU machine).",
           "", "| server | route | tokens/s | per round | TTFT p50 ms | ITL p50 ms |", "|---|---|---|---|---|---|"]
    for key in ("serve", "triton"):
        r = res.get(key)
        if r is None:
            out.append(f"| {key} | {'failed: ' + res['errors'][key] if key in res['errors'] else 'not run yet'} "
                       "| | | | |")
            continue
        out.append(f"| {key} | {r['route']} | {r['tokens_per_s']:.0f} | "
                   f"{' / '.join(f'{x:.0f}' for x in r['rounds_tokens_per_s'])} | {r['ttft_ms_p50']} | "
                   f"{r['itl_ms_p50']} |")
    if "ratio" in res:
        out += ["", f"Triton / serve: {res['ratio']:.3f} (goal: within 10 %, i.e. >= 0.90)"]
    out += ["", f"Load / unload cycles (tritonserver --model-control-mode explicit; GPU memory from nvidia-smi, "
            f"{_n(res['gpu_mib_before'])} MiB before the server started):", "",
            "| cycle | free slots after load | requests ok | free slots after them | GPU MiB loaded | "
            "GPU MiB after unload | free-slot gauge after unload | stub processes loaded / after unload |",
            "|---|---|---|---|---|---|---|---|"]
    for c in res.get("cycles", []):
        gauge = "gone" if c["free_slots_after_unload"] is None else _n(c["free_slots_after_unload"])
        out.append(f"| {c['cycle']} | {_n(c['free_slots_after_load'])} | {_n(c.get('requests_ok'))} | "
                   f"{_n(c['free_slots_after_run'])} | {_n(c['gpu_mib_loaded'])} | {_n(c['gpu_mib_after_unload'])} | "
                   f"{gauge} | {c['stubs_loaded']} / {c['stubs_after_unload']} |")
    out += ["", f"Leak check: {res['leak']}"]
    return "\n".join(out)


def run(args) -> dict:
    cfg = (configs(False) | configs(True))[args.config]
    args.vocab = min(args.vocab, cfg["vocab_size"])
    res = {"device": nvidia_smi("name") if args.device == "cuda" else "CPU",
           "gpu_mib_before": gpu_mib(), "config": cfg, "cycles": [], "errors": {}}
    with tempfile.TemporaryDirectory(prefix="triton_vs_serve_") as tmp:
        model_dir = Path(tmp) / args.config
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(cfg))
        with ProcessPoolExecutor(args.clients, mp_context=multiprocessing.get_context("fork")) as pool:
            try:
                run_triton(args, model_dir, pool, res, lambda: report(res, args))
            except Exception as e:  # the table records what failed; serve still runs
                res["errors"]["triton"] = f"{type(e).__name__}: {e}"
            try:
                res["serve"] = run_serve(args, model_dir, pool)
            except Exception as e:
                res["errors"]["serve"] = f"{type(e).__name__}: {e}"
    return res


def report(res: dict, args) -> str:
    """Derived figures (ratio, leak verdict) into `res`; the table and the raw figures into args.out."""
    if "triton" in res and "serve" in res:
        res["ratio"] = res["triton"]["tokens_per_s"] / res["serve"]["tokens_per_s"]
    res["leak"] = leak_verdict(res["cycles"], args)
    if len(res["cycles"]) < args.cycles:
        res["leak"] = (f"incomplete ({len(res['cycles'])} of {args.cycles} cycles"
                       f"{': ' + res['errors']['triton'] if 'triton' in res['errors'] else ''}); {res['leak']}")
    text = table(res, args)
    (args.out / "triton_vs_serve.json").write_text(json.dumps(res, indent=1, default=str) + "\n")
    (args.out / "triton_vs_serve.md").write_text(text + "\n")
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="output folder (the table, raw figures, server logs)")
    p.add_argument("--config", default="Super-7M1A", choices=sorted(configs(False) | configs(True)),
                   help="model config (benchmarks/serve_decode.py's; default %(default)s)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--dtype", default=None, choices=("bf16", "fp16", "fp32"),
                   help="weights and activations (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--requests", type=int, default=64, help="concurrent requests = engine slots (default 64)")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3, help="measured rounds after one warm-up (default 3)")
    p.add_argument("--clients", type=int, default=4, help="client processes sending the requests (default 4)")
    p.add_argument("--cycles", type=int, default=3, help="Triton load / unload cycles (default 3)")
    p.add_argument("--vocab", type=int, default=1000, help="prompt token ids are drawn from 1..VOCAB-1")
    p.add_argument("--serve", choices=("auto", "http", "engine"), default="auto",
                   help="serve over HTTP, or the runtime engine in process (auto: HTTP when FastAPI is there)")
    p.add_argument("--tolerance-mib", type=int, default=64, help="GPU memory drift allowed across unloads")
    p.add_argument("--ready-timeout", type=float, default=240.0, help="seconds a server may take to get ready")
    args = p.parse_args(argv)
    for name in ("requests", "prompt_len", "output_len", "rounds", "clients", "cycles"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.device == "cuda" and gpu_mib() is None:
        p.error("--device cuda needs a GPU (nvidia-smi found none); use --device cpu")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.clients = min(args.clients, args.requests)
    args.out.mkdir(parents=True, exist_ok=True)
    res = run(args)
    print(report(res, args))
    ok = "ratio" in res and res["leak"].startswith("no leak")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
