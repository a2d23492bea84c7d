"""The engine: a loop that keeps stepping while requests come and go (in-flight batching).

    engine = Engine.create("nemotron_h_tiny", max_batch=8, max_seq_len=512)   # or Engine(net, ...)
    engine.start()                                   # the loop runs on its own thread
    req = engine.submit([1, 2, 3], SamplingParams(max_tokens=20), on_event=callback)
    engine.cancel(req)                               # its slot is free at the next step boundary
    engine.generate([[1, 2, 3], [4, 5]], SamplingParams(max_tokens=8))  # offline: blocks, returns the tokens
    engine.stop()

Each step: the scheduler admits waiting requests into free slots (prefilled in this step, decoding from the
next) and lists the running ones; the runner executes and samples; finished requests (max_tokens, an end token,
a stop token or string, max_seq_len) release their slots at once, and every changed request's `on_event` is
called with the new tokens. All model work happens on the loop's thread.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from trtllm_replayssm.config import ReplayConfig

from .request import Request, RequestError, SamplingParams, Status
from .runner import ModelRunner
from .scheduler import Scheduler


@dataclass
class Metrics:
    tokens_total: int = 0
    requests_finished: int = 0
    requests_cancelled: int = 0
    steps: int = 0
    last_step_s: float = 0.0
    step_s_total: float = 0.0
    _recent: deque = field(default_factory=lambda: deque(maxlen=256))  # (time, tokens) of recent steps

    def record(self, tokens: int, step_s: float) -> None:
        self.tokens_total += tokens
        self.steps += 1
        self.last_step_s = step_s
        self.step_s_total += step_s
        self._recent.append((time.monotonic(), tokens))

    def tokens_per_s(self, window: float = 10.0) -> float:
        now = time.monotonic()
        recent = [(t, n) for t, n in self._recent if now - t <= window]
        if len(recent) < 2:
            return 0.0
        return sum(n for _, n in recent[1:]) / max(recent[-1][0] - recent[0][0], 1e-9)


class Engine:
    def __init__(self, net, *, max_batch: int = 8, max_seq_len: int = 2048, max_queue: int = 256,
                 tokenizer=None, cuda_graphs: bool | None = None, runner=None):
        self.net, self.tokenizer = net, tokenizer
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        self.runner = runner or ModelRunner(net, max_batch, max_seq_len, cuda_graphs)
        self.scheduler = Scheduler(max_batch, max_queue)
        self.metrics = Metrics()
        self._lock = threading.Condition()
        self._cancels: list = []
        self._thread: threading.Thread | None = None
        self._running = False
        self.error: BaseException | None = None

    @classmethod
    def create(cls, model=None, *, device="cpu", mode="replay", replay: ReplayConfig | None = None, dtype=None,
               seed: int = 0, pool_budget: int | None = None, max_batch: int = 8, max_seq_len: int = 2048,
               **kw) -> "Engine":
        """An engine over load_network(model, ...). pool_budget: bytes of per-request state (SSM pools, conv
        state, KV cache) the slots may take; it caps max_batch at what fits."""
        from trtllm_replayssm.network import load_network

        net = load_network(model, device=device, mode=mode, replay=replay, dtype=dtype, seed=seed)
        if pool_budget is not None:
            max_batch = min(max_batch, slots_in_budget(net, pool_budget, max_seq_len))
        return cls(net, tokenizer=load_tokenizer(net.model_dir), max_batch=max_batch, max_seq_len=max_seq_len, **kw)

    @classmethod
    def from_build(cls, build_dir, *, executor: str = "tensorrt", max_queue: int = 256, tokenizer=None) -> "Engine":
        """An engine over the engines (executor "tensorrt") or ONNX graphs ("onnx") of a `build` output folder
        (runtime/built.py); slots and max_seq_len are the build's."""
        from .built import BuiltModel, BuiltRunner

        model = BuiltModel(build_dir)
        return cls(model, tokenizer=tokenizer, max_batch=model.num_slots, max_seq_len=model.max_seq_len,
                   max_queue=max_queue, runner=BuiltRunner(model, executor))

    # ---- requests ----
    def check(self, prompt, params: SamplingParams) -> None:
        """Refuses (RequestError) what the model cannot serve, before it is queued."""
        if not isinstance(prompt, list) or not prompt:
            raise RequestError("the prompt is empty", "prompt")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise RequestError("prompt token ids must be integers", "prompt")
        bad = [t for t in prompt if not 0 <= t < self.net.vocab_size]
        if bad:
            raise RequestError(f"token id {bad[0]} is outside the vocabulary (0..{self.net.vocab_size - 1})", "prompt")
        if len(prompt) >= self.max_seq_len:
            raise RequestError(f"the prompt has {len(prompt)} tokens; max_seq_len={self.max_seq_len} leaves no room "
                               "to generate", "prompt")
        params.validate(self.max_seq_len - len(prompt))
        if params.stop and self.tokenizer is None:
            raise RequestError("stop strings need a tokenizer and this model has none (use stop token ids)", "stop")

    def submit(self, prompt: list, params: SamplingParams | None = None, on_event=None) -> Request:
        params = params or SamplingParams()
        self.check(prompt, params)
        req = Request(list(prompt), params, on_event)
        with self._lock:
            self.scheduler.submit(req)  # BusyError when the queue is full
            self._lock.notify()
        return req

    def cancel(self, req: Request) -> None:
        """Cancels a request (e.g. its client went away); the loop frees its slot at the next step boundary."""
        with self._lock:
            self._cancels.append(req)
            self._lock.notify()

    # ---- the loop ----
    def start(self) -> "Engine":
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="replayssm-engine", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._running = False
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    while self._running and not self._cancels and self.scheduler.active == 0 \
                            and not self.scheduler.queued:
                        self._lock.wait()
                    if not self._running:
                        return
                    cancelled = self._take_cancels()
                    plan = self.scheduler.schedule()
                for req in cancelled:
                    _notify(req, [])
                if not plan.empty:
                    self.step(plan)
        except BaseException as e:  # a failed step: every request ends, the error is kept for /health
            self.error = e
            with self._lock:
                for req in list(self.scheduler.running.values()) + list(self.scheduler.waiting):
                    self.scheduler.cancel(req)
                    req.finish_reason = "error"
                    _notify(req, [])
            raise

    def _take_cancels(self) -> list:
        """Cancels what clients asked to cancel (under the lock); returns the requests it ended."""
        cancels, self._cancels = self._cancels, []
        done = []
        for req in cancels:
            slot = req.slot
            if self.scheduler.cancel(req):
                if slot is not None:
                    self.runner.release([slot])
                self.metrics.requests_cancelled += 1
                done.append(req)
        return done

    def step(self, plan) -> None:
        """One engine step over the scheduler's plan (the loop calls it; tests may too)."""
        sampled = self.runner.step(plan.prefill, plan.decode)
        now = time.monotonic()
        finished = []
        for req, tok in sampled.items():
            req.tokens.append(tok)
            if req.first_token_time is None:
                req.first_token_time = now
            reason = self._finish_reason(req, tok)
            if reason:
                finished.append((req, reason, tok))
            else:
                _notify(req, [tok])
        with self._lock:
            for req, reason, _ in finished:
                slot = req.slot
                self.scheduler.finish(req, reason)
                self.runner.release([slot])
                self.metrics.requests_finished += 1
        for req, _, tok in finished:
            _notify(req, [tok])
        self.metrics.record(len(sampled), self.runner.last_step_s)

    def _finish_reason(self, req: Request, tok: int) -> str | None:
        p = req.params
        if tok in p.stop_token_ids or (not p.ignore_eos and tok in self.net.eos_token_ids):
            return "stop"
        if self.tokenizer is not None:
            req.text = self.tokenizer.decode(req.tokens, skip_special_tokens=True)
            hits = [req.text.find(s) for s in p.stop if s in req.text]
            if hits:
                req.text = req.text[:min(hits)]  # the output ends before the stop string (OpenAI's convention)
                return "stop"
        if len(req.tokens) >= p.max_tokens or len(req.prompt) + len(req.tokens) >= self.max_seq_len:
            return "length"
        return None

    # ---- offline use ----
    def generate(self, prompts: list, params: SamplingParams | None = None, timeout: float = 600.0) -> list:
        """Submits every prompt, waits for all; returns each request's generated tokens (the loop must run)."""
        if self._thread is None:
            self.start()
        done = threading.Event()
        reqs = []
        left = [len(prompts)]

        def on_event(req, tokens, finished=None):
            if req.done:
                with self._lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()

        for p in prompts:
            reqs.append(self.submit(p, params, on_event))
        if not done.wait(timeout):
            raise TimeoutError(f"generate: {left[0]} of {len(prompts)} requests unfinished after {timeout} s")
        return [r.tokens for r in reqs]

    @property
    def free_slots(self) -> int:
        return len(self.scheduler.free)


