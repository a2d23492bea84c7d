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
