"""Each TensorRT plugin's contract run by the project's ops: `run_plugin(plugin, fields, inputs)`.

A plugin node (trt_plugins: name, fields, inputs by name in the plugin's order) computes its outputs y, then the
new contents of every input it updates in place (trt_plugins.plugin_outputs). Here the same computation runs on
copies of those inputs through trtllm_replayssm/ops (the CUDA kernels on CUDA tensors, the PyTorch reference on
CPU ones), so the inputs are left as they were. This is what

- the custom op of ops/library.py runs eagerly (the network's functional form, the one the ONNX export traces),
- `onnx.reference` runs for a plugin node of an exported graph (builder/onnx_runtime.py),
- a test compares the plugin library's `enqueue` with.

GDN plugins take prepared inputs: q, k as the recurrence reads them (L2-normalised, q scaled) and the gates g,
beta in fp32 (network/state_ops.py prepares them before the node).
"""

from __future__ import annotations

import torch

from trtllm_replayssm import trt_plugins as tp
from trtllm_replayssm.config import DTYPE_CODES, GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops import gdn as gdn_ops
from trtllm_replayssm.ops import mamba2 as mamba2_ops
from trtllm_replayssm.ops import prefill as prefill_ops
from trtllm_replayssm.ops import slots as slot_ops
from trtllm_replayssm.ops.conv1d import conv1d_commit, conv1d_update, conv1d_verify
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}
_MAMBA2_RINGS = ("ring_x", "ring_B", "ring_dt")
_GDN_RINGS = ("ring_u", "ring_k", "ring_g")


def run_plugin(plugin: str, fields: dict, inputs: dict) -> list[torch.Tensor]:
    """The outputs of the plugin node `plugin` with `fields` on `inputs` (name -> tensor): y (when the plugin
    has one), then the updated copies of the inputs it writes, in the plugin's output order."""
    y_like, written = tp.plugin_outputs(plugin, fields)
    named = {n: (t.clone() if n in written else t) for n, t in inputs.items()}
    y = _RUN[plugin](fields, named)
    return ([y] if y_like is not None else []) + [named[n] for n in written]


def _cfg(fields: dict, *, latency=False) -> ReplayConfig:
    kib = fields.get("latency_route_kib", 0) if latency else 0
    return ReplayConfig(fields.get("buffer_len", 16), _DTYPES[fields["state_dtype"]], _DTYPES[fields["act_dtype"]],
                        latency_route_bytes=kib * 1024)


def _pool(cls, rings, shape, cfg, named) -> "Mamba2StatePool | GdnStatePool":
    """A pool over the node's state; buffers the node does not take are stand-ins (a cursor of zeros, empty
    rings): the op never reads them."""
    state = named["state"]
    n = state.shape[0]
    stand_in = {"cursor": torch.zeros(n, *next(s.slot_shape for s in cls.buffer_specs(shape, cfg) if s.name == "cursor"),
                                      dtype=torch.int32, device=state.device)}
    stand_in.update({r: state.new_empty(n, 0) for r in rings})
    return cls.over(shape, cfg, {"checkpoint": state, **{k: named.get(k, v) for k, v in stand_in.items()}})


def _mamba2_shape(f) -> Mamba2LayerShape:
    return Mamba2LayerShape(f["nheads"], f["head_dim"], f["dstate"], f["ngroups"])


def _gdn_shape(f) -> GdnLayerShape:
    return GdnLayerShape(f["num_k_heads"], f["num_v_heads"], f["head_k_dim"], f["head_v_dim"])


def _mamba2_args(f, n):
    return dict(D=n.get("D"), z=n.get("z"), dt_bias=n.get("dt_bias"), dt_softplus=bool(f["dt_softplus"]),
                slot_idx=n["slot_idx"], pad_slot_id=f["pad_slot_id"])


def _gdn_args(f, n):
    return dict(g=n["g"], beta=n["beta"], use_qk_l2norm=False, scale=1.0, slot_idx=n["slot_idx"],
                pad_slot_id=f["pad_slot_id"])


def _mamba2_decode(f, n):
    xs = (n["x"], n["dt"], n["B"], n["C"], n["A"])
    if f["mode"]:
        pool = _pool(Mamba2StatePool, _MAMBA2_RINGS, _mamba2_shape(f), _cfg(f, latency=True), n)
        return mamba2_ops.replay_decode(pool, *xs, **_mamba2_args(f, n))
    return mamba2_ops.conventional_decode(n["state"], *xs, **_mamba2_args(f, n))