def _notify(req: Request, tokens: list) -> None:
    """Calls the request's listener; a listener that fails (a front end's bug, a closed connection) is reported
    and dropped, and never stops the loop that serves every other request."""
    if req.on_event is None:
        return
    try:
        req.on_event(req, tokens)
    except Exception as e:  # noqa: BLE001: any listener error is the listener's, not the engine's
        print(f"replayssm engine: request {req.id}: listener failed ({type(e).__name__}: {e}); its events are "
              "dropped", file=sys.stderr)
        req.on_event = None


def slots_in_budget(net, pool_budget: int, max_seq_len: int) -> int:
    """Request slots whose state (measured on a real one-slot allocation) fits in pool_budget bytes."""
    per_slot = net.new_state(1, max_seq_len).bytes_per_slot
    if pool_budget < per_slot:
        raise ValueError(f"pool budget of {pool_budget} bytes holds no request: one slot of {net.name} at "
                         f"max_seq_len={max_seq_len} takes {per_slot} bytes")
    return pool_budget // per_slot


def load_tokenizer(model_dir):
    """The model directory's tokenizer (local files only), or None when it has none."""
    if model_dir is None or not any((model_dir / f).exists() for f in ("tokenizer.json", "tokenizer_config.json",
                                                                        "tokenizer.model")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


__all__ = ["Engine", "Metrics", "Status", "load_tokenizer", "slots_in_budget"]
