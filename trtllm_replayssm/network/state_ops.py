"""How the layers update their state: in place (the PyTorch runtime) or functionally (the engine export).

The layers (layers.py) call one of two interchangeable objects through their step context:

- `IN_PLACE`: the project's ops (trtllm_replayssm/ops) write the StateSet's tensors in place: no copies, CUDA
  graph capturable. The runtime runs this.
- `FUNCTIONAL`: every SSM and conv1d step is one TensorRT plugin node, called through its custom op
  (ops/library.py: y and the new state out, the inputs untouched), and the StateSet's entries are rebound to the
  new tensors; KV writes are out-of-place `index_put`s. `torch.export` / the ONNX exporter trace this: the graph
  takes every state tensor as an input and returns the ones a phase writes (builder/export.py).

Both compute the same step; GDN's gating (g, beta) and q/k normalisation, which the kernels fuse, are plain
tensor ops in front of the plugin node here, as the plugin takes them prepared.
"""

from __future__ import annotations

import dataclasses

import torch

from trtllm_replayssm import trt_plugins as tp
from trtllm_replayssm.config import ReplayConfig, dtype_name
from trtllm_replayssm.ops import gdn as gdn_ops
from trtllm_replayssm.ops import mamba2 as mamba2_ops
from trtllm_replayssm.ops import prefill as prefill_ops
from trtllm_replayssm.ops.conv1d import conv1d_commit, conv1d_update, conv1d_verify
from trtllm_replayssm.ops.gdn.reference import gdn_gating, prepare_qk
from trtllm_replayssm.ops.library import plugin_op
from trtllm_replayssm.ops.slots import snapshot_commit, spec_commit


def _conv_name(i):
    return f"layer{i}.conv_state"


class InPlaceOps:
    """The state written in place by the project's ops."""

    def conv1d(self, phase, ctx, i, x, weight, bias):
        state = ctx.state[_conv_name(i)]
        if phase == "prefill":
            hist = state[..., :weight.shape[-1] - 1]  # the committed history (a view with a verify window)
            return prefill_ops.conv1d_prefill(hist, x, weight, bias, True, lengths=ctx.lengths, slot_idx=ctx.slot_idx)
        step = conv1d_update if phase == "decode" else conv1d_verify
        return step(state, x, weight, bias, True, slot_idx=ctx.slot_idx)

    def conv1d_commit(self, ctx, i, kernel_size):
        conv1d_commit(ctx.state[_conv_name(i)], ctx.accepted, kernel_size, ctx.slot_idx)

    def mamba2(self, phase, ctx, i, mode, x, dt, B, C, A, D, dt_bias):
        pool = ctx.state.pools[i]
        args = dict(D=D, dt_bias=dt_bias, dt_softplus=True, slot_idx=ctx.slot_idx)
        if phase == "prefill":
            return prefill_ops.mamba2_prefill(pool, x, dt, B, C, A, lengths=ctx.lengths, **args)
        if phase == "decode":
            if mode == "replay":
                return mamba2_ops.replay_decode(pool, x, dt, B, C, A, **args)
            return mamba2_ops.conventional_decode(pool.checkpoint, x, dt, B, C, A, **args)
        if mode == "replay":
            return mamba2_ops.replay_verify(pool, x, dt, B, C, A, **args)
        return mamba2_ops.snapshot_verify(pool.checkpoint, ctx.state[f"layer{i}.snapshots"], x, dt, B, C, A, **args)

    def gdn(self, phase, ctx, i, mode, q, k, v, gates):
        pool = ctx.state.pools[i]
        args = dict(slot_idx=ctx.slot_idx, **gates)
        if phase == "prefill":
            return prefill_ops.gdn_prefill(pool, q, k, v, lengths=ctx.lengths, **args)
        if phase == "decode":
            if mode == "replay":
                return gdn_ops.gdn_replay_decode(pool, q, k, v, **args)
            return gdn_ops.gdn_conventional_decode(pool.checkpoint, pool.shape, q, k, v, **args)
        if mode == "replay":
            return gdn_ops.replay_verify(pool, q, k, v, **args)
        return gdn_ops.snapshot_verify(pool.checkpoint, ctx.state[f"layer{i}.snapshots"], q, k, v, **args)

    def ssm_commit(self, ctx, i, mode):
        pool = ctx.state.pools[i]
        if mode == "replay":
            spec_commit(pool, ctx.accepted, ctx.slot_idx, window=ctx.state.spec_tokens)
        else:
            snapshot_commit(pool.checkpoint, ctx.state[f"layer{i}.snapshots"], ctx.accepted, ctx.slot_idx)

    def write_kv(self, ctx, name, index, values):
        t = ctx.state[name]
        t[index] = values.to(t.dtype)


