"""The project's decode ops as `torch.library` custom ops (namespace `rssm`): the functional form for export.

Each op takes plain tensors and scalars (a pool's buffers as a list in its spec order, the layer shape and the
ReplaySSM settings as ints and strings), runs the op of trtllm_replayssm/ops on them, and has a fake
implementation, so `torch.export` records one node per op call with the buffers it writes marked as mutated
(never tracing into the ops' host-side checks or per-row loops). Wrappers named like the ops take the objects
the network passes (pools, ReplayConfig) and call the custom op.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops import mamba2 as mamba2_ops
from trtllm_replayssm.ops.conv1d import conv1d_update as _conv1d_update
from trtllm_replayssm.pool import Mamba2StatePool

NAMESPACE = "rssm"
_NO_LATENCY_LIMIT = -1  # ReplayConfig.latency_route_bytes None (the default route) as an int argument


@torch.library.custom_op(f"{NAMESPACE}::conv1d_update", mutates_args=("state",))
def _conv1d_update_op(state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      activation: bool, slot_idx: torch.Tensor) -> torch.Tensor:
    return _conv1d_update(state, x, weight, bias, activation, slot_idx=slot_idx)


@_conv1d_update_op.register_fake
def _(state, x, weight, bias, activation, slot_idx):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::mamba2_conventional_decode", mutates_args=("state",))
def _mamba2_conventional_op(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, B: torch.Tensor,
                            C: torch.Tensor, A: torch.Tensor, D: torch.Tensor | None, z: torch.Tensor | None,
                            dt_bias: torch.Tensor | None, dt_softplus: bool, slot_idx: torch.Tensor) -> torch.Tensor:
    return mamba2_ops.conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias,
                                          dt_softplus=dt_softplus, slot_idx=slot_idx)


@_mamba2_conventional_op.register_fake
def _(state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::mamba2_replay_decode", mutates_args=("buffers",))
def _mamba2_replay_op(buffers: list[torch.Tensor], x: torch.Tensor, dt: torch.Tensor, B: torch.Tensor,
                      C: torch.Tensor, A: torch.Tensor, D: torch.Tensor | None, z: torch.Tensor | None,
                      dt_bias: torch.Tensor | None, dt_softplus: bool, slot_idx: torch.Tensor, ngroups: int,
                      buffer_len: int, state_dtype: str, act_dtype: str, read_format: str,
                      latency_route_bytes: int) -> torch.Tensor:
    H, P = x.shape[1], x.shape[2]
    shape = Mamba2LayerShape(H, P, B.shape[-1], ngroups)
    cfg = ReplayConfig(buffer_len, state_dtype, act_dtype, read_format,
                       None if latency_route_bytes == _NO_LATENCY_LIMIT else latency_route_bytes)
    names = [s.name for s in Mamba2StatePool.buffer_specs(shape, cfg)]
    if len(names) != len(buffers):
        raise ValueError(f"buffers has {len(buffers)} tensors, the pool has {len(names)} ({', '.join(names)})")
    pool = Mamba2StatePool.over(shape, cfg, dict(zip(names, buffers)))
    return mamba2_ops.replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                                    slot_idx=slot_idx)


@_mamba2_replay_op.register_fake
def _(buffers, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, ngroups, buffer_len, state_dtype, act_dtype,
      read_format, latency_route_bytes):
    return torch.empty_like(x)


def conv1d_update(state, x, weight, bias=None, activation=True, slot_idx=None):
    """ops.conv1d.conv1d_update through the custom op (slot_idx required: the export's input)."""
    return _conv1d_update_op(state, x, weight, bias, activation, slot_idx)


def mamba2_conventional_decode(state, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True,
                               slot_idx=None):
    """ops.mamba2.conventional_decode through the custom op."""
    return _mamba2_conventional_op(state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx)


def mamba2_replay_decode(pool: Mamba2StatePool, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True,
                         slot_idx=None):
    """ops.mamba2.replay_decode through the custom op: the pool's buffers in spec order, its settings as
    scalars."""
    cfg = pool.cfg
    limit = _NO_LATENCY_LIMIT if cfg.latency_route_bytes is None else cfg.latency_route_bytes
    return _mamba2_replay_op([pool.buffers[s.name] for s in pool.specs], x, dt, B, C, A, D, z, dt_bias, dt_softplus,
                             slot_idx, pool.shape.ngroups, cfg.buffer_len, dtype_name(cfg.state_dtype),
                             dtype_name(cfg.act_dtype), cfg.read_format, limit)
