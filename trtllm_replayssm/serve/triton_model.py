"""The Triton Python-backend model: decoupled (streaming), with in-flight batching inside.

Every Triton request becomes a runtime request on one Engine, whose loop thread batches all of them; tokens go back
through each request's response sender as the engine produces them (as they come when `stream` is true, once at the
end otherwise). Responses are sent by a thread of their own: a send is a round trip to the server, and the engine's
loop must not wait for 64 of them each step. The sender takes everything queued since its last pass and sends one
response per request with all of that request's new tokens (in order), so when the server is slower than the
engine, responses carry a few tokens each instead of falling behind. A cancelled request (client gone, stream
cancelled) is found by the sender, which asks the server at most every CANCEL_CHECK_S per request (asking is a
round trip too), and is cancelled in the engine at its next step, which frees its slot. Inputs and outputs follow
Triton's LLM backends (docs/triton.md): `input_ids` or `text_input`, `max_tokens`, `stream`, `temperature`,
`top_p`, `top_k`, `random_seed`, `end_id`, `ignore_eos`, `stop_words` -> `output_ids`, `text_output`. The model's
settings come from config.pbtxt's parameters (triton_repo.py).

Imported by the model repository's model.py inside Triton's Python backend stub (triton_python_backend_utils is
only importable there).
"""

from __future__ import annotations

import json
import queue
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

from trtllm_replayssm.config import ReplayConfig
from trtllm_replayssm.runtime import BusyError, Engine, RequestError, SamplingParams


def _scalar(request, name, default, kind):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    a = t.as_numpy().reshape(-1)
    if a.size != 1:
        raise RequestError(f"{name} must hold one value, got {a.size}", name)
    return kind(a[0])


CANCEL_CHECK_S = 0.05  # seconds between two cancellation queries of one running request


