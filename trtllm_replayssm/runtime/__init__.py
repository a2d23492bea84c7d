"""The serving runtime: requests and their state machine (request.py), the scheduler (scheduler.py), the model
runner with CUDA graphs per batch bucket (runner.py), sampling (sampling.py) and the in-flight-batching engine
loop (engine.py). HTTP servers (trtllm_replayssm/serve) and the Triton model are thin layers over Engine."""

from .engine import Engine, Metrics, load_tokenizer, slots_in_budget
from .request import BusyError, Request, RequestError, SamplingParams, Status
from .scheduler import Scheduler, StepPlan

__all__ = ["BusyError", "Engine", "Metrics", "Request", "RequestError", "SamplingParams", "Scheduler", "Status",
           "StepPlan", "load_tokenizer", "slots_in_budget"]
