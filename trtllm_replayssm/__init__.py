"""trtllm-replayssm: ReplaySSM decode kernels, references, state pools and tools for hybrid SSM models."""

from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.pool import Mamba2StatePool
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode

__version__ = "0.1.0"

__all__ = [
    "Mamba2LayerShape",
    "ReplayConfig",
    "Mamba2StatePool",
    "conventional_decode",
    "replay_decode",
    "__version__",
]