class _Stream:
    """One request's responses, as the sender thread builds them: the tokens produced since the last response
    (kept until a send of them succeeds), whether the request is done, whether it was found cancelled, and when
    the server was last asked."""

    def __init__(self, model, sender, request, stream: bool):
        self.model, self.sender, self.request, self.stream = model, sender, request, stream
        self.req, self.tokens, self.done, self.cancelled, self.checked = None, [], False, False, 0.0

    def take(self, tokens, done):
        self.tokens += tokens
        self.done = self.done or done

    def flush(self):
        engine, final = self.model.engine, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        req = self.req
        if self.done:
            tokens, self.tokens = self.tokens, []
            self.model.free_slots.set(engine.free_slots)
            if req.finish_reason == "cancelled":
                self.sender.send(flags=final)
            elif req.finish_reason == "error":
                self.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"the engine stopped: {engine.error}")), flags=final)
            else:
                self.sender.send(self.model._response(tokens if self.stream else req.tokens), flags=final)
            return
        if self.cancelled:  # the engine ends it at its next step; nothing more goes to the client before that
            return
        now = time.monotonic()
        if now - self.checked >= CANCEL_CHECK_S:
            self.checked = now
            if self.sender.is_cancelled() or self.request.is_cancelled():
                self.cancelled = True
                engine.cancel(req)
                return
        if self.stream and self.tokens:
            self.sender.send(self.model._response(self.tokens))
            self.tokens = []


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        replay = ReplayConfig(int(params.get("buffer_len", 16)), params.get("state_dtype", "fp32"),
                              read_format=params.get("read_format", "none"))
        if params.get("engine"):  # a `build` output folder (runtime/built.py)
            self.engine = Engine.from_build(params["engine"], executor=params.get("executor", "tensorrt"),
                                            max_queue=int(params.get("max_queue", 256)))
        else:
            self.engine = self._create(params, replay)
        self.engine.runner.capture_all()
        self._outbox = queue.SimpleQueue()  # sends, in order, for the sender thread
        self._sender = threading.Thread(target=self._send_loop, name="replayssm-triton-sender", daemon=True)
        self._sender.start()
        self.engine.start()
        # Free request slots as a custom metric on Triton's metrics endpoint (replayssm_free_slots).
        self.metric_family = pb_utils.MetricFamily(name="replayssm_free_slots", description="free request slots",
                                                   kind=pb_utils.MetricFamily.GAUGE)  # outlives its metric
        self.free_slots = self.metric_family.Metric(labels={"model": args["model_name"]})
        self.free_slots.set(self.engine.free_slots)

    @staticmethod
    def _create(params, replay):
        return Engine.create(params.get("model") or None, device=params.get("device", "cpu"),
                             mode=params.get("mode", "replay"), replay=replay, dtype=params.get("dtype") or None,
                             seed=int(params.get("seed", 0)), max_batch=int(params.get("max_batch", 8)),
                             max_seq_len=int(params.get("max_seq_len", 1024)),
                             max_queue=int(params.get("max_queue", 256)),
                             pool_budget=int(float(params["pool_gib"]) * 2**30) if params.get("pool_gib") else None)

    def _prompt(self, request):
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
        if ids is not None:
            return [int(v) for v in ids.as_numpy().reshape(-1)]
        text = pb_utils.get_input_tensor_by_name(request, "text_input")
        if text is None:
            raise RequestError("one of input_ids or text_input is required", "input_ids")
        if self.engine.tokenizer is None:
            raise RequestError("this model has no tokenizer: send input_ids", "text_input")
        value = text.as_numpy().reshape(-1)[0]
        return self.engine.tokenizer.encode(value.decode() if isinstance(value, bytes) else str(value))

    def _params(self, request) -> SamplingParams:
        stop = pb_utils.get_input_tensor_by_name(request, "stop_words")
        stop = tuple(s.decode() if isinstance(s, bytes) else str(s) for s in stop.as_numpy().reshape(-1)) \
            if stop is not None else ()
        end_id = _scalar(request, "end_id", None, int)
        seed = _scalar(request, "random_seed", None, int)
        return SamplingParams(max_tokens=_scalar(request, "max_tokens", 16, int),
                              temperature=_scalar(request, "temperature", 0.0, float),
                              top_p=_scalar(request, "top_p", 1.0, float), top_k=_scalar(request, "top_k", 0, int),
                              seed=seed, stop=stop, stop_token_ids=() if end_id is None else (end_id,),
                              ignore_eos=_scalar(request, "ignore_eos", False, bool))

    def _response(self, tokens):
        text = self.engine.tokenizer.decode(tokens, skip_special_tokens=True) if self.engine.tokenizer else ""
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("output_ids", np.asarray(tokens, dtype=np.int32)),
            pb_utils.Tensor("text_output", np.asarray([text.encode()], dtype=np.object_))])

    def execute(self, requests):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        for request in requests:
            sender = request.get_response_sender()
            try:
                stream = _scalar(request, "stream", False, bool)
                self.engine.submit(self._prompt(request), self._params(request),
                                   self._listener(sender, request, stream))
            except (RequestError, BusyError, ValueError) as e:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))), flags=final)
        return None

    def _send_loop(self):
        """Sends, pass after pass, everything queued since the last pass: one response per request (module
        docstring). Stops at the None that finalize queues."""
        while True:
            items = [self._outbox.get()]
            while True:
                try:
                    items.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            stop = None in items
            pending = {}  # insertion-ordered: requests in the order their first new event came
            for item in items:
                if item is not None:
                    stream, tokens, done = item
                    stream.take(tokens, done)
                    pending[id(stream)] = stream
            for stream in pending.values():
                try:
                    stream.flush()
                except Exception as e:  # a client gone mid-send: the request's own cancellation frees its slot
                    pb_utils.Logger.log_warn(f"replayssm: a response could not be sent: {e}")
            if stop:
                return

    def _listener(self, sender, request, stream):
        """The engine's callback for one request: it only queues the request's new tokens (module docstring)."""
        out = _Stream(self, sender, request, stream)

        def on_event(req, tokens):
            out.req = req
            self._outbox.put((out, list(tokens), req.done))

        return on_event

    def finalize(self):
        try:
            self.engine.stop()
        finally:
            self._outbox.put(None)
            self._sender.join(timeout=30)
        # Deleted here, while the stub still talks to the server: otherwise Triton keeps reporting the last value
        # after the model is unloaded.
        del self.free_slots, self.metric_family
