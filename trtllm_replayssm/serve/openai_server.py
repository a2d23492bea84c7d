"""An OpenAI-compatible HTTP server over the runtime's Engine (FastAPI + uvicorn): it only translates HTTP into
requests and streams tokens back.

Endpoints: POST /v1/completions (prompt: text, a list of token ids, or a list of either: one choice each;
`stream` as server-sent events), POST /v1/chat/completions (when the tokenizer has a chat template), GET
/v1/models, GET /health, GET /metrics (Prometheus text). Errors are OpenAI-style JSON
`{"error": {"message", "type", "param", "code"}}` with a 4xx status (429 when the queue is full). Models without
a tokenizer (the bundled configs) take token-id prompts; every choice carries its `token_ids` beside `text`.
A client that disconnects cancels its requests, which frees their slots at the next step boundary.

Tokens travel from the engine's thread to the event loop through one _Feed per request, which wakes the loop once
for all the events queued since the loop last looked; a streamed response sends one chunk per look with all of
the request's new tokens. When the loop keeps up a chunk holds one token; when 64 streams make it fall behind a
step, chunks hold a few tokens each and the loop's work per token shrinks instead of the engine waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from trtllm_replayssm.runtime import BusyError, Engine, RequestError, SamplingParams

_SAMPLING_FIELDS = {"max_tokens": int, "temperature": float, "top_p": float, "top_k": int, "seed": int}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = status, message, param, kind, code

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def _sampling(body: dict, engine: Engine) -> SamplingParams:
    kw = {}
    for name, kind in _SAMPLING_FIELDS.items():
        v = body.get(name)
        if v is None:
            continue
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, kind) or isinstance(v, bool):
            raise ApiError(400, f"{name} must be {'an integer' if kind is int else 'a number'}, got {v!r}", name)
        kw[name] = v
    if body.get("n", 1) != 1:
        raise ApiError(400, f"n={body.get('n')!r} is not supported (only n=1)", "n")
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "stop must be a string or a list of strings", "stop")
    ids = body.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise ApiError(400, "stop_token_ids must be a list of integers", "stop_token_ids")
    return SamplingParams(stop=tuple(stop), stop_token_ids=tuple(ids), ignore_eos=bool(body.get("ignore_eos")),
                          **kw)


def _prompts(body: dict, engine: Engine) -> list:
    """The request's prompts as token-id lists (a text prompt needs the tokenizer)."""
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "prompt is required", "prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        items = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = prompt
    else:
        raise ApiError(400, "the prompt is empty", "prompt")
    out = []
    for p in items:
        if isinstance(p, str):
            if engine.tokenizer is None:
                raise ApiError(400, "this model has no tokenizer: send the prompt as a list of token ids", "prompt")
            p = engine.tokenizer.encode(p)
        if not isinstance(p, list) or not p:
            raise ApiError(400, "the prompt is empty", "prompt")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
            raise ApiError(400, "a token-id prompt must hold integers only", "prompt")
        out.append(p)
    return out


def create_app(engine: Engine, model_name: str) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        engine.stop()

    app = FastAPI(title="trtllm-replayssm", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(ApiError)
    async def _api_error(_, e: ApiError):
        return e.response()

    async def body_of(http: HttpRequest) -> dict:
        try:
            body = json.loads(await http.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not valid JSON ({e})") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        name = body.get("model")
        if name is not None and name != model_name:
            raise ApiError(404, f"model {name!r} does not exist (this server serves {model_name!r})", "model",
                           code="model_not_found")
        return body

    @app.get("/health")
    def health():
        if engine.error is not None:
            return JSONResponse({"status": "error", "error": str(engine.error)}, status_code=500)
        return {"status": "ok"}

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "trtllm-replayssm", "max_model_len": engine.max_seq_len}]}

    @app.get("/metrics")
    def metrics():
        return PlainTextResponse(prometheus_text(engine), media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions")
    async def completions(http: HttpRequest):
        body = await body_of(http)
        return await _serve(engine, model_name, _prompts(body, engine), _sampling(body, engine), body,
                            http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(http: HttpRequest):
        body = await body_of(http)
        tok = engine.tokenizer
        if tok is None or not getattr(tok, "chat_template", None):
            raise ApiError(400, "this model has no chat template: use /v1/completions", "messages")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "messages must be a non-empty list", "messages")
        try:
            text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as e:  # the template's own complaint about the messages
            raise ApiError(400, f"messages do not fit the chat template: {e}", "messages") from None
        prompt = tok.encode(text, add_special_tokens=False)  # the template wrote the special tokens it wants
        return await _serve(engine, model_name, [prompt], _sampling(body, engine), body, http, chat=True)

    return app


async def _serve(engine: Engine, model_name: str, prompts: list, params: SamplingParams, body: dict,
                 http: HttpRequest, chat: bool):
    loop = asyncio.get_running_loop()
    feeds = [_Feed(loop) for _ in prompts]
    reqs = []

    def listener(feed):  # runs on the engine's thread: snapshot the request's state with the event
        return lambda req, tokens: feed.push((list(tokens), req.done, req.text))

    try:
        for p, feed in zip(prompts, feeds):
            reqs.append(engine.submit(p, params, listener(feed)))
    except RequestError as e:
        for r in reqs:
            engine.cancel(r)
        raise ApiError(400, str(e), e.param) from None
    except BusyError as e:
        for r in reqs:
            engine.cancel(r)
        raise ApiError(429, str(e), kind="server_busy", code="busy") from None
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    created = int(time.time())
    if body.get("stream"):
        return StreamingResponse(_stream(engine, reqs, feeds, rid, created, model_name, chat, http),
                                 media_type="text/event-stream")
    try:
        for feed, req in zip(feeds, reqs):
            while not req.done:
                await feed.take(http)
    except (asyncio.CancelledError, ClientGone):
        for r in reqs:
            engine.cancel(r)
        raise
    choices = [_choice(i, r.tokens, r.text, r.finish_reason, chat, final=True) for i, r in enumerate(reqs)]
    n_prompt = sum(len(p) for p in prompts)
    n_out = sum(len(r.tokens) for r in reqs)
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model_name, "choices": choices,
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}}


