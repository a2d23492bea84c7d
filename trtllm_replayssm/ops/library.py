"""The project's decode ops as `torch.library` custom ops (namespace `rssm`): the functional form for export.

Each op takes plain tensors and scalars (a pool's buffers as a list in its spec order, the layer shape and the
ReplaySSM settings as ints and strings) and returns the output followed by the new contents of every state
tensor it writes, in argument order: the plugins' contract (state in, same state out, aliased), in functional
form. The eager implementation runs the op of trtllm_replayssm/ops on copies; a fake implementation gives the
shapes, so `torch.export` records one node per op call (never tracing into the ops' host-side checks or per-row
loops) and the ONNX exporter maps that node onto one plugin node. Wrappers named like the ops take the objects
the network passes (pools, ReplayConfig), call the custom op and write the new state back in place.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops import mamba2 as mamba2_ops
from trtllm_replayssm.ops.conv1d import conv1d_update as _conv1d_update
from trtllm_replayssm.pool import Mamba2StatePool

NAMESPACE = "rssm"
NO_LATENCY_LIMIT = -1  # ReplayConfig.latency_route_bytes None (the default route) as an int argument
# The replay pool's buffers in the decode plugin's order (trt_plugins.mamba2_decode_inputs): no read copy.
REPLAY_BUFFERS = ("checkpoint", "ring_x", "ring_B", "ring_dt", "cursor")
_SIX_TENSORS = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


@torch.library.custom_op(f"{NAMESPACE}::conv1d_update", mutates_args=())
def _conv1d_update_op(state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                      activation: bool, slot_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    state = state.clone()
    return _conv1d_update(state, x, weight, bias, activation, slot_idx=slot_idx), state


@_conv1d_update_op.register_fake
def _(state, x, weight, bias, activation, slot_idx):
    return torch.empty_like(x), torch.empty_like(state)


@torch.library.custom_op(f"{NAMESPACE}::mamba2_conventional_decode", mutates_args=())
def _mamba2_conventional_op(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, B: torch.Tensor,
                            C: torch.Tensor, A: torch.Tensor, D: torch.Tensor | None, z: torch.Tensor | None,
                            dt_bias: torch.Tensor | None, dt_softplus: bool,
                            slot_idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    state = state.clone()
    return mamba2_ops.conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias,
                                          dt_softplus=dt_softplus, slot_idx=slot_idx), state


@_mamba2_conventional_op.register_fake
def _(state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx):
    return torch.empty_like(x), torch.empty_like(state)


@torch.library.custom_op(f"{NAMESPACE}::mamba2_replay_decode", mutates_args=())
def _mamba2_replay_op(buffers: list[torch.Tensor], x: torch.Tensor, dt: torch.Tensor, B: torch.Tensor,
                      C: torch.Tensor, A: torch.Tensor, D: torch.Tensor | None, z: torch.Tensor | None,
                      dt_bias: torch.Tensor | None, dt_softplus: bool, slot_idx: torch.Tensor, ngroups: int,
                      buffer_len: int, state_dtype: str, act_dtype: str, read_format: str,
                      latency_route_bytes: int) -> _SIX_TENSORS:
    H, P = x.shape[1], x.shape[2]
    shape = Mamba2LayerShape(H, P, B.shape[-1], ngroups)
    cfg = ReplayConfig(buffer_len, state_dtype, act_dtype, read_format,
                       None if latency_route_bytes == NO_LATENCY_LIMIT else latency_route_bytes)
    names = [s.name for s in Mamba2StatePool.buffer_specs(shape, cfg)]
    if names != list(REPLAY_BUFFERS):
        raise ValueError(f"read_format={read_format!r} adds pool buffers ({', '.join(names)}); the decode plugin "
                         f"takes {', '.join(REPLAY_BUFFERS)} (read_format='none')")
    buffers = [t.clone() for t in buffers]
    pool = Mamba2StatePool.over(shape, cfg, dict(zip(names, buffers)))
    y = mamba2_ops.replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                                 slot_idx=slot_idx)
    return (y, *buffers)


@_mamba2_replay_op.register_fake
def _(buffers, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, ngroups, buffer_len, state_dtype, act_dtype,
      read_format, latency_route_bytes):
    return (torch.empty_like(x), *(torch.empty_like(t) for t in buffers))


def _write_back(state: list, outputs: list) -> torch.Tensor:
    """Copies a custom op's new state into the state tensors it was given; returns the op's output."""
    for t, new in zip(state, outputs[1:]):
        t.copy_(new)
    return outputs[0]


def conv1d_update(state, x, weight, bias=None, activation=True, slot_idx=None):
    """ops.conv1d.conv1d_update through the custom op (slot_idx required: the export's input)."""
    return _write_back([state], _conv1d_update_op(state, x, weight, bias, activation, slot_idx))


def mamba2_conventional_decode(state, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True,
                               slot_idx=None):
    """ops.mamba2.conventional_decode through the custom op."""
    return _write_back([state], _mamba2_conventional_op(state, x, dt, B, C, A, D, z, dt_bias, dt_softplus,
                                                        slot_idx))


def mamba2_replay_decode(pool: Mamba2StatePool, x, dt, B, C, A, *, D=None, z=None, dt_bias=None, dt_softplus=True,
                         slot_idx=None):
    """ops.mamba2.replay_decode through the custom op: the pool's buffers in spec order, its settings as
    scalars."""
    cfg = pool.cfg
    limit = NO_LATENCY_LIMIT if cfg.latency_route_bytes is None else cfg.latency_route_bytes
    buffers = [pool.buffers[s.name] for s in pool.specs]
    return _write_back(buffers, _mamba2_replay_op(buffers, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx,
                                                  pool.shape.ngroups, cfg.buffer_len, dtype_name(cfg.state_dtype),
                                                  dtype_name(cfg.act_dtype), cfg.read_format, limit))
