"""Running tritonserver with the Python backend: where the server and backend come from, and the environment the
backend's stub needs.

A system `tritonserver` (e.g. NVIDIA's Triton container) is used when it is on PATH; otherwise the one bundled in
the `nvidia-pytriton` wheel (the `[triton]` extra), whose Python backend is assembled into a backend folder: the
backend library, its utilities and the stub built for this Python. The stub runs `model.py` with the `python3`
first on PATH and takes its packages from that interpreter's environment (it ignores PYTHONPATH): PATH starts
with this interpreter's folder, so the stub sees the same packages (torch, this project) as the caller, and the
interpreter's libpython folder goes on LD_LIBRARY_PATH. That environment needs numpy < 2 (with numpy 2 the
bundled backend returns empty outputs); the `[triton]` extra pins it through nvidia-pytriton.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


class TritonUnavailable(RuntimeError):
    """No tritonserver can be run here; the message says what to install."""


@dataclass
class TritonServer:
    binary: Path
    backend_dir: Path | None  # None: the system installation's own backends
    env: dict

    def command(self, repo: Path, http_port: int, grpc_port: int, metrics_port: int, explicit: bool = False,
                load: list | None = None) -> list:
        cmd = [str(self.binary), f"--model-repository={repo}", f"--http-port={http_port}",
               f"--grpc-port={grpc_port}", f"--metrics-port={metrics_port}", "--log-verbose=0",
               "--exit-timeout-secs=10"]
        if self.backend_dir is not None:
            cmd.append(f"--backend-directory={self.backend_dir}")
        if explicit:
            cmd.append("--model-control-mode=explicit")
            cmd += [f"--load-model={m}" for m in (load or [])]
        return cmd

    def start(self, *args, log=None, **kw) -> subprocess.Popen:
        """Starts the server; its output goes to `log` (an open file), else to a pipe the caller must drain (an
        undrained pipe fills and stalls the server)."""
        return subprocess.Popen(self.command(*args, **kw), env=self.env, stdout=log or subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)


def _check_numpy() -> None:
    import numpy

    if int(numpy.__version__.split(".")[0]) >= 2:
        raise TritonUnavailable(f"the Python backend needs numpy < 2 in this environment (found {numpy.__version__}); "
                                "pip install '.[triton]' pins it")


def find_server(cache: Path | None = None) -> TritonServer:
    """A runnable tritonserver with the Python backend, and its environment."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
    system = shutil.which("tritonserver")
    if system:
        return TritonServer(Path(system), None, env)
    # Located, not imported: importing pytriton loads its client stack, which the server does not need.
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonUnavailable("no tritonserver on PATH and nvidia-pytriton is not installed: "
                                "pip install '.[triton]'")
    _check_numpy()
    package = Path(list(spec.submodule_search_locations)[0])
    root = package / "tritonserver"
    stub = root / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}" / \
        "triton_python_backend_stub"
    if not stub.exists():
        raise TritonUnavailable(f"nvidia-pytriton has no Python backend stub for Python "
                                f"{sys.version_info.major}.{sys.version_info.minor}")
    cache = cache or Path.home() / ".cache" / "trtllm-replayssm" / "triton"
    backend = cache / f"backends-py{sys.version_info.major}{sys.version_info.minor}"
    python = backend / "python"
    python.mkdir(parents=True, exist_ok=True)
    for src in (root / "backends" / "python" / "libtriton_python.so",
                root / "backends" / "python" / "triton_python_backend_utils.py", stub):
        dst = python / src.name
        if not dst.exists():
            dst.symlink_to(src)
    libs = package.parent / "nvidia_pytriton.libs"
    if libs.is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join([env["LD_LIBRARY_PATH"], str(libs)])
    return TritonServer(root / "bin" / "tritonserver", backend, env)
