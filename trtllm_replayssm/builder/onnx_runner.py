"""Runs exported phase graphs with `onnx.reference`, the way an engine runtime drives an engine: the state lives
outside the graphs (here as numpy arrays by name), each phase binds the state inputs it reads and writes its
state outputs back to the inputs they alias (export.PhaseGraph.aliases).

Plugin nodes run ops/plugin_ops.run_plugin (the project's ops, the PyTorch reference on the CPU): this checks the
exported graphs (their plain ONNX ops, the plugin nodes' fields and wiring) without TensorRT.

    runner = OnnxRunner({"prefill": "engine/prefill.onnx", "decode": "engine/decode.onnx"}, state)
    logits = runner.run("prefill", input_ids=ids, lengths=lengths, slot_idx=slots)["logits"]
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import numpy as np
import torch

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.ops.plugin_ops import run_plugin

from .export import STATE_OUTPUT_SUFFIX

_PLUGINS = (trt_plugins.MAMBA2_DECODE, trt_plugins.GDN_DECODE, trt_plugins.MAMBA2_VERIFY, trt_plugins.GDN_VERIFY,
            trt_plugins.SPEC_COMMIT, trt_plugins.SNAPSHOT_COMMIT, trt_plugins.CONV1D, trt_plugins.MAMBA2_PREFILL,
            trt_plugins.GDN_PREFILL, trt_plugins.CONV1D_PREFILL)


_RECORDS: list | None = None


@contextlib.contextmanager
def recording():
    """Collects every plugin node run inside the block as (plugin, fields, inputs by name, outputs)."""
    global _RECORDS
    _RECORDS = records = []
    try:
        yield records
    finally:
        _RECORDS = None


@functools.cache
def plugin_node_ops() -> list:
    """onnx.reference implementations (OpRun classes) of every plugin node."""
    from onnx.reference.op_run import OpRun

    def make(plugin):
        def _run(self, *inputs, **attrs):
            fields = {k: int(v) for k, v in attrs.items() if k not in ("plugin_version", "plugin_namespace")}
            names = trt_plugins.plugin_inputs(plugin, fields)
            named = {n: torch.from_numpy(np.array(a, copy=True)) for n, a in zip(names, inputs)}
            outputs = run_plugin(plugin, fields, named)
            if _RECORDS is not None:
                _RECORDS.append((plugin, fields, named, outputs))
            return tuple(t.numpy() for t in outputs)
        return type(plugin, (OpRun,), {"op_domain": trt_plugins.PLUGIN_NAMESPACE, "_run": _run})

    return [make(p) for p in _PLUGINS]


class OnnxRunner:
    """Phase graphs (phase -> .onnx path) over a state (name -> numpy array, updated in place by name)."""

    def __init__(self, graphs: dict, state: dict):
        import onnx
        from onnx.reference import ReferenceEvaluator

        self.state = state
        self.sessions, self.inputs, self.outputs = {}, {}, {}
        for phase, path in graphs.items():
            model = onnx.load(str(Path(path)))
            self.inputs[phase] = [i.name for i in model.graph.input]
            self.outputs[phase] = [o.name for o in model.graph.output]
            self.sessions[phase] = ReferenceEvaluator(model, new_ops=plugin_node_ops())

    def run(self, phase: str, **inputs) -> dict:
        """Runs `phase` on `inputs` (name -> array) and the state it reads; writes its state outputs back into
        the state; returns its other outputs by name."""
        feeds = {n: (inputs[n] if n in inputs else self.state[n]) for n in self.inputs[phase]}
        feeds = {n: np.asarray(v) for n, v in feeds.items()}
        results = {}
        for name, value in zip(self.outputs[phase], self.sessions[phase].run(None, feeds)):
            if name.endswith(STATE_OUTPUT_SUFFIX):
                self.state[name[:-len(STATE_OUTPUT_SUFFIX)]] = value
            else:
                results[name] = value
        return results
