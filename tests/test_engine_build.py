"""Real TensorRT-RTX engines (SM89, on a machine without a GPU) of the bundled tiny Nemotron-H and Qwen3.5
models through `trtllm-replayssm build`, replay and conventional, fp32 and a low-precision state; `inspect` on
them; a refused model and a refused shape end in one line before anything is written.

Skipped where TensorRT-RTX or a plugin library compiled for SM89 is missing (the README's install builds both).
"""

import importlib.util
import json

import pytest

from cli_cases import invoke
from trtllm_replayssm import trt_plugins
from trtllm_replayssm.builder.inspect import summary


def _library_has_sm89():
    try:
        return 89 in trt_plugins.library_cuda_archs()
    except (FileNotFoundError, OSError):
        return False


pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorrt_rtx") is None,
                       reason="TensorRT-RTX is not installed (pip install tensorrt-rtx==1.7.1.116)"),
    pytest.mark.skipif(not _library_has_sm89(),
                       reason="no plugin library with SM89 kernels (install with RSSM_TENSORRT=1 RSSM_CUDA_ARCHS=89)"),
]
SMALL = ["--max-batch", "4", "--max-seq-len", "64", "--buffer-len", "4", "--target", "89"]


@pytest.mark.parametrize("model,mode,state", [("nemotron_h_tiny", "replay", "fp32"),
                                              ("nemotron_h_tiny", "conventional", "bf16"),
                                              ("qwen3_5_tiny", "replay", "bf16"),
                                              ("qwen3_5_tiny", "conventional", "fp32")])
def test_build_writes_engines_and_inspect_reads_them(model, mode, state, tmp_path):
    out = tmp_path / "engine"
    code, stdout, err = invoke(["build", "--model", model, "--output", str(out), "--mode", mode,
                                "--state-dtype", state, *SMALL])
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["tensorrt"]["backend"] == "tensorrt_rtx" and config["tensorrt"]["targets"] == [89]
    for phase in ("prefill", "decode"):
        engine = out / config["phases"][phase]["engines"]["89"]
        assert engine.stat().st_size > 1 << 20, engine
        assert f"engine {engine.name}" in stdout
    ssm = "Mamba2" if model.startswith("nemotron") else "Gdn"
    assert set(config["plugins"]["used"]) == {f"ReplaySSM{ssm}Prefill", f"ReplaySSM{ssm}Decode",
                                              "ReplaySSMConv1dPrefill", "ReplaySSMConv1d"}
    assert (out / "libreplayssm_trt.so").is_file() and (out / "build.log").read_text().startswith("load")
    checkpoints = [t for t in config["state"] if t["name"].endswith(".checkpoint")]
    assert checkpoints and all(t["dtype"] == state for t in checkpoints)
    report = summary(out / "decode.sm89.engine")
    assert report["settings"]["mode"] == mode and report["tensorrt"]["targets"] == [89]
    code, text, err = invoke(["inspect", str(out)])
    assert code == 0, err
    kind = "mamba2" if model.startswith("nemotron") else "gdn"
    assert kind in text and f"mode {mode}" in text and "decode.sm89.engine" in text and "SM89" in text


@pytest.mark.parametrize("argv,words", [
    (["--model", "{llama}"], ["model_type='llama' is not supported"]),
    (["--model", "{badhead}"], ["head_dim=96"]),
    (["--target", "90"], ["--target 90", "TensorRT-RTX builds for SM"]),
])
def test_refusals_are_one_line_and_write_nothing(argv, words, tmp_path):
    from cli_cases import fill, paths

    where = paths(tmp_path)
    out = tmp_path / "engine"
    code, stdout, err = invoke(["build", "--output", str(out), *fill(argv, where), *SMALL[:6]])
    assert code == 2 and stdout == "" and len(err.splitlines()) == 1, (code, stdout, err)
    assert all(w in err for w in words), err
    assert not out.exists()
