"""The ONNX exporter's translation of the project's custom ops (trtllm_replayssm/ops/library.py) into TensorRT
plugin nodes: op type = plugin name (domain PLUGIN_NAMESPACE), attributes plugin_version, plugin_namespace and
the plugin's fields (trt_plugins), inputs in the plugin's order, outputs y then the new contents of every state
buffer in the plugin's order (the buffers the plugin writes in place: a runtime binds each `<name>.out` to the
`<name>` input's memory).

`translation_table()` is torch.onnx.export's custom_translation_table.
"""

from __future__ import annotations

import functools

import torch

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops import library


@functools.cache
def _node(plugin: str, fields: tuple, num_outputs: int):
    """The onnxscript op of one plugin with its field names as int attributes and `num_outputs` outputs (the
    exporter counts outputs from the schema)."""
    import onnx
    import onnxscript
    from onnx.defs import OpSchema

    tensor_types = [t for t in onnx.defs.get_schema("Identity", 18).type_constraints[0].allowed_type_strs
                    if t.startswith("tensor")]
    variadic = OpSchema.FormalParameterOption.Variadic
    attrs = [OpSchema.Attribute(n, OpSchema.AttrType.STRING, "") for n in ("plugin_version", "plugin_namespace")]
    attrs += [OpSchema.Attribute(n, OpSchema.AttrType.INT, "") for n in fields]
    schema = OpSchema(plugin, trt_plugins.PLUGIN_NAMESPACE, 1,
                      inputs=[OpSchema.FormalParameter("inputs", "T", param_option=variadic, is_homogeneous=False)],
                      outputs=[OpSchema.FormalParameter(f"out{i}", f"T{i}") for i in range(num_outputs)],
                      type_constraints=[(t, tensor_types, "") for t in ["T"] + [f"T{i}" for i in range(num_outputs)]],
                      attributes=attrs)
    return onnxscript.values.Op(onnxscript.values.Opset(trt_plugins.PLUGIN_NAMESPACE, 1), plugin, schema)


def _emit(plugin: str, fields: dict, named: dict, num_outputs: int):
    order = {trt_plugins.MAMBA2_DECODE: trt_plugins.mamba2_decode_inputs}[plugin](fields)
    node = _node(plugin, tuple(fields), num_outputs)
    return node(*(named[n] for n in order), _num_outputs=num_outputs, plugin_version=trt_plugins.PLUGIN_VERSION,
                plugin_namespace=trt_plugins.PLUGIN_NAMESPACE, **{k: int(v) for k, v in fields.items()})


def _mamba2_fields(x, B, mode, D, z, dt_bias, dt_softplus, ngroups, cfg):
    H, P, N = x.shape[1], x.shape[2], B.shape[-1]
    return trt_plugins.mamba2_decode_fields(Mamba2LayerShape(H, P, N, ngroups), cfg, mode=mode, has_z=z is not None,
                                            has_D=D is not None, has_dt_bias=dt_bias is not None,
                                            dt_softplus=dt_softplus)


def _mamba2_replay(buffers, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx, ngroups, buffer_len,
                   state_dtype, act_dtype, read_format, latency_route_bytes):
    limit = None if latency_route_bytes == library.NO_LATENCY_LIMIT else latency_route_bytes
    cfg = ReplayConfig(buffer_len, state_dtype, act_dtype, read_format, limit)
    fields = _mamba2_fields(x, B, "replay", D, z, dt_bias, dt_softplus, ngroups, cfg)
    named = dict(x=x, dt=dt, B=B, C=C, A=A, z=z, D=D, dt_bias=dt_bias, slot_idx=slot_idx, state=buffers[0],
                 **dict(zip(library.REPLAY_BUFFERS[1:], buffers[1:])))
    return _emit(trt_plugins.MAMBA2_DECODE, fields, named, 1 + len(buffers))


def _mamba2_conventional(state, x, dt, B, C, A, D, z, dt_bias, dt_softplus, slot_idx):
    # no ring: the fields' buffer_len stays the default (the plugin does not read it in conventional mode)
    cfg = ReplayConfig(state_dtype=_onnx_dtype(state), act_dtype=_onnx_dtype(x))
    fields = _mamba2_fields(x, B, "conventional", D, z, dt_bias, dt_softplus, B.shape[1], cfg)
    named = dict(x=x, dt=dt, B=B, C=C, A=A, z=z, D=D, dt_bias=dt_bias, slot_idx=slot_idx, state=state)
    return _emit(trt_plugins.MAMBA2_DECODE, fields, named, 2)


def _onnx_dtype(value) -> str:
    """The dtype name of a tensor the exporter traces."""
    import onnx_ir as ir

    return {ir.DataType.FLOAT: "fp32", ir.DataType.FLOAT16: "fp16", ir.DataType.BFLOAT16: "bf16"}[value.dtype]


def translation_table() -> dict:
    """custom op -> translation function, for torch.onnx.export(..., custom_translation_table=...)."""
    return {torch.ops.rssm.mamba2_replay_decode.default: _mamba2_replay,
            torch.ops.rssm.mamba2_conventional_decode.default: _mamba2_conventional}
