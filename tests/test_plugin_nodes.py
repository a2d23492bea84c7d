"""The ONNX export of the custom decode ops (builder/plugin_nodes.py): one TensorRT plugin node per op with the
plugin's fields and input order (trt_plugins), outputs y then the written state; the exported graph, run by
onnx.reference with the plugin node implemented by the project's ops, equals the eager op (output and state)."""

import importlib.util

import pytest
import torch

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

from onnx.reference import ReferenceEvaluator  # noqa: E402

from test_ops_library import SHAPE, SLOTS, _inputs, _pool  # noqa: E402
from trtllm_replayssm import trt_plugins  # noqa: E402
from trtllm_replayssm.builder.onnx_runner import plugin_node_ops  # noqa: E402
from trtllm_replayssm.builder.plugin_nodes import translation_table  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.ops import library  # noqa: E402
from trtllm_replayssm.ops import mamba2 as mamba2_ops  # noqa: E402

NAMES = ["x", "dt", "B", "C", "A", "D", "dt_bias", "slot_idx"]
STATE = {"replay": ["checkpoint", "ring_x", "ring_B", "ring_dt", "cursor"], "conventional": ["checkpoint"]}


class _Step(torch.nn.Module):
    """One decode plugin node over a pool's buffers (replay) or its checkpoint (conventional)."""

    def __init__(self, mode, cfg):
        super().__init__()
        self.mode, self.cfg = mode, cfg

    def forward(self, x, dt, B, C, A, D, dt_bias, slot_idx, *state):
        cfg = self.cfg if self.mode == "replay" else ReplayConfig(state_dtype=self.cfg.state_dtype,
                                                                  act_dtype=self.cfg.act_dtype)
        fields = trt_plugins.mamba2_decode_fields(SHAPE, cfg, mode=self.mode, has_z=False)
        names = ["state"] + STATE[self.mode][1:]
        inputs = dict(x=x, dt=dt, B=B, C=C, A=A, D=D, dt_bias=dt_bias, slot_idx=slot_idx, **dict(zip(names, state)))
        return tuple(library.plugin_op(trt_plugins.MAMBA2_DECODE, fields, inputs))


def _export(mode, cfg, pool):
    """The exported ONNX model of one decode step, and its inputs (a pool's buffers as the state)."""
    a = _inputs(cfg)
    state_names = STATE[mode]
    inputs = tuple(a[n] for n in NAMES[:-1]) + (SLOTS,) + tuple(pool.buffers[n] for n in state_names)
    module = _Step(mode, cfg)
    module(*inputs)  # registers the op (its translation is looked up by name)
    prog = torch.onnx.export(module, inputs, dynamo=True, custom_translation_table=translation_table(),
                             input_names=NAMES + state_names, output_names=["y"] + [f"{n}.out" for n in state_names],
                             verbose=False)
    return prog.model_proto, a, state_names, inputs


@pytest.mark.parametrize("mode", ["replay", "conventional"])
def test_exported_plugin_node_runs_like_the_op(mode):
    cfg = ReplayConfig(4, "fp32", "fp32")
    pool, ref = _pool(cfg), _pool(cfg)
    model, a, state_names, inputs = _export(mode, cfg, pool)
    (node,) = [n for n in model.graph.node if n.domain == trt_plugins.PLUGIN_NAMESPACE]
    # conventional decode has no ring: its node carries the default buffer_len (the plugin does not read it)
    plugin_cfg = cfg if mode == "replay" else ReplayConfig(state_dtype=cfg.state_dtype, act_dtype=cfg.act_dtype)
    fields = trt_plugins.mamba2_decode_fields(SHAPE, plugin_cfg, mode=mode, has_z=False)
    attrs = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    assert node.op_type == trt_plugins.MAMBA2_DECODE
    assert attrs == {**fields, "plugin_version": trt_plugins.PLUGIN_VERSION.encode(),
                     "plugin_namespace": trt_plugins.PLUGIN_NAMESPACE.encode()}
    want_inputs = ["checkpoint" if n == "state" else n for n in trt_plugins.mamba2_decode_inputs(fields)]
    assert list(node.input) == want_inputs
    assert len(node.output) == 1 + len(state_names)
    got = ReferenceEvaluator(model, new_ops=plugin_node_ops()).run(
        None, {n: t.numpy() for n, t in zip(NAMES + state_names, inputs)})
    args = dict(D=a["D"], dt_bias=a["dt_bias"], slot_idx=SLOTS)
    if mode == "replay":
        want = mamba2_ops.replay_decode(ref, a["x"], a["dt"], a["B"], a["C"], a["A"], **args)
    else:
        want = mamba2_ops.conventional_decode(ref.checkpoint, a["x"], a["dt"], a["B"], a["C"], a["A"], **args)
    live = (SLOTS >= 0).numpy()
    assert (got[0][live] == want.numpy()[live]).all()
    for n, t in zip(state_names, got[1:]):
        assert (t == ref.buffers[n].numpy()).all(), n
    # the step wrote state (the comparison above is not between two untouched copies)
    assert not (got[1] == pool.buffers["checkpoint"].numpy()).all()


@pytest.mark.skipif(importlib.util.find_spec("tensorrt_rtx") is None,
                    reason="tensorrt_rtx is not installed (pip install tensorrt-rtx==1.7.1.116)")
@pytest.mark.skipif(not (trt_plugins.native_dir() / "libreplayssm_trt.so").exists(),
                    reason="libreplayssm_trt.so is missing (build with RSSM_TENSORRT=1, RSSM_CUDA_ARCHS including 89)")
@pytest.mark.parametrize("mode", ["replay", "conventional"])
def test_exported_graph_builds_an_sm89_engine_with_tensorrt_rtx(mode, tmp_path):
    """The exporter's plugin node (domain = plugin namespace) reaches the plugin through TensorRT-RTX's ONNX
    parser (builder/engine.py's child-process build, as `build` runs it)."""
    from trtllm_replayssm.builder.engine import build_engine

    trt_plugins.check_targets([89])
    cfg = ReplayConfig(4, "fp32", "fp32")
    model, *_ = _export(mode, cfg, _pool(cfg))
    path = tmp_path / "step.onnx"
    path.write_bytes(model.SerializeToString())
    result = build_engine("tensorrt_rtx", path, tmp_path / "step.engine", 89, profile={})
    assert result["errors"] == [] and result["bytes"] > 0, result
    assert (tmp_path / "step.engine").stat().st_size == result["bytes"]
