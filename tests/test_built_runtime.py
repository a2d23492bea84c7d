"""The runtime over a `build` output folder (runtime/built.py): with the ONNX executor (the phase graphs through
onnx.reference, plugin nodes by the project's ops) the engine loop generates the PyTorch runtime's tokens for the
same model, prompts of different lengths (one of a single token) in flight together; released slots are zeroed.
The TensorRT executor needs TensorRT on a GPU it supports."""

import importlib.util

import pytest
import torch

pytest.importorskip("onnxscript")

from cli_cases import invoke  # noqa: E402
from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.runtime import Engine  # noqa: E402
from trtllm_replayssm.runtime.built import BuiltModel, BuiltRunner  # noqa: E402
from trtllm_replayssm.runtime.request import SamplingParams  # noqa: E402

PROMPTS = [[5, 6, 7], [1], [9, 8, 7, 6, 5, 4], [300, 2]]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "engine"
    code, _, err = invoke(["build", "--model", "nemotron_h_tiny", "--output", str(out), "--onnx-only",
                           "--max-batch", "3", "--max-seq-len", "32", "--buffer-len", "4", "--act-dtype", "fp32"])
    assert code == 0, err
    return out


def test_built_graphs_generate_the_pytorch_runtimes_tokens(build_dir):
    built = Engine.from_build(build_dir, executor="onnx")
    eager = Engine.create("nemotron_h_tiny", max_batch=3, max_seq_len=32, replay=ReplayConfig(buffer_len=4),
                          dtype="fp32")
    params = SamplingParams(max_tokens=7, ignore_eos=True)
    try:
        got, want = built.generate(PROMPTS, params), eager.generate(PROMPTS, params)
    finally:
        built.stop()
        eager.stop()
    assert got == want and all(len(t) == 7 for t in got)
    assert built.max_batch == 3 and built.net.vocab_size == 1024


def test_release_zeroes_the_slots_rows(build_dir):
    runner = BuiltRunner(BuiltModel(build_dir), executor="onnx")
    runner.prefill([[1, 2, 3], [4, 5]], [0, 2])
    state = runner.exec.runner.state
    assert any(t[2].any() for n, t in state.items() if n.endswith(".checkpoint"))
    runner.release([2])
    assert not any(t[2].any() for t in state.values())
    assert any(t[0].any() for n, t in state.items() if n.endswith(".checkpoint"))


def test_unknown_executor_missing_or_malformed_build_and_low_precision_are_refused(build_dir, tmp_path):
    import json
    import shutil

    with pytest.raises(ValueError, match="executor='cuda'"):
        BuiltRunner(BuiltModel(build_dir), executor="cuda")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        BuiltModel(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model": {"name": "x"}}))
    with pytest.raises(ValueError, match="malformed"):
        BuiltModel(tmp_path)
    bf16 = tmp_path / "bf16"
    shutil.copytree(build_dir, bf16)
    config = json.loads((bf16 / "config.json").read_text())
    config["state"][0]["dtype"] = "bf16"
    (bf16 / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="fp32 builds only"):
        BuiltRunner(BuiltModel(bf16), executor="onnx")
    if importlib.util.find_spec("uvicorn") is not None:  # serve checks its extra before loading the build
        code, out, err = invoke(["serve", "--engine", str(bf16), "--executor", "onnx"])
        assert code == 2 and "fp32 builds only" in err and len(err.splitlines()) == 1, err


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is None or not torch.cuda.is_available(),
                    reason="needs TensorRT (10.x / 11.x) and a CUDA device it supports")
def test_tensorrt_executor_refuses_a_build_without_an_engine_for_this_gpu(build_dir):
    with pytest.raises(ValueError, match="no prefill engine for this GPU"):
        Engine.from_build(build_dir, executor="tensorrt")
