"""TensorRT side of the plugins in libreplayssm_trt.so: load them into a plugin registry and add their layers to
a network. The TensorRT module is imported lazily (an optional dependency): every function takes it as
`trt=None` and then uses `tensorrt_module()`: `tensorrt` (TensorRT 10.x / 11.x) when importable, else
`tensorrt_rtx` (TensorRT-RTX, whose network API has no plugin layer: ONNX custom nodes are its route, see
`onnx_plugin_node`), with a clear error naming what to install when neither is.

    import tensorrt as trt
    builder = trt.Builder(logger)
    load_plugins(builder.get_plugin_registry())
    network = create_network(builder)
    y, *pool = add_mamba2_decode(network, {"x": x, "dt": dt, ...}, shape, ReplayConfig(16))
    config = builder.create_builder_config(); enable_aliased_io(config)

Speculative decoding: `add_mamba2_verify` / `add_gdn_verify` (T tokens per row, ReplaySSM or the snapshot path),
then, once the accepted counts are known (a device int32 tensor), `add_spec_commit` (ReplaySSM: the cursor) or
`add_snapshot_commit` (snapshot path: the state), and `add_conv1d(mode="verify")` / `add_conv1d(mode="commit")`
for the conv in front of the mixer. The context phase: `add_mamba2_prefill` / `add_gdn_prefill` and
`add_conv1d_prefill` (a prompt of S tokens per row into the rows' slots, docs/prefill.md).

Inputs are passed by name; the order each plugin expects (`*_inputs(fields)`) mirrors the plugins' tables, and a
test checks it against the compiled library. docs/tensorrt_plugins.md has the I/O contract of each plugin.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import importlib.util
import os
import re
from pathlib import Path

import numpy as np

from trtllm_replayssm.config import DTYPE_CODES, GdnLayerShape, Mamba2LayerShape, ReplayConfig, parse_dtype
from trtllm_replayssm.pool import latency_route_limit

PLUGIN_NAMESPACE = "trtllm_replayssm"
PLUGIN_VERSION = "1"
MAMBA2_DECODE = "ReplaySSMMamba2Decode"
GDN_DECODE = "ReplaySSMGdnDecode"
MAMBA2_VERIFY = "ReplaySSMMamba2Verify"
GDN_VERIFY = "ReplaySSMGdnVerify"
SPEC_COMMIT = "ReplaySSMSpecCommit"
SNAPSHOT_COMMIT = "ReplaySSMSnapshotCommit"
CONV1D = "ReplaySSMConv1d"
CONV1D_MODES = {"update": 0, "verify": 1, "commit": 2}  # rssm_conv1d_mode
MAMBA2_PREFILL = "ReplaySSMMamba2Prefill"
GDN_PREFILL = "ReplaySSMGdnPrefill"
CONV1D_PREFILL = "ReplaySSMConv1dPrefill"


TENSORRT_MODULES = ("tensorrt", "tensorrt_rtx")  # in the order tensorrt_module() tries them


def tensorrt_module(trt=None):
    """The TensorRT module every function here uses: `trt` when given, else the first of TENSORRT_MODULES that
    imports (TensorRT-RTX prepared by `prepare_tensorrt_rtx`)."""
    if trt is not None:
        return trt
    for name in TENSORRT_MODULES:
        try:
            if name == "tensorrt_rtx":
                prepare_tensorrt_rtx()
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("the TensorRT plugins need the `tensorrt` Python package (TensorRT 10.x / 11.x) or "
                      "TensorRT-RTX (`pip install tensorrt-rtx==1.7.1.116`), neither is importable; the kernels are "
                      "usable without them through trtllm_replayssm.ops")


def is_tensorrt_rtx(trt) -> bool:
    return getattr(trt, "__name__", "").startswith("tensorrt_rtx")


def prepare_tensorrt_rtx(cache_dir: Path | None = None) -> Path | None:
    """TensorRT-RTX's ONNX parser dlopens the unversioned libtensorrt_rtx.so, which its wheel does not ship: links it
    to the .so.1 in `cache_dir` (default ~/.cache/trtllm_replayssm/tensorrt_rtx) and puts that folder on
    LD_LIBRARY_PATH. The dynamic loader reads LD_LIBRARY_PATH when a process starts: the parser finds the link in
    child processes started after this call (or any process started with that folder on it), not in this one.
    Returns the folder (None when TensorRT-RTX is not installed)."""
    spec = importlib.util.find_spec("tensorrt_rtx_libs")
    if spec is None or not spec.submodule_search_locations:
        return None
    lib = Path(list(spec.submodule_search_locations)[0]) / "libtensorrt_rtx.so.1"
    if not lib.exists():
        return None
    folder = Path(cache_dir or Path.home() / ".cache" / "trtllm_replayssm" / "tensorrt_rtx")
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "libtensorrt_rtx.so"
    if not link.exists() or link.resolve() != lib.resolve():
        tmp = folder / f".libtensorrt_rtx.so.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(lib)
        tmp.replace(link)  # atomic: concurrent processes never see a missing link
    paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if str(folder) not in paths:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([str(folder), *paths])
    return folder


def native_dir() -> Path:
    """The folder of the native binaries: beside $RSSM_LIBRARY when it is set (a CMake build folder holds
    libreplayssm.so, libreplayssm_trt.so and the plugin test drivers together), else the package's lib/."""
    if os.environ.get("RSSM_LIBRARY"):
        return Path(os.environ["RSSM_LIBRARY"]).resolve().parent
    return Path(__file__).resolve().parent / "lib"


