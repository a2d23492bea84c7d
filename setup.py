"""Builds the native kernel library with CMake + nvcc and installs it inside the package.

Environment:
    RSSM_CUDA_ARCHS      CUDA architectures for CMake (default "90" = Hopper; e.g. "90;100" adds Blackwell)
    RSSM_SKIP_NATIVE=1   install the pure-Python parts only (no nvcc): CPU references, pools, planner
    RSSM_BUILD_JOBS      parallel compile jobs (default: CPU count)
    RSSM_TENSORRT_INCLUDE_DIR  TensorRT's include/ folder: also builds the TensorRT plugin library
                         (libreplayssm_trt.so) and its host test, installed beside the kernel library
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


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
