"""A request's life: its prompt, sampling and stop settings, and the small state machine it moves through.

    WAITING --admit (slot acquired)--> RUNNING --finish / cancel (slot released)--> FINISHED | CANCELLED
    WAITING --cancel--> CANCELLED (never held a slot)

Each transition is checked, so a slot is acquired and released exactly once. Tensors never appear here.
"""

from __future__ import annotations

import enum
import itertools
import math
import time
from dataclasses import dataclass, field

_ids = itertools.count(1)


class RequestError(ValueError):
    """A request the runtime refuses (bad prompt or settings); the message names the field and value."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class BusyError(RuntimeError):
    """The waiting queue is full: the request is refused now and may be sent again later."""


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


_NEXT = {Status.WAITING: {Status.RUNNING, Status.CANCELLED},
         Status.RUNNING: {Status.FINISHED, Status.CANCELLED},
         Status.FINISHED: set(), Status.CANCELLED: set()}


@dataclass
class SamplingParams:
    """Per-request generation settings. temperature 0: greedy; top_k 0: off; top_p 1: off; seed: a private
    random stream for this request (None: seeded from the request id)."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: tuple = ()
    stop: tuple = ()  # stop strings (need a tokenizer)
    ignore_eos: bool = False

    def validate(self, max_new: int) -> None:
        """Checks every field; max_new: the most tokens this request may generate (max_seq_len - prompt)."""
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise RequestError(f"max_tokens={self.max_tokens!r} must be an integer >= 1", "max_tokens")
        if self.max_tokens > max_new:
            raise RequestError(f"max_tokens={self.max_tokens} exceeds what fits after the prompt ({max_new} tokens "
                               "up to max_seq_len)", "max_tokens")
        if not _number(self.temperature) or not 0.0 <= self.temperature <= 100.0:
            raise RequestError(f"temperature={self.temperature!r} must be a number in 0..100", "temperature")
        if not _number(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise RequestError(f"top_p={self.top_p!r} must be a number in (0, 1]", "top_p")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise RequestError(f"top_k={self.top_k!r} must be an integer >= 0 (0: off)", "top_k")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**63):
            raise RequestError(f"seed={self.seed!r} must be an integer in 0..2^63-1", "seed")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(eq=False)  # identity: a request is a key of per-step maps
class Request:
    """One generation request. `on_event(request, new_tokens, finished)` is called from the engine's thread after
    every step that changes it (tokens appended, finished or cancelled)."""

    prompt: list
    params: SamplingParams = field(default_factory=SamplingParams)
    on_event: object = None
    id: int = field(default_factory=lambda: next(_ids))
    status: Status = Status.WAITING
    slot: int | None = None
    tokens: list = field(default_factory=list)  # generated token ids
    finish_reason: str | None = None  # "stop" | "length" | "cancelled"
    arrival: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    text: str = ""  # detokenised output so far (with a tokenizer)

    def move(self, to: Status) -> None:
        if to not in _NEXT[self.status]:
            raise RuntimeError(f"request {self.id}: {self.status.value} -> {to.value} is not a valid transition")
        self.status = to

    @property
    def done(self) -> bool:
        return self.status in (Status.FINISHED, Status.CANCELLED)

    @property
    def position(self) -> int:
        """Index in the sequence of the next token fed to the model (its last generated token)."""
        return len(self.prompt) + len(self.tokens) - 1
