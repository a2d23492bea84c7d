"""Memory planner: per-request bytes and the most concurrent requests a GPU admits, for conventional decode,
conventional speculative decode, ReplaySSM and ReplaySSM speculative decode.

Per request and per layer (act = activation bytes, C = conv channels, k = conv kernel, T = 1 + drafts):
    conventional        SSM: one state             conv: (k-1) C act
    conventional spec   SSM: T states (one per draft position, as engines store them today)
                        conv: T (k-1) C act
    ReplaySSM           SSM: the pool's slot (checkpoint + ring of L records + cursors)
                        conv: (k-1) C act
    ReplaySSM spec      SSM: the pool's slot with a ring of L >= 2T records
                        conv: (k-1+T) C act (a window that the commit rolls back by the accepted count)
    attention           KV: 2 kv_heads head_dim (context + T - 1) kv bytes
The SSM bytes come from the same buffer specs the pools allocate from (trtllm_replayssm/pool.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trtllm_replayssm.config import ReplayConfig, parse_dtype
from trtllm_replayssm.model_config import ModelPlan
from trtllm_replayssm.pool import gdn_buffer_specs, mamba2_buffer_specs

MODES = ("conventional", "conventional_spec", "replay", "replay_spec")


@dataclass(frozen=True)
class PlanSettings:
    context_len: int = 8192
    T: int = 1  # tokens per verify step (1 + drafts); speculative modes only
    buffer_len: int = 16  # ReplaySSM ring length (standard decode)
    spec_buffer_len: int | None = None  # ReplaySSM speculative ring length; default buffer_len + T
    state_dtype: str = "fp32"
    act_dtype: str = "bf16"
    kv_dtype: str = "bf16"

    def ring_len(self, mode: str) -> int:
        if mode != "replay_spec":
            return self.buffer_len
        L = self.spec_buffer_len or self.buffer_len + self.T
        if L < 2 * self.T:
            raise ValueError(f"spec_buffer_len={L} is below 2T={2 * self.T}: the ring must hold two windows of drafts")
        return L


def _bytes(dtype: str) -> int:
    return torch.empty((), dtype=parse_dtype(dtype)).element_size()


def _ssm_slot_bytes(layer, cfg: ReplayConfig, state_only: bool) -> int:
    specs = mamba2_buffer_specs(layer.shape, cfg) if layer.kind == "mamba2" else gdn_buffer_specs(layer.shape, cfg)
    return sum(s.bytes_per_slot for s in specs if not state_only or s.name == "checkpoint")


def request_bytes(model: ModelPlan, mode: str, s: PlanSettings) -> dict:
    """Bytes one request holds in `mode`: {'ssm', 'conv', 'kv', 'total'}."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not one of {MODES}")
    spec = mode.endswith("_spec")
    T = s.T if spec else 1
    cfg = ReplayConfig(buffer_len=s.ring_len(mode) if mode.startswith("replay") else 1,
                       state_dtype=s.state_dtype, act_dtype=s.act_dtype)
    act = _bytes(s.act_dtype)
    ssm = conv = kv = 0
    for layer in model.layers:
        if layer.kind in ("mamba2", "gdn"):
            if mode.startswith("replay"):
                ssm += _ssm_slot_bytes(layer, cfg, state_only=False)
                conv += (layer.conv_kernel - 1 + (T if spec else 0)) * layer.conv_channels * act
            else:
                ssm += T * _ssm_slot_bytes(layer, cfg, state_only=True)
                conv += T * (layer.conv_kernel - 1) * layer.conv_channels * act
        elif layer.kind == "attention":
            kv += 2 * layer.shape.num_kv_heads * layer.shape.head_dim * (s.context_len + T - 1) * _bytes(s.kv_dtype)
    return {"ssm": ssm, "conv": conv, "kv": kv, "total": ssm + conv + kv}


def max_requests(model: ModelPlan, mode: str, s: PlanSettings, gpu_bytes: float, weight_bytes: float) -> int:
    """Most concurrent requests whose state fits beside the weights (0 when the weights do not fit)."""
    free = gpu_bytes - weight_bytes
    return max(int(free // request_bytes(model, mode, s)["total"]), 0)


def replay_spec_ratio_bound(model: ModelPlan, s: PlanSettings) -> float:
    """Upper bound of (ReplaySSM speculative requests) / (conventional speculative requests) for this model and
    context, whatever the ring costs: a ReplaySSM request still holds one checkpoint per SSM layer, its conv
    window and its KV cache. Where the KV cache dominates, no ring length gets the ratio past this."""
    conv_spec = request_bytes(model, "conventional_spec", s)["total"]
    replay = request_bytes(model, "replay_spec", s)
    cfg = ReplayConfig(buffer_len=s.ring_len("replay_spec"), state_dtype=s.state_dtype, act_dtype=s.act_dtype)
    checkpoints = sum(_ssm_slot_bytes(layer, cfg, state_only=True) for layer in model.layers
                      if layer.kind in ("mamba2", "gdn"))
    return conv_spec / (checkpoints + replay["conv"] + replay["kv"])