class FunctionalOps:
    """Every state update is a plugin node whose outputs replace the StateSet's entries (module docstring)."""

    @staticmethod
    def _node(ctx, plugin, fields, inputs, state_names):
        """Runs one plugin node; rebinds the state entries it writes (plugin input -> state name); returns y."""
        outs = plugin_op(plugin, fields, inputs)
        y_like, written = tp.plugin_outputs(plugin, fields)
        y = outs.pop(0) if y_like is not None else None
        for n, t in zip(written, outs):
            ctx.state.replace(state_names[n], t)
        return y

    @staticmethod
    def _pool_inputs(ctx, i, mode, extra=()):
        """The pool's tensors under their plugin input names, and plugin input -> state name."""
        names = {"state": f"layer{i}.checkpoint"}
        if mode == "replay":
            names.update({n: f"layer{i}.{n}" for n in ctx.state.pools[i].buffers if n != "checkpoint"})
        names.update({n: f"layer{i}.{n}" for n in extra})
        return {n: ctx.state[s] for n, s in names.items()}, names

    def conv1d(self, phase, ctx, i, x, weight, bias):
        name = _conv_name(i)
        state = ctx.state[name]
        k, T = weight.shape[-1], x.shape[1] if phase == "verify" else 1
        opts = dict(state_dtype=dtype_name(state.dtype), act_dtype=dtype_name(x.dtype),
                    weight_dtype=dtype_name(weight.dtype), has_bias=bias is not None)
        inputs = dict(x=x, weight=weight, bias=bias, slot_idx=ctx.slot_idx)
        if phase == "prefill":
            hist, window = state[..., :k - 1], state[..., k - 1:]  # a verify window rides behind the history
            fields = tp.conv1d_prefill_fields(x.shape[-1], k, **opts)
            y = self._node(ctx, tp.CONV1D_PREFILL, fields, dict(inputs, state=hist, lengths=ctx.lengths),
                           {"state": name})
            if window.shape[-1]:
                ctx.state.replace(name, torch.cat([ctx.state[name], window], dim=-1))
            return y
        mode = "update" if phase == "decode" else "verify"
        fields = tp.conv1d_fields(x.shape[-1], k, mode=mode, num_tokens=T, **opts)
        role = "state" if mode == "update" else "windows"
        return self._node(ctx, tp.CONV1D, fields, dict(inputs, **{role: state}), {role: name})

    def conv1d_commit(self, ctx, i, kernel_size):
        name = _conv_name(i)
        windows = ctx.state[name]
        fields = tp.conv1d_fields(windows.shape[1], kernel_size, mode="commit", num_tokens=ctx.state.spec_tokens,
                                  state_dtype=dtype_name(windows.dtype), act_dtype=dtype_name(windows.dtype))
        self._node(ctx, tp.CONV1D, fields, dict(accepted=ctx.accepted, slot_idx=ctx.slot_idx, windows=windows),
                   {"windows": name})

    @staticmethod
    def _cfg(pool, mode) -> ReplayConfig:
        # a conventional node has no ring: it carries the default ring length (the plugin does not read it)
        return pool.cfg if mode == "replay" else dataclasses.replace(pool.cfg, buffer_len=ReplayConfig().buffer_len)

    def mamba2(self, phase, ctx, i, mode, x, dt, B, C, A, D, dt_bias):
        pool = ctx.state.pools[i]
        cfg = self._cfg(pool, mode)
        inputs = dict(x=x, dt=dt, B=B, C=C, A=A, D=D, dt_bias=dt_bias, slot_idx=ctx.slot_idx)
        spec = phase == "verify" and mode != "replay"
        state, names = self._pool_inputs(ctx, i, mode, ["snapshots"] if spec else [])
        if phase == "prefill":
            fields = tp.mamba2_prefill_fields(pool.shape, cfg, mode=mode, has_z=False)
            return self._node(ctx, tp.MAMBA2_PREFILL, fields, dict(inputs, lengths=ctx.lengths, **state), names)
        if phase == "decode":
            fields = tp.mamba2_decode_fields(pool.shape, cfg, mode=mode, has_z=False)
            return self._node(ctx, tp.MAMBA2_DECODE, fields, dict(inputs, **state), names)
        fields = tp.mamba2_verify_fields(pool.shape, cfg, x.shape[1], mode="snapshot" if spec else "replay",
                                         has_z=False)
        return self._node(ctx, tp.MAMBA2_VERIFY, fields, dict(inputs, **state), names)

    def gdn(self, phase, ctx, i, mode, q, k, v, gates):
        pool = ctx.state.pools[i]
        cfg = self._cfg(pool, mode)
        g, beta = gdn_gating(gates["a"], gates["b"], gates["A_log"], gates["dt_bias"])
        q, k = (t.to(v.dtype) for t in prepare_qk(q, k, gates["use_qk_l2norm"]))
        inputs = dict(q=q, k=k, v=v, g=g, beta=beta, slot_idx=ctx.slot_idx)
        spec = phase == "verify" and mode != "replay"
        state, names = self._pool_inputs(ctx, i, mode, ["snapshots"] if spec else [])
        if phase == "prefill":
            fields = tp.gdn_prefill_fields(pool.shape, cfg, mode=mode)
            return self._node(ctx, tp.GDN_PREFILL, fields, dict(inputs, lengths=ctx.lengths, **state), names)
        if phase == "decode":
            fields = tp.gdn_decode_fields(pool.shape, cfg, mode=mode)
            return self._node(ctx, tp.GDN_DECODE, fields, dict(inputs, **state), names)
        fields = tp.gdn_verify_fields(pool.shape, cfg, v.shape[1], mode="snapshot" if spec else "replay")
        return self._node(ctx, tp.GDN_VERIFY, fields, dict(inputs, **state), names)

    def ssm_commit(self, ctx, i, mode):
        pool, T = ctx.state.pools[i], ctx.state.spec_tokens
        rows = dict(accepted=ctx.accepted, slot_idx=ctx.slot_idx)
        if mode == "replay":
            fields = tp.spec_commit_fields(pool.shape, pool.cfg, T)
            self._node(ctx, tp.SPEC_COMMIT, fields, dict(rows, cursor=ctx.state[f"layer{i}.cursor"]),
                       {"cursor": f"layer{i}.cursor"})
        else:
            fields = tp.snapshot_commit_fields(pool.cfg, T)
            inputs = dict(rows, snapshots=ctx.state[f"layer{i}.snapshots"], state=ctx.state[f"layer{i}.checkpoint"])
            self._node(ctx, tp.SNAPSHOT_COMMIT, fields, inputs, {"state": f"layer{i}.checkpoint"})

    def write_kv(self, ctx, name, index, values):
        t = ctx.state[name]
        ctx.state.replace(name, t.index_put(index, values.to(t.dtype)))


IN_PLACE = InPlaceOps()
FUNCTIONAL = FunctionalOps()
