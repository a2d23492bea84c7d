"""TensorRT side of the plugins in libreplayssm_trt.so: load them into a plugin registry and add their layers to
a network. `tensorrt` is imported lazily (it is an optional dependency): every function takes it as `trt=None`
and imports it on first use, with a clear error when it is absent.

    import tensorrt as trt
    builder = trt.Builder(logger)
    load_plugins(builder.get_plugin_registry())
    network = create_network(builder)
    y, *pool = add_mamba2_decode(network, {"x": x, "dt": dt, ...}, shape, ReplayConfig(16))
    config = builder.create_builder_config(); enable_aliased_io(config)

Inputs are passed by name; the order the plugin expects (`mamba2_decode_inputs`, `gdn_decode_inputs`) mirrors
the plugins' tables, and a test checks it against the compiled library. docs/tensorrt_plugins.md has the I/O
contract of each plugin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trtllm_replayssm.config import DTYPE_CODES, GdnLayerShape, Mamba2LayerShape, ReplayConfig

PLUGIN_NAMESPACE = "trtllm_replayssm"
PLUGIN_VERSION = "1"
MAMBA2_DECODE = "ReplaySSMMamba2Decode"
GDN_DECODE = "ReplaySSMGdnDecode"


def _trt(trt):
    if trt is not None:
        return trt
    try:
        import tensorrt
    except ImportError as e:
        raise ImportError("the TensorRT plugins need the `tensorrt` Python package (not installed here); "
                          "the kernels are usable without it through trtllm_replayssm.ops") from e
    return tensorrt


def library_path() -> Path:
    """libreplayssm_trt.so inside the package (built when RSSM_TENSORRT_INCLUDE_DIR was set at install)."""
    path = Path(__file__).resolve().parent / "lib" / "libreplayssm_trt.so"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: reinstall with RSSM_TENSORRT_INCLUDE_DIR=<TensorRT include/>")
    return path


def load_plugins(registry=None, trt=None):
    """Loads the plugin library into `registry` (the global plugin registry by default); returns its handle."""
    trt = _trt(trt)
    registry = registry if registry is not None else trt.get_plugin_registry()
    return registry.load_library(str(library_path()))


# ---- fields and inputs, per plugin (mirrors plugins/tensorrt/*_decode_plugin.cpp) ----
def mamba2_decode_fields(shape: Mamba2LayerShape, cfg: ReplayConfig, *, mode: str = "replay", has_z=True,
                         has_D=True, has_dt_bias=True, dt_softplus=True, pad_slot_id=-1) -> dict[str, int]:
    _check_mode(mode)
    return {"nheads": shape.nheads, "head_dim": shape.head_dim, "dstate": shape.dstate, "ngroups": shape.ngroups,
            "buffer_len": cfg.buffer_len, "mode": int(mode == "replay"),
            "state_dtype": DTYPE_CODES[cfg.state_dtype], "act_dtype": DTYPE_CODES[cfg.act_dtype],
            "has_z": int(has_z), "has_D": int(has_D), "has_dt_bias": int(has_dt_bias),
            "dt_softplus": int(dt_softplus), "pad_slot_id": pad_slot_id}


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
            "pad_slot_id": pad_slot_id}


def gdn_decode_inputs(fields: dict) -> list[str]:
    names = ["q", "k", "v", "g", "beta", "slot_idx", "state"]
    return names + (["ring_u", "ring_k", "ring_g", "cursor"] if fields["mode"] == 1 else [])


def _check_mode(mode):
    if mode not in ("replay", "conventional"):
        raise ValueError(f"mode={mode!r} is not supported (replay, conventional)")


# ---- network building ----
def create_network(builder, trt=None):
    """A network for the plugins: strongly typed (the default and only kind in TensorRT 11; a flag before)."""
    trt = _trt(trt)
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    major = int(str(getattr(trt, "__version__", "11")).split(".")[0])
    return builder.create_network(1 << int(flag) if flag is not None and major < 11 else 0)


def enable_aliased_io(builder_config, trt=None) -> None:
    """Turns on the preview feature that lets the plugins update the pool buffers in place."""
    trt = _trt(trt)
    builder_config.set_preview_feature(trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03, True)


def add_plugin(network, plugin_name: str, fields: dict, inputs: dict, input_order: list[str], registry=None,
               trt=None, layer_name: str | None = None):
    """Creates plugin `plugin_name` from `fields` and adds it with `inputs` (by name, in the plugin's order).
    Returns the layer's outputs: y, then the pool buffers updated in place (aliased to their inputs)."""
    trt = _trt(trt)
    missing = [n for n in input_order if n not in inputs]
    extra = sorted(set(inputs) - set(input_order))
    if missing or extra:
        raise ValueError(f"{plugin_name}: inputs missing {missing}, unexpected {extra} (expected {input_order})")
    registry = registry if registry is not None else trt.get_plugin_registry()
    creator = registry.get_creator(plugin_name, PLUGIN_VERSION, PLUGIN_NAMESPACE)
    if creator is None:
        raise RuntimeError(f"{plugin_name} is not registered: call load_plugins() first")
    fc = trt.PluginFieldCollection([trt.PluginField(k, np.array([v], dtype=np.int32), trt.PluginFieldType.INT32)
                                    for k, v in fields.items()])
    plugin = creator.create_plugin(layer_name or plugin_name, fc, trt.TensorRTPhase.BUILD)
    if plugin is None:
        raise RuntimeError(f"{plugin_name}: the library refused the fields {fields} (see the TensorRT log)")
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
