"""The TensorRT plugin library's host test (no TensorRT runtime, no GPU): built by the install when
RSSM_TENSORRT_INCLUDE_DIR points at TensorRT's headers, skipped otherwise."""

import subprocess
from pathlib import Path

import pytest

import trtllm_replayssm

HOST_TEST = Path(trtllm_replayssm.__file__).parent / "lib" / "replayssm_trt_host_test"


@pytest.mark.skipif(not HOST_TEST.exists(),
                    reason="TensorRT plugins not built (install with RSSM_TENSORRT_INCLUDE_DIR=<TensorRT include/>)")
def test_plugin_host_checks_pass():
    run = subprocess.run([str(HOST_TEST)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "OK (0 failed checks)" in run.stdout, run.stdout + run.stderr


@pytest.mark.skipif(not HOST_TEST.exists(),
                    reason="TensorRT plugins not built (install with RSSM_TENSORRT_INCLUDE_DIR=<TensorRT include/>)")
def test_python_input_order_matches_the_plugins():
    """trt_plugins.py lists each plugin's inputs by name; the compiled plugins print theirs for the same
    configurations."""
    from trtllm_replayssm.trt_plugins import gdn_decode_inputs, mamba2_decode_inputs

    run = subprocess.run([str(HOST_TEST), "--inputs"], capture_output=True, text=True, timeout=60)
    printed = dict(line.split(": ") for line in run.stdout.strip().splitlines())
    m = dict(has_z=1, has_D=1, has_dt_bias=1, mode=1)
    expected = {
        "mamba2 replay z D dt_bias": mamba2_decode_inputs(m),
        "mamba2 conventional": mamba2_decode_inputs(dict(m, has_z=0, has_D=0, has_dt_bias=0, mode=0)),
        "mamba2 replay z dt_bias": mamba2_decode_inputs(dict(m, has_D=0)),
        "gdn replay": gdn_decode_inputs({"mode": 1}),
        "gdn conventional": gdn_decode_inputs({"mode": 0}),
    }
    assert {k: v.split() for k, v in printed.items()} == expected
