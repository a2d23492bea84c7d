"""TensorRT engines from the exported phase graphs: one engine per (phase, SM target), built by TensorRT's ONNX
parser with the plugin library, in a child process.

Backends, in order: `tensorrt` (TensorRT 10.x / 11.x: builds for the GPU of this machine) when importable, else
`tensorrt_rtx` (TensorRT-RTX: builds for any of its SM targets on a machine without a GPU, not for SM90). A
child process builds each engine: TensorRT-RTX's parser finds its library through LD_LIBRARY_PATH, which a
process reads when it starts (trt_plugins.prepare_tensorrt_rtx), and a crash in a builder takes only the child.

    python -m trtllm_replayssm.builder.engine REQUEST.json   # what build_engine() runs; prints a JSON result
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from trtllm_replayssm import trt_plugins

BACKENDS = trt_plugins.TENSORRT_MODULES
RTX_TARGETS = (75, 80, 86, 89, 120, 121)  # TensorRT-RTX's ComputeCapability choices
DEFAULT_TARGET = 89


class EngineBuildError(RuntimeError):
    """TensorRT refused the graph; the message holds the builder's errors."""


def available_backend() -> str | None:
    """The first of BACKENDS that can build here, or None: `tensorrt` builds for the local GPU (none: skipped)."""
    import torch

    for name in BACKENDS:
        if importlib.util.find_spec(name) is None or (name == "tensorrt" and not torch.cuda.is_available()):
            continue
        return name
    return None


def default_targets() -> list[int]:
    """The local GPU's SM (e.g. [90] on an H200), else [DEFAULT_TARGET]."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return [10 * major + minor]
    return [DEFAULT_TARGET]


def check_targets(backend: str, targets: list[int]) -> None:
    """Refuses targets the backend cannot build for, or the plugin library has no kernels for (naming the build
    option that adds them)."""
    if backend == "tensorrt_rtx":
        bad = [t for t in targets if t not in RTX_TARGETS]
        if bad:
            raise ValueError(f"--target {','.join(map(str, bad))}: TensorRT-RTX builds for SM "
                             f"{', '.join(map(str, RTX_TARGETS))} only")
    elif backend == "tensorrt":
        local = default_targets()
        bad = [t for t in targets if t not in local]
        if bad:
            raise ValueError(f"--target {','.join(map(str, bad))}: TensorRT builds for the GPU of this machine "
                             f"(SM {local[0]}); build on a machine with that GPU")
    trt_plugins.check_targets(targets)


def profile_shapes(inputs: list[dict], dims: dict[str, tuple[int, int, int]]) -> dict:
    """(min, opt, max) shapes of every input with a named (dynamic) dimension: dims maps a name to its range."""
    shapes = {}
    for i in inputs:
        if any(isinstance(d, str) for d in i["shape"]):
            shapes[i["name"]] = [[dims[d][k] if isinstance(d, str) else d for d in i["shape"]] for k in range(3)]
    return shapes


def build_engine(backend: str, onnx_path: Path, engine_path: Path, target: int, profile: dict,
                 timeout: float = 3600) -> dict:
    """Builds one engine in a child process; returns {"bytes", "seconds", "version", "warnings"}."""
    request = {"backend": backend, "onnx": str(onnx_path), "engine": str(engine_path), "target": int(target),
               "profile": profile, "library": str(trt_plugins.library_path())}
    env = dict(os.environ)
    if backend == "tensorrt_rtx":
        folder = trt_plugins.prepare_tensorrt_rtx()
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(folder or ""), env.get("LD_LIBRARY_PATH")]))
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(request, f)
    try:
        run = subprocess.run([sys.executable, "-m", "trtllm_replayssm.builder.engine", f.name], capture_output=True,
                             text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise EngineBuildError(f"{onnx_path.name} (SM{target}): the builder ran past {timeout:.0f} s") from None
    finally:
        os.unlink(f.name)
    lines = run.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (run.stderr or run.stdout).strip().splitlines()[-5:]
        raise EngineBuildError(f"the {backend} builder ended with status {run.returncode}: {' | '.join(tail)}") from None
    if result.get("errors"):
        raise EngineBuildError(f"{onnx_path.name} (SM{target}): {' | '.join(result['errors'][:3])}")
    return result


def _child(request: dict) -> dict:
    """Runs in the child process: parse, configure, build, write the engine."""
    import time

    trt = importlib.import_module(request["backend"])
    messages = {"errors": [], "warnings": []}

    class Logger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            if severity <= trt.ILogger.Severity.ERROR:
                messages["errors"].append(msg)
            elif severity == trt.ILogger.Severity.WARNING:
                messages["warnings"].append(msg)

    start = time.perf_counter()
    logger = Logger()
    builder = trt.Builder(logger)
    builder.get_plugin_registry().load_library(request["library"])
    network = trt_plugins.create_network(builder, trt=trt)
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(request["onnx"])
    messages["errors"] += [str(parser.get_error(i)) for i in range(parser.num_errors)]
    if not ok:
        return messages
    config = builder.create_builder_config()
    trt_plugins.enable_aliased_io(config, trt=trt)
    if request["profile"]:  # dynamic inputs: their (min, opt, max) shapes
        profile = builder.create_optimization_profile()
        for name, (lo, opt, hi) in request["profile"].items():
            profile.set_shape(name, lo, opt, hi)
        config.add_optimization_profile(profile)
    if trt_plugins.is_tensorrt_rtx(trt):
        config.num_compute_capabilities = 1
        config.set_compute_capability(getattr(trt.ComputeCapability, f"SM{request['target']}"), 0)
    if hasattr(config, "plugins_to_serialize"):  # the library travels inside the engine where the line can
        config.plugins_to_serialize = [request["library"]]
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        messages["errors"].append(messages["errors"] and messages["errors"][-1] or "the builder returned no engine")
        return messages
    data = bytes(engine)
    Path(request["engine"]).write_bytes(data)
    return dict(messages, bytes=len(data), seconds=time.perf_counter() - start, version=trt.__version__,
                serialized_library=hasattr(config, "plugins_to_serialize"))


if __name__ == "__main__":
    try:
        out = _child(json.loads(Path(sys.argv[1]).read_text()))
    except Exception as e:  # reported to the parent as the build's error
        out = {"errors": [f"{type(e).__name__}: {e}"]}
    print(json.dumps(out))
