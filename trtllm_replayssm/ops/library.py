"""The TensorRT plugins as `torch.library` custom ops (namespace `rssm`): the network's functional form.

`plugin_op(plugin, fields, inputs)` calls the custom op of one plugin node: the inputs in the plugin's order
(trt_plugins.plugin_inputs), the fields as ints in their table order, and returns what the plugin returns: y,
then the new contents of every input it updates in place (trt_plugins.plugin_outputs), as fresh tensors. That
is the plugins' contract (state in, the same state out, aliased) in functional form:

- eager, the op runs ops/plugin_ops.py (the project's ops on copies of the state);
- under `torch.export` a fake implementation gives the shapes, so the traced graph holds one node per plugin call
  (never the ops' host-side checks or per-row loops), which builder/plugin_nodes.py maps onto one ONNX plugin node.

One op is registered per (plugin, number of outputs): `rssm::<plugin>_<n>`. The field names travel with the
registration (`registered()`), so the ONNX translation can name the node's attributes.
"""

from __future__ import annotations

import torch

from trtllm_replayssm import trt_plugins
from trtllm_replayssm.ops.plugin_ops import run_plugin

NAMESPACE = "rssm"
_library = torch.library.Library(NAMESPACE, "FRAGMENT")
_REGISTERED: dict[str, tuple[str, tuple[str, ...]]] = {}  # op name -> (plugin, field names)


def _op_name(plugin: str, num_outputs: int) -> str:
    return f"{plugin}_{num_outputs}"


def _register(plugin: str, field_names: tuple[str, ...], num_outputs: int):
    name = _op_name(plugin, num_outputs)
    known = _REGISTERED.get(name)
    if known is not None:
        if known[1] != field_names:
            raise ValueError(f"{plugin}: fields {field_names} differ from the registered {known[1]}")
        return getattr(torch.ops.rssm, name).default
    results = "Tensor" if num_outputs == 1 else "(" + ", ".join(["Tensor"] * num_outputs) + ")"
    _library.define(f"{name}(Tensor[] inputs, int[] fields) -> {results}")

    def outputs(inputs, fields, run):
        f = dict(zip(field_names, fields))
        named = dict(zip(trt_plugins.plugin_inputs(plugin, f), inputs))
        out = tuple(run(f, named))
        return out[0] if num_outputs == 1 else out

    def eager(inputs, fields):
        return outputs(inputs, fields, lambda f, named: run_plugin(plugin, f, named))

    def fake(inputs, fields):
        def shapes(f, named):
            y_like, written = trt_plugins.plugin_outputs(plugin, f)
            return [torch.empty_like(named[n]) for n in ([y_like] if y_like else []) + written]
        return outputs(inputs, fields, shapes)

    _library.impl(name, eager, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_library)
    _REGISTERED[name] = (plugin, field_names)
    return getattr(torch.ops.rssm, name).default


def plugin_op(plugin: str, fields: dict, inputs: dict) -> list[torch.Tensor]:
    """The plugin node `plugin` configured by `fields` on `inputs` (name -> tensor; the names of
    trt_plugins.plugin_inputs), through its custom op. Returns y (when the plugin has one), then the new contents
    of the inputs the plugin updates in place (trt_plugins.plugin_outputs); the inputs themselves are unchanged."""
    order = trt_plugins.plugin_inputs(plugin, fields)
    missing = [n for n in order if inputs.get(n) is None]
    if missing:
        raise ValueError(f"{plugin}: inputs {', '.join(missing)} are missing")
    y_like, written = trt_plugins.plugin_outputs(plugin, fields)
    op = _register(plugin, tuple(fields), (y_like is not None) + len(written))
    out = op([inputs[n] for n in order], [int(v) for v in fields.values()])
    return [out] if isinstance(out, torch.Tensor) else list(out)


def registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Registered op name -> (plugin name, field names in the order the op takes them)."""
    return dict(_REGISTERED)
