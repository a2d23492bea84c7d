"""The scheduler: which requests run at the next step boundary. No tensors, no model: requests, slots, a queue.

At each boundary it drops cancelled requests (their slots are free at once), admits waiting requests into free
slots in arrival order (each is prefilled in that step and joins the decode batch from the next), and lists the
running requests to decode. A bounded waiting queue holds what does not fit; beyond it, `submit` raises
BusyError.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .request import BusyError, Request, Status


@dataclass
class StepPlan:
    prefill: list = field(default_factory=list)  # requests admitted this step (slot assigned)
    decode: list = field(default_factory=list)  # running requests with at least one generated token

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class Scheduler:
    def __init__(self, num_slots: int, max_queue: int = 256, max_prefill: int | None = None):
        if num_slots < 1 or max_queue < 0:
            raise ValueError(f"num_slots={num_slots} must be >= 1 and max_queue={max_queue} >= 0")
        self.num_slots, self.max_queue = num_slots, max_queue
        self.max_prefill = max_prefill or num_slots  # requests prefilled in one step at most
        self.free = list(range(num_slots - 1, -1, -1))  # a stack: the lowest slot is taken first
        self.waiting: deque = deque()
        self.running: dict = {}  # slot -> request

    def submit(self, req: Request) -> None:
        if len(self.waiting) >= self.max_queue + len(self.free):
            raise BusyError(f"the server is busy: {self.num_slots} requests running and {len(self.waiting)} "
                            f"waiting (max_queue={self.max_queue}); try again later")
        self.waiting.append(req)

    def cancel(self, req: Request) -> bool:
        """Cancels a waiting or running request; its slot (if any) is free at once. False if already done."""
        if req.done:
            return False
        if req.status is Status.WAITING:
            self.waiting.remove(req)
        else:
            self._release(req)
        req.move(Status.CANCELLED)
        req.finish_reason = "cancelled"
        return True

    def finish(self, req: Request, reason: str) -> None:
        self._release(req)
        req.move(Status.FINISHED)
        req.finish_reason = reason

    def _release(self, req: Request) -> None:
        if self.running.get(req.slot) is not req:
            raise RuntimeError(f"request {req.id} does not hold slot {req.slot}")
        del self.running[req.slot]
        self.free.append(req.slot)

    def schedule(self) -> StepPlan:
        plan = StepPlan(decode=[r for r in self.running.values() if r.tokens])
        while self.waiting and self.free and len(plan.prefill) < self.max_prefill:
            req = self.waiting.popleft()
            req.slot = self.free.pop()
            req.move(Status.RUNNING)
            self.running[req.slot] = req
            plan.prefill.append(req)
        return plan

    @property
    def active(self) -> int:
        return len(self.running)

    @property
    def queued(self) -> int:
        return len(self.waiting)
