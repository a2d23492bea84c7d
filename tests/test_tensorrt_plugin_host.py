"""The TensorRT plugin library's host test (no TensorRT runtime, no GPU): built by the install when
RSSM_TENSORRT_INCLUDE_DIR points at TensorRT's headers (or found beside $RSSM_LIBRARY in a CMake build folder),
skipped otherwise."""

import subprocess

import pytest

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig

HOST_TEST = trt_plugins.native_dir() / "replayssm_trt_host_test"
pytestmark = pytest.mark.skipif(not HOST_TEST.exists(), reason="TensorRT plugins not built (install with "
                                                               "RSSM_TENSORRT_INCLUDE_DIR=<TensorRT include/>)")


def test_plugin_host_checks_pass():
    run = subprocess.run([str(HOST_TEST)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "OK (0 failed checks)" in run.stdout, run.stdout + run.stderr


def test_python_input_order_matches_the_plugins():
    """trt_plugins.py lists each plugin's inputs by name; the compiled plugins print theirs for the same
    configurations (plugins/tensorrt/tests/host_test.cpp, print_all_inputs)."""
    run = subprocess.run([str(HOST_TEST), "--inputs"], capture_output=True, text=True, timeout=60)
    printed = dict(line.split(": ") for line in run.stdout.strip().splitlines())
    m = dict(has_z=1, has_D=1, has_dt_bias=1, mode=1)
    m_shape, g_shape, cfg = Mamba2LayerShape(8, 64, 64, 2), GdnLayerShape(2, 4, 64, 64), ReplayConfig(16)
    expected = {
        "mamba2 replay z D dt_bias": trt_plugins.mamba2_decode_inputs(m),
        "mamba2 conventional": trt_plugins.mamba2_decode_inputs(dict(m, has_z=0, has_D=0, has_dt_bias=0, mode=0)),
        "mamba2 replay z dt_bias": trt_plugins.mamba2_decode_inputs(dict(m, has_D=0)),
        "gdn replay": trt_plugins.gdn_decode_inputs({"mode": 1}),
        "gdn conventional": trt_plugins.gdn_decode_inputs({"mode": 0}),
        "mamba2 verify replay z D dt_bias": trt_plugins.mamba2_verify_inputs(
            trt_plugins.mamba2_verify_fields(m_shape, cfg, 4)),
        "mamba2 verify snapshot D dt_bias": trt_plugins.mamba2_verify_inputs(
            trt_plugins.mamba2_verify_fields(m_shape, cfg, 4, mode="snapshot", has_z=False)),
        "gdn verify replay": trt_plugins.gdn_verify_inputs(trt_plugins.gdn_verify_fields(g_shape, cfg, 4)),
        "gdn verify snapshot": trt_plugins.gdn_verify_inputs(
            trt_plugins.gdn_verify_fields(g_shape, cfg, 4, mode="snapshot")),
        "spec commit": trt_plugins.spec_commit_inputs(trt_plugins.spec_commit_fields(m_shape, cfg, 4)),
        "snapshot commit": trt_plugins.snapshot_commit_inputs(trt_plugins.snapshot_commit_fields(cfg, 4)),
        "conv1d update bias": trt_plugins.conv1d_inputs(trt_plugins.conv1d_fields(64)),
        "conv1d verify": trt_plugins.conv1d_inputs(
            trt_plugins.conv1d_fields(64, mode="verify", num_tokens=4, has_bias=False)),
        "conv1d commit": trt_plugins.conv1d_inputs(trt_plugins.conv1d_fields(64, mode="commit", num_tokens=4)),
        "mamba2 prefill replay z D dt_bias": trt_plugins.mamba2_prefill_inputs(
            trt_plugins.mamba2_prefill_fields(m_shape, cfg)),
        "mamba2 prefill conventional D dt_bias": trt_plugins.mamba2_prefill_inputs(
            trt_plugins.mamba2_prefill_fields(m_shape, cfg, mode="conventional", has_z=False)),
        "gdn prefill replay": trt_plugins.gdn_prefill_inputs(trt_plugins.gdn_prefill_fields(g_shape, cfg)),
        "gdn prefill conventional": trt_plugins.gdn_prefill_inputs(
            trt_plugins.gdn_prefill_fields(g_shape, cfg, mode="conventional")),
        "conv1d prefill": trt_plugins.conv1d_prefill_inputs(trt_plugins.conv1d_prefill_fields(64, has_bias=False)),
    }
    assert {k: v.split() for k, v in printed.items()} == expected


def test_library_records_its_cuda_archs_and_refuses_other_targets():
    """The build writes CMake's CUDA architectures into the library (rssm_trt_cuda_archs); a target outside them is
    refused, naming the build option that adds it."""
    archs = trt_plugins.library_cuda_archs()
    assert archs and all(isinstance(a, int) and 50 <= a < 1000 for a in archs)
    trt_plugins.check_targets(archs)
    other = next(a for a in (120, 121, 100, 89, 80) if a not in archs)
    with pytest.raises(ValueError, match=rf"not SM \[{other}\]: rebuild it with RSSM_CUDA_ARCHS=\".*{other}"):
        trt_plugins.check_targets([archs[0], other])
