"""Every plugin node of the exported tiny graphs, run by the plugin library's enqueue on the GPU with the tensors
the graph gave it, equals the reference (H200 check of builder/export.py).

The tiny Nemotron-H and Qwen3.5 graphs (replay and conventional; prefill + decode, and prefill + verify +
commit) run on the CPU with onnx.reference, recording each plugin node's fields, inputs and reference outputs
(ops/plugin_ops.py). Each recorded node then runs once through replayssm_trt_gpu_test (the plugin created from
the node's fields, enqueue on device copies of the node's inputs): y and every state the plugin updates in place
must match the reference within the kernel tests' tolerances (integers exactly).
"""

import numpy as np
import pytest
import torch

from test_export import MAX_SEQ, NUM_SLOTS, _poisoned_state, _prompt_batch
from test_builder_rewrite import make_model
from test_tensorrt_plugin_gpu import GPU_TEST, TRT_LIB, PluginDriver
from trtllm_replayssm import trt_plugins
from trtllm_replayssm.builder.export import export_phases
from trtllm_replayssm.builder.onnx_runner import OnnxRunner, recording
from trtllm_replayssm.config import ReplayConfig
from trtllm_replayssm.network import HybridLM

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
              pytest.mark.skipif(not (GPU_TEST.exists() and TRT_LIB.exists()),
                                 reason="TensorRT plugins not built (install with RSSM_TENSORRT=1)")]
TOL = 1e-4  # relative to the tensor's largest magnitude: fp32 kernels against the fp32 reference


def _recorded_nodes(name, mode, spec, tmp_path):
    net = HybridLM(make_model(name), mode=mode, replay=ReplayConfig(8, "fp32", "fp32", latency_route_bytes=0))
    graphs = export_phases(net, NUM_SLOTS, MAX_SEQ, tmp_path, spec_tokens=spec)
    runner = OnnxRunner({g.phase: g.path for g in graphs}, _poisoned_state(net, spec))
    ids, lengths, slots = _prompt_batch()
    with recording() as records:
        logits = runner.run("prefill", input_ids=ids, lengths=lengths, slot_idx=slots)["logits"]
        positions = lengths.astype(np.int64)
        tok = logits.argmax(-1)
        for step in range(3):
            if spec:
                window = np.stack([tok] + [(tok + j) % net.vocab_size for j in range(1, spec)], axis=1)
                runner.run("verify", input_ids=window, positions=positions, slot_idx=slots)
                accepted = np.array([1 + (r + step) % spec for r in range(len(slots))], dtype=np.int32)
                runner.run("commit", accepted=accepted, slot_idx=slots)
                positions = positions + accepted
            else:
                tok = runner.run("decode", input_ids=tok, positions=positions, slot_idx=slots)["logits"].argmax(-1)
                positions = positions + 1
    return records


def _close(got, want, what):
    if not want.is_floating_point():
        assert torch.equal(got, want), what
        return
    scale = want.abs().max().clamp(min=1.0)
    err = ((got.float() - want.float()).abs().max() / scale).item()
    assert err < TOL, f"{what}: off the reference by {err:.2e} (relative)"


@pytest.mark.parametrize("spec", [0, 3], ids=["decode", "verify"])
@pytest.mark.parametrize("mode", ["replay", "conventional"])
@pytest.mark.parametrize("name", ["nemotron_h", "qwen3_5"])
def test_every_exported_plugin_node_runs_like_the_reference(name, mode, spec, tmp_path):
    records = _recorded_nodes(name, mode, spec, tmp_path / "graphs")
    assert records
    drv = PluginDriver(tmp_path)  # one driver process for every node: tensors and plugins named per node
    runs = []
    for k, (plugin, fields, inputs, _) in enumerate(records):
        y_like, _written = trt_plugins.plugin_outputs(plugin, fields)
        order = trt_plugins.plugin_inputs(plugin, fields)
        for n in order:
            drv.tensor(f"n{k}.{n}", inputs[n].to("cuda"))
        if y_like is not None:
            drv.tensor(f"n{k}.y", torch.full_like(inputs[y_like], float("nan")).to("cuda"), initial=False)
        drv.plugin(f"p{k}", plugin, fields, [f"n{k}.{n}" for n in order], f"n{k}.y" if y_like is not None else None)
        runs.append(drv.run(f"p{k}"))
    drv.execute()
    for k, (plugin, fields, inputs, outputs) in enumerate(records):
        y_like, written = trt_plugins.plugin_outputs(plugin, fields)
        want = list(outputs)
        live = inputs["slot_idx"] >= 0
        if "lengths" in inputs:  # a prefill writes the prompt's tokens only: [b, S] of live rows, t < length
            S = inputs[y_like].shape[1]
            live = live[:, None] & (torch.arange(S)[None] < inputs["lengths"][:, None])
        if y_like is not None:
            y = drv.out(runs[k], f"n{k}.y").cpu()
            _close(y[live], want.pop(0)[live], f"node {k} {plugin}: y")
        for n, t in zip(written, want):
            _close(drv.final(f"n{k}.{n}").cpu(), t, f"node {k} {plugin}: {n}")