def library_path() -> Path:
    """libreplayssm_trt.so (built when RSSM_TENSORRT_INCLUDE_DIR was set at install)."""
    path = native_dir() / "libreplayssm_trt.so"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: reinstall with RSSM_TENSORRT=1 (or "
                                "RSSM_TENSORRT_INCLUDE_DIR=<TensorRT include/>)")
    return path


def library_cuda_archs(path: Path | str | None = None) -> list[int]:
    """The SM architectures the plugin library holds kernels for (its rssm_trt_cuda_archs(), set by the build's
    RSSM_CUDA_ARCHS), e.g. [89, 90]; reads the library without a GPU."""
    lib = ctypes.CDLL(str(path or library_path()))
    query = lib.rssm_trt_cuda_archs
    query.restype = ctypes.c_char_p
    return sorted({int(m.group()) for arch in query().decode().split(",") if (m := re.match(r"\d+", arch.strip()))})


def check_targets(targets, path: Path | str | None = None) -> None:
    """Refuses SM targets (e.g. [89, 90]) the plugin library has no kernels for: an engine for one would build but
    fail at its first launch."""
    held = library_cuda_archs(path)
    missing = [int(t) for t in targets if int(t) not in held]
    if missing:
        wanted = ";".join(str(a) for a in sorted(set(held) | set(missing)))
        raise ValueError(f"the plugin library {path or library_path()} holds kernels for SM {held}, not SM {missing}: "
                         f"rebuild it with RSSM_CUDA_ARCHS=\"{wanted}\"")


def onnx_plugin_node(plugin_name: str, fields: dict, inputs: list[str], outputs: list[str], name: str | None = None):
    """The ONNX node the TensorRT ONNX parser turns into plugin `plugin_name` (the route of TensorRT-RTX, whose
    network API has no plugin layer): op type = plugin name, the fields as int attributes, plus plugin_version
    and plugin_namespace. `inputs` in the plugin's order (`*_inputs(fields)`); `outputs`: y (when the plugin has
    one), then one name per in-place buffer."""
    from onnx import helper

    return helper.make_node(plugin_name, list(inputs), list(outputs), name=name or plugin_name,
                            plugin_version=PLUGIN_VERSION, plugin_namespace=PLUGIN_NAMESPACE,
                            **{k: int(v) for k, v in fields.items()})


