"""The ONNX exporter's translation of the plugins' custom ops (trtllm_replayssm/ops/library.py) into TensorRT
plugin nodes: op type = plugin name (domain PLUGIN_NAMESPACE), attributes plugin_version, plugin_namespace and
the plugin's fields (ints), inputs in the plugin's order, outputs y then the new contents of every input the
plugin updates in place (aliased: a runtime binds each state output to its input's memory).

`translation_table()` is torch.onnx.export's custom_translation_table for every op registered so far (trace the
network once before asking for it: ops register on first use).
"""

from __future__ import annotations

import functools

import torch

from trtllm_replayssm import trt_plugins
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


def _translation(plugin: str, field_names: tuple[str, ...], num_outputs: int):
    def translate(inputs, fields):
        node = _node(plugin, field_names, num_outputs)
        attrs = dict(zip(field_names, (int(v) for v in fields)))
        out = node(*inputs, _num_outputs=num_outputs, plugin_version=trt_plugins.PLUGIN_VERSION,
                   plugin_namespace=trt_plugins.PLUGIN_NAMESPACE, **attrs)
        return out
    return translate


def translation_table() -> dict:
    """custom op -> translation function, for torch.onnx.export(..., custom_translation_table=...)."""
    table = {}
    for name, (plugin, field_names) in library.registered().items():
        num_outputs = int(name.rsplit("_", 1)[1])
        table[getattr(torch.ops.rssm, name).default] = _translation(plugin, field_names, num_outputs)
    return table
