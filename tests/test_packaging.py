"""Packaging: the sdist holds everything a build needs and no build outputs; the wheel installs one top-level
package; without nvcc the install is the pure-Python package with one warning instead of a CMake error."""

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("build", reason="needs the 'build' package (the [test] extra)")


def test_sdist_holds_the_native_tree_and_no_build_outputs(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--skip-dependency-check", "-o", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (sdist,) = tmp_path.glob("trtllm_replayssm-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
    for needed in ("setup.py", "pyproject.toml", "README.md", "plugins/CMakeLists.txt", "plugins/capi/replayssm.h",
                   "plugins/capi/mamba2_instance.cu.in" if (ROOT / "plugins/capi/mamba2_instance.cu.in").exists()
                   else "plugins/capi/mamba2_decode_instance.cu.in",
                   "plugins/include/replayssm/mamba2/decode.cuh", "plugins/tensorrt/entry.cpp",
                   "trtllm_replayssm/configs/nemotron_h_tiny.json", "trtllm_replayssm/network/model.py"):
        assert needed in names, f"sdist lacks {needed}"
    bad = [n for n in names if n.endswith((".so", ".pyc", ".o")) or n.startswith((".cache", "build/"))
           or "__pycache__" in n]
    assert not bad, f"sdist holds build outputs: {bad[:5]}"


def test_without_nvcc_the_wheel_is_pure_python_with_one_warning(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CUDA_HOME", "CUDA_PATH", "RSSM_SKIP_NATIVE")}
    env["PATH"] = str(Path(sys.executable).parent)  # no nvcc on it
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w",
                        str(tmp_path), str(ROOT)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = r.stdout + r.stderr
    assert "nvcc not found" in out and "CMake Error" not in out
    (wheel,) = tmp_path.glob("trtllm_replayssm-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"trtllm_replayssm", "trtllm_replayssm-0.1.0.dist-info"}, tops  # no generic top-level module
    assert "trtllm_replayssm/builder/rewrite.py" in names
    assert not [n for n in names if n.endswith(".so")]