def _mamba2_verify(f, n):
    xs = (n["x"], n["dt"], n["B"], n["C"], n["A"])
    if f["mode"]:
        pool = _pool(Mamba2StatePool, _MAMBA2_RINGS, _mamba2_shape(f), _cfg(f), n)
        return mamba2_ops.replay_verify(pool, *xs, **_mamba2_args(f, n))
    return mamba2_ops.snapshot_verify(n["state"], n["snapshots"], *xs, ngroups=f["ngroups"], **_mamba2_args(f, n))


def _mamba2_prefill(f, n):
    pool = _pool(Mamba2StatePool, _MAMBA2_RINGS, _mamba2_shape(f), _cfg(f), n)
    return prefill_ops.mamba2_prefill(pool, n["x"], n["dt"], n["B"], n["C"], n["A"], lengths=n["lengths"],
                                      **_mamba2_args(f, n))


def _gdn_decode(f, n):
    shape = _gdn_shape(f)
    if f["mode"]:
        pool = _pool(GdnStatePool, _GDN_RINGS, shape, _cfg(f, latency=True), n)
        return gdn_ops.gdn_replay_decode(pool, n["q"], n["k"], n["v"], **_gdn_args(f, n))
    return gdn_ops.gdn_conventional_decode(n["state"], shape, n["q"], n["k"], n["v"], **_gdn_args(f, n))


def _gdn_verify(f, n):
    if f["mode"]:
        pool = _pool(GdnStatePool, _GDN_RINGS, _gdn_shape(f), _cfg(f), n)
        return gdn_ops.replay_verify(pool, n["q"], n["k"], n["v"], **_gdn_args(f, n))
    return gdn_ops.snapshot_verify(n["state"], n["snapshots"], n["q"], n["k"], n["v"], **_gdn_args(f, n))


def _gdn_prefill(f, n):
    pool = _pool(GdnStatePool, _GDN_RINGS, _gdn_shape(f), _cfg(f), n)
    return prefill_ops.gdn_prefill(pool, n["q"], n["k"], n["v"], lengths=n["lengths"], **_gdn_args(f, n))


def _conv1d(f, n):
    pad = f["pad_slot_id"]
    if f["mode"] == tp.CONV1D_MODES["commit"]:
        conv1d_commit(n["windows"], n["accepted"], f["kernel_size"], n["slot_idx"], pad)
        return None
    args = (n["x"], n["weight"], n.get("bias"), bool(f["silu"]), n["slot_idx"], pad)
    if f["mode"] == tp.CONV1D_MODES["update"]:
        return conv1d_update(n["state"], *args)
    return conv1d_verify(n["windows"], *args)


def _conv1d_prefill(f, n):
    return prefill_ops.conv1d_prefill(n["state"], n["x"], n["weight"], n.get("bias"), bool(f["silu"]),
                                      lengths=n["lengths"], slot_idx=n["slot_idx"], pad_slot_id=f["pad_slot_id"])


def _spec_commit(f, n):
    """The cursor is all the commit reads and writes: a pool of stand-ins around it."""
    cursor = n["cursor"]
    pool = Mamba2StatePool.__new__(Mamba2StatePool)
    pool.cfg, pool.num_slots, pool.device = ReplayConfig(f["buffer_len"]), cursor.shape[0], cursor.device
    pool.buffers = {"cursor": cursor, "checkpoint": cursor.new_empty(cursor.shape[0], 0)}
    slot_ops.spec_commit(pool, n["accepted"], n["slot_idx"], window=f["window"], pad_slot_id=f["pad_slot_id"])


def _snapshot_commit(f, n):
    slot_ops.snapshot_commit(n["state"], n["snapshots"], n["accepted"], n["slot_idx"], f["pad_slot_id"])


_RUN = {tp.MAMBA2_DECODE: _mamba2_decode, tp.MAMBA2_VERIFY: _mamba2_verify, tp.MAMBA2_PREFILL: _mamba2_prefill,
        tp.GDN_DECODE: _gdn_decode, tp.GDN_VERIFY: _gdn_verify, tp.GDN_PREFILL: _gdn_prefill, tp.CONV1D: _conv1d,
        tp.CONV1D_PREFILL: _conv1d_prefill, tp.SPEC_COMMIT: _spec_commit, tp.SNAPSHOT_COMMIT: _snapshot_commit}
