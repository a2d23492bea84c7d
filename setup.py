"""Builds the native kernel library with CMake + nvcc and installs it inside the package (the project's metadata and
dependencies are in pyproject.toml). Without nvcc the install is the pure-Python package, with one warning.

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
    # pip's isolated build environment hides the interpreter's own packages (pip among them) through PYTHONPATH
    # and a sitecustomize: the download runs in the interpreter's plain environment.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    download = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               HEADERS_WHEEL, "-d", str(cache / "wheel")], capture_output=True, text=True, env=env)
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


def find_nvcc():
    """nvcc from PATH, $CUDACXX or $CUDA_HOME / $CUDA_PATH; None when there is none."""
    candidates = [shutil.which("nvcc"), os.environ.get("CUDACXX")]
    candidates += [str(Path(os.environ[v]) / "bin" / "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def native_build():
    """Whether to build the kernel library; says why not (one line) when it does not."""
    if os.environ.get("RSSM_SKIP_NATIVE") == "1":
        print("trtllm-replayssm: RSSM_SKIP_NATIVE=1: installing the pure-Python package (no kernel library)")
        return False
    if find_nvcc() is None:
        print("trtllm-replayssm: WARNING: nvcc not found (PATH, CUDACXX, CUDA_HOME): installing the pure-Python "
              "package without the kernel library (PyTorch references only; GPU tests will skip). Install the CUDA "
              "toolkit and reinstall to build the kernels, or set RSSM_SKIP_NATIVE=1 to silence this.",
              file=sys.stderr)
        return False
    return True


class CMakeExtension(Extension):
    def __init__(self, name, source_dir):
        super().__init__(name, sources=[])
        self.source_dir = str(source_dir)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = Path(self.build_temp).resolve() / "native"
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [f"-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={build_dir}"]
        archs = os.environ.get("RSSM_CUDA_ARCHS") or "90"
        args.append(f"-DCMAKE_CUDA_ARCHITECTURES={archs}")
        args.append(f"-DCMAKE_CUDA_COMPILER={find_nvcc()}")
        include = tensorrt_include_dir()
        if include:
            args.append(f"-DRSSM_TENSORRT_INCLUDE_DIR={include}")
        jobs = os.environ.get("RSSM_BUILD_JOBS", str(os.cpu_count() or 2))
        n_arch = len([a for a in archs.split(";") if a])
        minutes = 10 * n_arch * (2 if include else 1) / max(int(jobs), 1)
        print(f"trtllm-replayssm: building the kernel library{' and the TensorRT plugins' if include else ''} for "
              f"CUDA architectures {archs} with {jobs} jobs: about {minutes:.0f} minutes (RSSM_CUDA_ARCHS picks the "
              "architectures, RSSM_SKIP_NATIVE=1 skips the build)", file=sys.stderr, flush=True)
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            args += ["-G", "Ninja"]  # a build folder keeps the generator it was configured with
        subprocess.run(["cmake", "-S", ext.source_dir, "-B", str(build_dir), *args], check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--parallel", jobs], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "libreplayssm.so", target)
        # The TensorRT plugin library and its test drivers, when TensorRT's headers were found. They are not Python
        # extensions: copy them beside the kernel library, and into the source tree for editable installs.
        for extra in ("libreplayssm_trt.so", "replayssm_trt_host_test", "replayssm_trt_gpu_test"):
            if (build_dir / extra).exists():
                for folder in {target.parent, ROOT / "trtllm_replayssm" / "lib"}:
                    shutil.copy2(build_dir / extra, folder / extra)


setup(
    packages=find_packages(include=["trtllm_replayssm*"]),
    package_data={"trtllm_replayssm.configs": ["*.json"]},
    ext_modules=[CMakeExtension("trtllm_replayssm.lib.libreplayssm", ROOT / "plugins")] if native_build() else [],
    cmdclass={"build_ext": CMakeBuild},
)