def load_plugins(registry=None, trt=None):
    """Loads the plugin library into `registry` (the global plugin registry by default); returns its handle."""
    trt = tensorrt_module(trt)
    registry = registry if registry is not None else trt.get_plugin_registry()
    return registry.load_library(str(library_path()))


# ---- fields and inputs, per plugin (mirrors the tables in plugins/tensorrt/*_plugin*.cpp) ----
def mamba2_decode_fields(shape: Mamba2LayerShape, cfg: ReplayConfig, *, mode: str = "replay", has_z=True,
                         has_D=True, has_dt_bias=True, dt_softplus=True, pad_slot_id=-1) -> dict[str, int]:
    _check_mode(mode)
    return {"nheads": shape.nheads, "head_dim": shape.head_dim, "dstate": shape.dstate, "ngroups": shape.ngroups,
            "buffer_len": cfg.buffer_len, "mode": int(mode == "replay"),
            "state_dtype": DTYPE_CODES[cfg.state_dtype], "act_dtype": DTYPE_CODES[cfg.act_dtype],
            "has_z": int(has_z), "has_D": int(has_D), "has_dt_bias": int(has_dt_bias),
            "dt_softplus": int(dt_softplus), "pad_slot_id": pad_slot_id,
            # the latency route (config.py), in KiB; the ops' pools resolve the same limit
            "latency_route_kib": latency_route_limit(shape, cfg) // 1024 if mode == "replay" else 0}


def mamba2_decode_inputs(fields: dict) -> list[str]:
    names = ["x", "dt", "B", "C"] + (["z"] if fields["has_z"] else []) + ["A"]
    names += (["D"] if fields["has_D"] else []) + (["dt_bias"] if fields["has_dt_bias"] else [])
    names += ["slot_idx", "state"]
    return names + (["ring_x", "ring_B", "ring_dt", "cursor"] if fields["mode"] == 1 else [])


def gdn_decode_fields(shape: GdnLayerShape, cfg: ReplayConfig, *, mode: str = "replay", pad_slot_id=-1) -> dict:
    _check_mode(mode)
    if shape.per_channel_decay:
        raise ValueError("KDA (per_channel_decay) has no plugin yet")
    return {"num_k_heads": shape.num_k_heads, "num_v_heads": shape.num_v_heads, "head_k_dim": shape.head_k_dim,
            "head_v_dim": shape.head_v_dim, "buffer_len": cfg.buffer_len, "mode": int(mode == "replay"),
            "state_dtype": DTYPE_CODES[cfg.state_dtype], "act_dtype": DTYPE_CODES[cfg.act_dtype],
            "pad_slot_id": pad_slot_id,
            # the latency route (config.py), in KiB; the ops' pools resolve the same limit
            "latency_route_kib": latency_route_limit(shape, cfg) // 1024 if mode == "replay" else 0}


def gdn_decode_inputs(fields: dict) -> list[str]:
    names = ["q", "k", "v", "g", "beta", "slot_idx", "state"]
    return names + (["ring_u", "ring_k", "ring_g", "cursor"] if fields["mode"] == 1 else [])


def mamba2_verify_fields(shape: Mamba2LayerShape, cfg: ReplayConfig, window: int, *, mode: str = "replay",
                         has_z=True, has_D=True, has_dt_bias=True, dt_softplus=True, pad_slot_id=-1) -> dict:
    """Fields of the speculative verify of `window` (T) tokens per row; mode "replay" or "snapshot"."""
    _check_mode(mode, ("replay", "snapshot"))
    # the latency route is a standard decode setting (the verify has its own flush rule): not resolved here
    fields = mamba2_decode_fields(shape, dataclasses.replace(cfg, latency_route_bytes=0), has_z=has_z, has_D=has_D,
                                  has_dt_bias=has_dt_bias, dt_softplus=dt_softplus, pad_slot_id=pad_slot_id)
    fields.pop("latency_route_kib")
    return {**{k: fields[k] for k in ("nheads", "head_dim", "dstate", "ngroups")}, "window": int(window),
            **fields, "mode": int(mode == "replay")}


def mamba2_verify_inputs(fields: dict) -> list[str]:
    names = mamba2_decode_inputs(dict(fields, mode=0))  # ... slot_idx, state
    return names + (["ring_x", "ring_B", "ring_dt", "cursor"] if fields["mode"] == 1 else ["snapshots"])


def gdn_verify_fields(shape: GdnLayerShape, cfg: ReplayConfig, window: int, *, mode: str = "replay",
                      pad_slot_id=-1) -> dict:
    """Fields of the speculative verify of `window` (T) tokens per row; mode "replay" or "snapshot"."""
    _check_mode(mode, ("replay", "snapshot"))
    # the latency route is a standard decode setting (the verify has its own flush rule): not resolved here
    fields = gdn_decode_fields(shape, dataclasses.replace(cfg, latency_route_bytes=0), pad_slot_id=pad_slot_id)
    fields.pop("latency_route_kib")
    return {**{k: fields[k] for k in ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim")},
            "window": int(window), **fields, "mode": int(mode == "replay")}


def gdn_verify_inputs(fields: dict) -> list[str]:
    names = gdn_decode_inputs(dict(fields, mode=0))  # ... slot_idx, state
    return names + (["ring_u", "ring_k", "ring_g", "cursor"] if fields["mode"] == 1 else ["snapshots"])


def spec_commit_fields(shape: Mamba2LayerShape | GdnLayerShape, cfg: ReplayConfig, window: int,
                       *, pad_slot_id=-1) -> dict:
    """The ReplaySSM commit after a verify of `window` tokens: the cursor has one row per head (Mamba-2: H;
    GDN: HV)."""
    nheads = shape.nheads if isinstance(shape, Mamba2LayerShape) else shape.num_v_heads
    return {"nheads": nheads, "window": int(window), "buffer_len": cfg.buffer_len, "pad_slot_id": pad_slot_id}


def spec_commit_inputs(fields: dict) -> list[str]:
    return ["accepted", "slot_idx", "cursor"]


def snapshot_commit_fields(cfg: ReplayConfig, window: int, *, pad_slot_id=-1) -> dict:
    """The snapshot path's commit after a verify of `window` tokens (state and snapshots in cfg.state_dtype)."""
    return {"window": int(window), "state_dtype": DTYPE_CODES[cfg.state_dtype], "pad_slot_id": pad_slot_id}


def snapshot_commit_inputs(fields: dict) -> list[str]:
    return ["accepted", "slot_idx", "snapshots", "state"]


def conv1d_fields(channels: int, kernel_size: int = 4, *, mode: str = "update", num_tokens: int = 1,
                  state_dtype="bf16", act_dtype="bf16", weight_dtype=None, has_bias=True, silu=True,
                  pad_slot_id=-1) -> dict:
    """The causal conv1d (docs/conv1d.md): mode "update" (num_tokens 1), "verify" or "commit" (num_tokens = T);
    weight_dtype defaults to act_dtype."""
    _check_mode(mode, tuple(CONV1D_MODES))
    act = parse_dtype(act_dtype)
    return {"mode": CONV1D_MODES[mode], "channels": int(channels), "kernel_size": int(kernel_size),
            "num_tokens": int(num_tokens), "state_dtype": DTYPE_CODES[parse_dtype(state_dtype)],
            "act_dtype": DTYPE_CODES[act], "weight_dtype": DTYPE_CODES[parse_dtype(weight_dtype or act)],
            "has_bias": int(has_bias), "silu": int(silu), "pad_slot_id": pad_slot_id}


def conv1d_inputs(fields: dict) -> list[str]:
    if fields["mode"] == CONV1D_MODES["commit"]:
        return ["accepted", "slot_idx", "windows"]
    names = ["x", "weight"] + (["bias"] if fields["has_bias"] else []) + ["slot_idx"]
    return names + (["state"] if fields["mode"] == CONV1D_MODES["update"] else ["windows"])


def mamba2_prefill_fields(shape: Mamba2LayerShape, cfg: ReplayConfig, *, mode: str = "replay", has_z=True,
                          has_D=True, has_dt_bias=True, dt_softplus=True, pad_slot_id=-1) -> dict[str, int]:
    """The context phase (docs/prefill.md); mode "replay": the pool has a cursor, reset to an empty ring."""
    fields = mamba2_decode_fields(shape, cfg, mode=mode, has_z=has_z, has_D=has_D, has_dt_bias=has_dt_bias,
                                  dt_softplus=dt_softplus, pad_slot_id=pad_slot_id)
    for name in ("buffer_len", "latency_route_kib"):  # decode settings: the prefill runs the conventional step
        fields.pop(name)
    return fields


def mamba2_prefill_inputs(fields: dict) -> list[str]:
    names = mamba2_decode_inputs(dict(fields, mode=0))[:-2] + ["lengths", "slot_idx", "state"]
    return names + (["cursor"] if fields["mode"] == 1 else [])


def gdn_prefill_fields(shape: GdnLayerShape, cfg: ReplayConfig, *, mode: str = "replay", pad_slot_id=-1) -> dict:
    fields = gdn_decode_fields(shape, cfg, mode=mode, pad_slot_id=pad_slot_id)
    for name in ("buffer_len", "latency_route_kib"):
        fields.pop(name)
    return fields


def gdn_prefill_inputs(fields: dict) -> list[str]:
    return ["q", "k", "v", "g", "beta", "lengths", "slot_idx", "state"] + (["cursor"] if fields["mode"] == 1 else [])


def conv1d_prefill_fields(channels: int, kernel_size: int = 4, **options) -> dict:
    """conv1d_fields' options (dtypes, has_bias, silu, pad_slot_id); no mode, no num_tokens."""
    fields = conv1d_fields(channels, kernel_size, **options)
    for name in ("mode", "num_tokens"):
        fields.pop(name)
    return fields


def conv1d_prefill_inputs(fields: dict) -> list[str]:
    return ["x", "weight"] + (["bias"] if fields["has_bias"] else []) + ["lengths", "slot_idx", "state"]


# ---- one plugin's I/O contract, by plugin name ----
def plugin_inputs(plugin: str, fields: dict) -> list[str]:
    """The input names of `plugin` configured by `fields`, in the plugin's order."""
    return _INPUTS[plugin](fields)


def plugin_outputs(plugin: str, fields: dict) -> tuple[str | None, list[str]]:
    """(the input whose shape and dtype the output y takes, None when the plugin has no y; the inputs the plugin
    updates in place, in output order): outputs are y, then one per updated input, aliased to it (plugin.h)."""
    names = plugin_inputs(plugin, fields)
    if plugin in (SPEC_COMMIT, SNAPSHOT_COMMIT) or (plugin == CONV1D and fields["mode"] == CONV1D_MODES["commit"]):
        return None, names[-1:]  # cursor / state / windows
    y_like = "v" if plugin in (GDN_DECODE, GDN_VERIFY, GDN_PREFILL) else "x"
    if plugin in (MAMBA2_VERIFY, GDN_VERIFY) and fields["mode"] == 0:
        return y_like, ["snapshots"]  # the snapshot path reads the state
    return y_like, names[names.index("slot_idx") + 1:]


_INPUTS = {MAMBA2_DECODE: mamba2_decode_inputs, GDN_DECODE: gdn_decode_inputs, MAMBA2_VERIFY: mamba2_verify_inputs,
           GDN_VERIFY: gdn_verify_inputs, SPEC_COMMIT: spec_commit_inputs, SNAPSHOT_COMMIT: snapshot_commit_inputs,
           CONV1D: conv1d_inputs, MAMBA2_PREFILL: mamba2_prefill_inputs, GDN_PREFILL: gdn_prefill_inputs,
           CONV1D_PREFILL: conv1d_prefill_inputs}


def _check_mode(mode, modes=("replay", "conventional")):
    if mode not in modes:
        raise ValueError(f"mode={mode!r} is not supported ({', '.join(modes)})")


# ---- network building ----
def create_network(builder, trt=None):
    """A network for the plugins: strongly typed (the default and only kind in TensorRT 11; a flag before)."""
    trt = tensorrt_module(trt)
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    major = int(str(getattr(trt, "__version__", "11")).split(".")[0])
    return builder.create_network(1 << int(flag) if flag is not None and major < 11 else 0)


def enable_aliased_io(builder_config, trt=None) -> None:
    """Turns on the preview feature that lets the plugins update the pool buffers in place."""
    trt = tensorrt_module(trt)
    builder_config.set_preview_feature(trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03, True)


def create_plugin(plugin_name: str, fields: dict, registry=None, trt=None, name: str | None = None):
    """Plugin `plugin_name` created from `fields` (int32 scalars) in the build phase, by the creator in `registry`
    (the global registry by default); a refusal raises, the library's message going to TensorRT's logger."""
    trt = tensorrt_module(trt)
    registry = registry if registry is not None else trt.get_plugin_registry()
    creator = registry.get_creator(plugin_name, PLUGIN_VERSION, PLUGIN_NAMESPACE)
    if creator is None:
        raise RuntimeError(f"{plugin_name} is not registered: call load_plugins() first")
    # PluginField keeps a raw pointer to its array: the arrays must outlive create_plugin, which reads them.
    arrays = {k: np.array([v], dtype=np.int32) for k, v in fields.items()}
    fc = trt.PluginFieldCollection([trt.PluginField(k, a, trt.PluginFieldType.INT32) for k, a in arrays.items()])
    plugin = creator.create_plugin(name or plugin_name, fc, trt.TensorRTPhase.BUILD)
    del fc, arrays
    if plugin is None:
        raise RuntimeError(f"{plugin_name}: the library refused the fields {fields} (see the TensorRT log)")
    return plugin


def add_plugin(network, plugin_name: str, fields: dict, inputs: dict, input_order: list[str], registry=None,
               trt=None, layer_name: str | None = None):
    """Creates plugin `plugin_name` from `fields` and adds it with `inputs` (by name, in the plugin's order).
    Returns the layer's outputs: y, then the pool buffers updated in place (aliased to their inputs)."""
    trt = tensorrt_module(trt)
    if not hasattr(network, "add_plugin_v3"):
        raise RuntimeError(f"{plugin_name}: this network API ({getattr(trt, '__name__', 'TensorRT')}) has no plugin "
                           "layer (TensorRT-RTX): export an ONNX graph with the plugins as custom nodes "
                           "(trt_plugins.onnx_plugin_node) and build it with the ONNX parser")
    missing = [n for n in input_order if n not in inputs]
    extra = sorted(set(inputs) - set(input_order))
    if missing or extra:
        raise ValueError(f"{plugin_name}: inputs missing {missing}, unexpected {extra} (expected {input_order})")
    plugin = create_plugin(plugin_name, fields, registry, trt, layer_name)
    layer = network.add_plugin_v3([inputs[n] for n in input_order], [], plugin)
    if layer_name:
        layer.name = layer_name
    return [layer.get_output(i) for i in range(layer.num_outputs)]


def add_mamba2_decode(network, inputs: dict, shape: Mamba2LayerShape, cfg: ReplayConfig, *, mode="replay",
                      registry=None, trt=None, layer_name=None, **options):
    fields = mamba2_decode_fields(shape, cfg, mode=mode, **options)
    return add_plugin(network, MAMBA2_DECODE, fields, inputs, mamba2_decode_inputs(fields), registry, trt, layer_name)


def add_gdn_decode(network, inputs: dict, shape: GdnLayerShape, cfg: ReplayConfig, *, mode="replay", registry=None,
                   trt=None, layer_name=None, **options):
    fields = gdn_decode_fields(shape, cfg, mode=mode, **options)
    return add_plugin(network, GDN_DECODE, fields, inputs, gdn_decode_inputs(fields), registry, trt, layer_name)


def add_mamba2_verify(network, inputs: dict, shape: Mamba2LayerShape, cfg: ReplayConfig, window: int, *,
                      mode="replay", registry=None, trt=None, layer_name=None, **options):
    fields = mamba2_verify_fields(shape, cfg, window, mode=mode, **options)
    return add_plugin(network, MAMBA2_VERIFY, fields, inputs, mamba2_verify_inputs(fields), registry, trt, layer_name)


def add_gdn_verify(network, inputs: dict, shape: GdnLayerShape, cfg: ReplayConfig, window: int, *, mode="replay",
                   registry=None, trt=None, layer_name=None, **options):
    fields = gdn_verify_fields(shape, cfg, window, mode=mode, **options)
    return add_plugin(network, GDN_VERIFY, fields, inputs, gdn_verify_inputs(fields), registry, trt, layer_name)


def add_spec_commit(network, inputs: dict, shape, cfg: ReplayConfig, window: int, *, registry=None, trt=None,
                    layer_name=None, **options):
    """Returns [cursor] (aliased to the cursor input)."""
    fields = spec_commit_fields(shape, cfg, window, **options)
    return add_plugin(network, SPEC_COMMIT, fields, inputs, spec_commit_inputs(fields), registry, trt, layer_name)


def add_snapshot_commit(network, inputs: dict, cfg: ReplayConfig, window: int, *, registry=None, trt=None,
                        layer_name=None, **options):
    """Returns [state] (aliased to the state input)."""
    fields = snapshot_commit_fields(cfg, window, **options)
    return add_plugin(network, SNAPSHOT_COMMIT, fields, inputs, snapshot_commit_inputs(fields), registry, trt,
                      layer_name)


def add_conv1d(network, inputs: dict, channels: int, kernel_size: int = 4, *, mode="update", registry=None, trt=None,
               layer_name=None, **options):
    """Returns [y, state] (update), [y, windows] (verify) or [windows] (commit)."""
    fields = conv1d_fields(channels, kernel_size, mode=mode, **options)
    return add_plugin(network, CONV1D, fields, inputs, conv1d_inputs(fields), registry, trt, layer_name)


def add_mamba2_prefill(network, inputs: dict, shape: Mamba2LayerShape, cfg: ReplayConfig, *, mode="replay",
                       registry=None, trt=None, layer_name=None, **options):
    """The context phase: returns [y, state] (+ cursor in replay mode), the pool outputs aliased to their inputs."""
    fields = mamba2_prefill_fields(shape, cfg, mode=mode, **options)
    return add_plugin(network, MAMBA2_PREFILL, fields, inputs, mamba2_prefill_inputs(fields), registry, trt,
                      layer_name)


def add_gdn_prefill(network, inputs: dict, shape: GdnLayerShape, cfg: ReplayConfig, *, mode="replay", registry=None,
                    trt=None, layer_name=None, **options):
    fields = gdn_prefill_fields(shape, cfg, mode=mode, **options)
    return add_plugin(network, GDN_PREFILL, fields, inputs, gdn_prefill_inputs(fields), registry, trt, layer_name)


def add_conv1d_prefill(network, inputs: dict, channels: int, kernel_size: int = 4, *, registry=None, trt=None,
                       layer_name=None, **options):
    """Returns [y, state]."""
    fields = conv1d_prefill_fields(channels, kernel_size, **options)
    return add_plugin(network, CONV1D_PREFILL, fields, inputs, conv1d_prefill_inputs(fields), registry, trt,
                      layer_name)
