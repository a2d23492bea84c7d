"""Builds the native kernel library with CMake + nvcc and installs it inside the package.

Environment:
    RSSM_CUDA_ARCHS      CUDA architectures for CMake (default "90" = Hopper; e.g. "90;100" adds Blackwell)
    RSSM_SKIP_NATIVE=1   install the pure-Python parts only (no nvcc): CPU references, pools, planner
    RSSM_BUILD_JOBS      parallel compile jobs (default: CPU count)
    RSSM_TENSORRT_INCLUDE_DIR  TensorRT's include/ folder: also builds the TensorRT plugin library
                         (libreplayssm_trt.so) and its host test, installed beside the kernel library
    RSSM_TENSORRT=1      the same with TensorRT 10.14's headers taken from the kernel-lens wheel (downloaded
                         without dependencies into .cache/, never committed); RSSM_TENSORRT_INCLUDE_DIR wins
"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
HEADERS_WHEEL = "kernel-lens==2.0.1"  # ships TensorRT 10.14.1's NvInfer*.h in kernel_lens/include/tensorrt/
HEADERS_IN_WHEEL = "kernel_lens/include/tensorrt/"


def tensorrt_include_dir():
    """TensorRT's include/ folder for the plugin library: $RSSM_TENSORRT_INCLUDE_DIR, else with RSSM_TENSORRT=1 the
    headers of HEADERS_WHEEL, downloaded once into .cache/tensorrt-headers/; None builds no plugins."""
    if os.environ.get("RSSM_TENSORRT_INCLUDE_DIR"):
        return os.environ["RSSM_TENSORRT_INCLUDE_DIR"]
    if os.environ.get("RSSM_TENSORRT") != "1":
        return None
    cache = ROOT / ".cache" / "tensorrt-headers"
    include = cache / "include"
    if (include / "NvInferRuntime.h").exists():
        return str(include)
    download = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               HEADERS_WHEEL, "-d", str(cache / "wheel")], capture_output=True, text=True)
    wheels = sorted((cache / "wheel").glob("kernel_lens-*.whl"))
    if download.returncode != 0 or not wheels:
        last = (download.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise SystemExit(f"RSSM_TENSORRT=1: downloading {HEADERS_WHEEL} for TensorRT's headers failed ({last}); "
                         "offline, set RSSM_TENSORRT_INCLUDE_DIR to a TensorRT include/ folder instead")
    include.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        for name in wheel.namelist():
            if name.startswith(HEADERS_IN_WHEEL) and name.endswith(".h"):
                (include / name[len(HEADERS_IN_WHEEL):]).write_bytes(wheel.read(name))
    if not (include / "NvInferRuntime.h").exists():
        raise SystemExit(f"RSSM_TENSORRT=1: {wheels[-1].name} holds no {HEADERS_IN_WHEEL}NvInferRuntime.h; "
                         "set RSSM_TENSORRT_INCLUDE_DIR to a TensorRT include/ folder instead")
    return str(include)


class CMakeExtension(Extension):
    def __init__(self, name, source_dir):
        super().__init__(name, sources=[])
        self.source_dir = str(source_dir)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        if os.environ.get("RSSM_SKIP_NATIVE") == "1":
            print("RSSM_SKIP_NATIVE=1: skipping the kernel library")
            return
        build_dir = Path(self.build_temp).resolve() / "native"
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [f"-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={build_dir}"]
        if os.environ.get("RSSM_CUDA_ARCHS"):
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={os.environ['RSSM_CUDA_ARCHS']}")
        include = tensorrt_include_dir()
        if include:
            args.append(f"-DRSSM_TENSORRT_INCLUDE_DIR={include}")
        subprocess.run(["cmake", "-S", ext.source_dir, "-B", str(build_dir), *args], check=True)
        jobs = os.environ.get("RSSM_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build_dir), "--parallel", jobs], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "libreplayssm.so", target)
        # The TensorRT plugin library and its test drivers, when TensorRT's headers were found. They are not Python
        # extensions: copy them beside the kernel library, and into the source tree for editable installs.
        for extra in ("libreplayssm_trt.so", "replayssm_trt_host_test", "replayssm_trt_gpu_test"):
            if (build_dir / extra).exists():
                for folder in {target.parent, ROOT / "trtllm_replayssm" / "lib"}:
                    shutil.copy2(build_dir / extra, folder / extra)

    def get_outputs(self):
        if os.environ.get("RSSM_SKIP_NATIVE") == "1":
            return []
        return super().get_outputs()


setup(
    name="trtllm-replayssm",
    version="0.1.0",
    description="ReplaySSM decode kernels, references, state pools and tools for hybrid SSM LLMs",
    packages=find_packages(include=["trtllm_replayssm*"]),
    package_data={"trtllm_replayssm.configs": ["*.json"]},
    python_requires=">=3.10",
    install_requires=["torch>=2.4", "numpy"],
    extras_require={
        "builder": ["transformers>=5.17,<6"],
        "test": ["pytest", "transformers>=5.17,<6"],
    },
    ext_modules=[CMakeExtension("trtllm_replayssm.lib.libreplayssm", ROOT / "plugins")],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["trtllm-replayssm=trtllm_replayssm.cli:main"]},
)
