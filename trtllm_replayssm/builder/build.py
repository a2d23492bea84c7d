"""`build`: a model to ONNX phase graphs, TensorRT engines and the files a runtime needs, in one output folder.

    OUT/
      prefill.onnx, decode.onnx (or verify.onnx + commit.onnx)   the phase graphs (export.py); weights in *.data
      <phase>.sm<NN>.engine                                      one engine per phase and SM target
      libreplayssm_trt.so                                        the plugin library the engines need
      model_config.json                                          the model's configuration (as loaded)
      config.json                                                what a runtime needs to drive the engines
      build.log                                                  phases, timings, the builder's warnings

config.json (format 1): the build settings; the state tensors (name, dtype, shape, bytes per slot, layer);
each phase's I/O (names, dtypes, shapes with named dynamic dimensions), its optimisation profile, the state
outputs and the inputs they alias, and its engine per target; the plugins used (names, version, namespace,
library, the SM targets the library holds kernels for); the TensorRT line and version used.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.config import ReplayConfig, dtype_name
from trtllm_replayssm.model_config import load_config
from trtllm_replayssm.network import NetworkError, load_network
from trtllm_replayssm.network.layers import Attention, SsmMixer

from . import engine as engines
from .export import check_settings, export_phases

CONFIG_FORMAT = 1


@dataclasses.dataclass
class BuildSettings:
    buffer_len: int = 16
    state_dtype: str = "fp32"
    act_dtype: str = "bf16"
    read_format: str = "none"
    mode: str = "replay"
    max_batch: int = 8
    max_seq_len: int = 1024
    spec_tokens: int = 0
    targets: list[int] | None = None  # None: engines.default_targets()
    onnx_only: bool = False  # stop after the ONNX graphs (no TensorRT)


def _layers(net, state) -> list[dict]:
    rows = []
    for i, block in enumerate(net.blocks):
        m = block.mixer
        names = [n for n in state.tensors if n.startswith(f"layer{i}.")]
        kind = {"Mamba2Mixer": "mamba2", "GdnMixer": "gdn", "Attention": "attention"}.get(type(m).__name__, "ffn")
        row = {"index": i, "kind": kind, "state": names,
               "bytes_per_slot": sum(state[n][0].numel() * state[n].element_size() for n in names)}
        if isinstance(m, SsmMixer):
            row["shape"] = dataclasses.asdict(m.shape)
        elif isinstance(m, Attention):
            row["shape"] = {"heads": m.heads, "kv_heads": m.kv_heads, "head_dim": m.head_dim}
        rows.append(row)
    return rows


def _plugins_used(graphs) -> list[str]:
    import onnx

    used = set()
    for g in graphs:
        model = onnx.load(str(g.path), load_external_data=False)
        used |= {n.op_type for n in model.graph.node if n.domain == trt_plugins.PLUGIN_NAMESPACE}
    return sorted(used)


def build(model, output: Path, s: BuildSettings, log=print) -> dict:
    """Builds `model` (a bundled config name, a model directory or config.json) into `output` (build settings
    `s`); returns the config.json written. log(line) reports each phase with its timing. Everything that can be
    refused (model, settings, backend, targets) is refused before any file is written."""
    output = Path(output)
    started = time.perf_counter()
    lines = []

    def say(text):
        lines.append(text)
        log(text)

    replay = ReplayConfig(s.buffer_len, s.state_dtype, s.act_dtype, s.read_format)
    replay.validate()
    check_settings(s.mode, s.read_format)
    if s.spec_tokens and s.mode == "replay" and s.buffer_len < 2 * s.spec_tokens:
        raise NetworkError(f"buffer_len={s.buffer_len} is too short for spec_tokens={s.spec_tokens}: the ring must "
                           f"hold 2T records (buffer_len >= {2 * s.spec_tokens})")
    backend = None if s.onnx_only else engines.available_backend()
    targets = list(s.targets or engines.default_targets())
    if backend is not None:
        engines.check_targets(backend, targets)  # the backend's SM list, the plugin library's kernels
    t0 = time.perf_counter()
    net = load_network(model, device="cpu", mode=s.mode, replay=replay, dtype=s.act_dtype)
    state = net.new_state(s.max_batch, s.max_seq_len, s.spec_tokens)  # refuses a shape the pools cannot hold
    say(f"load   {net.name}: {net.model_type}, {len(net.blocks)} layers, {s.mode} "
        f"(L={s.buffer_len}, state {s.state_dtype}, act {s.act_dtype})  {time.perf_counter() - t0:.1f} s")
    output.mkdir(parents=True, exist_ok=True)
    graphs = export_phases(net, s.max_batch, s.max_seq_len, output, spec_tokens=s.spec_tokens,
                           progress=lambda phase, sec: say(f"export {phase}.onnx  {sec:.1f} s"))
    (output / "model_config.json").write_text(json.dumps(load_config(model), indent=2))
    # prompts take at least 2 positions (the runtime pads a 1-token prompt; torch.export traces S >= 2)
    dims = {"batch": (1, s.max_batch, s.max_batch), "tokens": (2, min(128, s.max_seq_len), s.max_seq_len)}
    phases = {}
    for g in graphs:
        phases[g.phase] = {"onnx": g.path.name, "inputs": g.inputs, "outputs": g.outputs, "aliases": g.aliases,
                           "in_place": g.in_place, "profile": engines.profile_shapes(g.inputs, dims), "engines": {}}
    info = {"backend": backend, "version": None, "targets": targets if backend else []}
    if backend is None:
        say("engine skipped: " + ("--onnx-only" if s.onnx_only else
                                  "neither TensorRT nor TensorRT-RTX is installed, the ONNX graphs are written "
                                  "(pip install tensorrt-rtx==1.7.1.116 builds engines for SM 75-89 and 120 "
                                  "without a GPU)"))
    else:
        shutil.copy2(trt_plugins.library_path(), output / "libreplayssm_trt.so")
        for target in targets:
            for g in graphs:
                path = output / f"{g.phase}.sm{target}.engine"
                result = engines.build_engine(backend, g.path, path, target, phases[g.phase]["profile"])
                info["version"] = result["version"]
                phases[g.phase]["engines"][str(target)] = path.name
                say(f"engine {path.name}: {result['bytes'] / 2**20:.1f} MiB  {result['seconds']:.1f} s"
                    + (f"  ({len(result['warnings'])} builder warnings)" if result["warnings"] else ""))
                lines.extend(f"  warning: {w}" for w in result["warnings"])
    config = {
        "format": CONFIG_FORMAT,
        "model": {"name": net.name, "model_type": net.model_type, "vocab_size": net.vocab_size,
                  "eos_token_ids": list(net.eos_token_ids), "config": "model_config.json"},
        "settings": {"mode": s.mode, "buffer_len": s.buffer_len, "state_dtype": s.state_dtype,
                     "act_dtype": s.act_dtype, "read_format": s.read_format, "max_batch": s.max_batch,
                     "num_slots": s.max_batch, "max_seq_len": s.max_seq_len, "spec_tokens": s.spec_tokens},
        "state": [{"name": n, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                   "bytes_per_slot": t[0].numel() * t.element_size()} for n, t in state.tensors.items()],
        "bytes_per_slot": state.bytes_per_slot,
        "layers": _layers(net, state),
        "phases": phases,
        "plugins": {"library": "libreplayssm_trt.so" if backend else None, "namespace": trt_plugins.PLUGIN_NAMESPACE,
                    "version": trt_plugins.PLUGIN_VERSION, "used": _plugins_used(graphs),
                    "cuda_archs": trt_plugins.library_cuda_archs() if backend else []},
        "tensorrt": info,
    }
    (output / "config.json").write_text(json.dumps(config, indent=2))
    say(f"done   {output}  {time.perf_counter() - started:.1f} s")
    (output / "build.log").write_text("\n".join(lines) + "\n")
    return config