class ClientGone(Exception):
    pass


class _Feed:
    """One request's events, pushed by the engine's thread and taken by the event loop: the loop is woken once
    per batch of events (one call_soon_threadsafe), not once per event."""

    def __init__(self, loop):
        self.loop, self.items, self.lock, self.ready, self.woken = loop, [], threading.Lock(), asyncio.Event(), False

    def push(self, item) -> None:
        """Engine thread: queue one event (tokens, done, text)."""
        with self.lock:
            self.items.append(item)
            if self.woken:
                return
            self.woken = True
        self.loop.call_soon_threadsafe(self.ready.set)

    async def take(self, http: HttpRequest) -> list:
        """Event loop: every event queued since the last take (at least one); notices a client that went away
        while waiting. `ready` is set and cleared on the loop's thread only, so no wake-up is lost."""
        while True:
            with self.lock:
                items, self.items = self.items, []
                self.woken = False
            if items:
                return items
            self.ready.clear()
            try:
                await asyncio.wait_for(self.ready.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                if await http.is_disconnected():
                    raise ClientGone() from None


def _settled(text: str, done: bool, stop: tuple) -> str:
    """The part of a request's text that later tokens cannot change: all of it once done; before that, without
    a trailing incomplete character and without the tail that may still become the start of a stop string
    (the engine cuts a matched stop string off)."""
    if done:
        return text
    text = text.rstrip("\ufffd")
    hold = max((len(s) for s in stop), default=1) - 1
    return text[:len(text) - hold] if hold else text


def _choice(index, tokens, text, finish_reason, chat, final=False):
    out = {"index": index, "finish_reason": finish_reason, "token_ids": list(tokens)}
    if chat:
        out["message" if final else "delta"] = {"role": "assistant", "content": text}
    else:
        out.update(text=text, logprobs=None)
    return out


async def _stream(engine, reqs, feeds, rid, created, model_name, chat, http):
    obj = "chat.completion.chunk" if chat else "text_completion"
    try:
        for i, (req, feed) in enumerate(zip(reqs, feeds)):
            sent = sent_text = 0
            done = False
            while not done:
                events = await feed.take(http)
                n = sum(len(tokens) for tokens, _, _ in events)
                _, done, text = events[-1]
                delta = req.tokens[sent:sent + n]
                sent += len(delta)
                text = _settled(text, done, req.params.stop)
                delta_text, sent_text = text[sent_text:], max(sent_text, len(text))
                chunk = {"id": rid, "object": obj, "created": created, "model": model_name,
                         "choices": [_choice(i, delta, delta_text, req.finish_reason if done else None, chat)]}
                yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"
    except (asyncio.CancelledError, ClientGone, GeneratorExit):
        for r in reqs:
            engine.cancel(r)
        raise


def prometheus_text(engine: Engine) -> str:
    m, s = engine.metrics, engine.scheduler
    rows = [
        ("replayssm_tokens_total", "counter", "tokens generated", m.tokens_total),
        ("replayssm_requests_finished_total", "counter", "requests finished", m.requests_finished),
        ("replayssm_requests_cancelled_total", "counter", "requests cancelled", m.requests_cancelled),
        ("replayssm_steps_total", "counter", "engine steps", m.steps),
        ("replayssm_tokens_per_second", "gauge", "tokens per second over the last 10 s", m.tokens_per_s()),
        ("replayssm_step_seconds", "gauge", "duration of the last engine step", m.last_step_s),
        ("replayssm_active_slots", "gauge", "requests holding a slot", s.active),
        ("replayssm_free_slots", "gauge", "free request slots", len(s.free)),
        ("replayssm_slots", "gauge", "request slots", s.num_slots),
        ("replayssm_queue_length", "gauge", "requests waiting for a slot", s.queued),
        ("replayssm_pool_bytes", "gauge", "bytes of per-request state (all slots)",
         engine.runner.state.total_bytes),
        ("replayssm_pool_bytes_per_slot", "gauge", "bytes of per-request state per slot",
         engine.runner.state.bytes_per_slot),
    ]
    lines = []
    for name, kind, help_text, value in rows:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"
