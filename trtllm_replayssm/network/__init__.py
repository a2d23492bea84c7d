"""The network definition shared by the PyTorch runtime and the engine export: a Nemotron-H or Qwen3.5 model
with explicit state I/O (model.py), its layers (layers.py) and its state (state.py)."""

from .model import MODES, HybridLM, NetworkError, load_network
from .state import StateSet

__all__ = ["HybridLM", "MODES", "NetworkError", "StateSet", "load_network"]
