"""The command line on the bundled default config (CPU here; GPU kernels when present)."""

import re

import pytest

from trtllm_replayssm.cli import main
from trtllm_replayssm.model_config import load_config, mamba2_layers


def test_run_on_bundled_config_agrees_with_conventional(capsys):
    assert main(["run", "--steps", "20", "--buffer-len", "4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    err = float(re.search(r"vs conventional .*: ([0-9.e+-]+)", out).group(1))
    assert err < 1e-5, out  # fp32 both ways: differences are summation order only


def test_run_on_a_gdn_config_agrees_with_conventional(capsys):
    assert main(["run", "--config", "qwen3_5_4b", "--steps", "6", "--buffer-len", "2", "--batch", "2",
                 "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "SSM layers (gdn)" in out
    err = float(re.search(r"vs conventional .*: ([0-9.e+-]+)", out).group(1))
    assert err < 1e-5, out  # fp32 both ways: differences are summation order only


def test_bundled_config_layers():
    layers = mamba2_layers(load_config())
    assert [l.index for l in layers] == [0, 2, 4, 6]
    assert layers[0].shape.nheads == 16 and layers[0].shape.dstate == 128


def test_rejects_unknown_model_type():
    with pytest.raises(ValueError, match="model_type=.llama. is not supported"):
        mamba2_layers({"model_type": "llama"})


def test_info_runs(capsys):
    assert main(["info"]) == 0
    assert "head_dim" in capsys.readouterr().out
