"""ONNX export of a HybridLM, one graph per phase, with the state as explicit graph I/O.

    graphs = export_phases(net, num_slots=64, max_seq_len=4096, spec_tokens=0, out_dir=Path("engine"))

Each phase is `(inputs, *state) -> (outputs, *new state)`:

| phase   | inputs                                                  | outputs                    |
|---------|---------------------------------------------------------|----------------------------|
| prefill | input_ids [b, S] int64, lengths [b] int32, slot_idx [b] int32 | logits [b, vocab] fp32 |
| decode  | input_ids [b] int64, positions [b] int64, slot_idx [b] int32  | logits [b, vocab] fp32 |
| verify  | input_ids [b, T] int64, positions [b] int64, slot_idx [b] int32 | logits [b, T, vocab] fp32 |
| commit  | accepted [b] int32, slot_idx [b] int32                  | (state only)               |

(decode without speculative decoding, verify and commit with it). The state inputs are the StateSet's tensors a
phase reads (network/state.py names: `layer3.checkpoint`, `layer3.conv_state`, `layer5.k_cache`, ...); the state
outputs are the ones it writes, named `<name>.out`. A plugin writes its state in place (the output aliases the
input: bind both names to the same memory); a KV cache output is a scatter into a copy of the cache (plain ONNX
ops; paged KV is out of scope). The batch b and the prompt length S are dynamic; slots, max_seq_len and T are
fixed by the state.

The network runs with state_ops.FUNCTIONAL, so every SSM / conv1d step is one custom op that
builder/plugin_nodes.py turns into one TensorRT plugin node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from trtllm_replayssm.network.model import HybridLM, NetworkError
from trtllm_replayssm.network.state import StateSet
from trtllm_replayssm.network.state_ops import FUNCTIONAL

from . import plugin_nodes

OPSET = 18
STATE_OUTPUT_SUFFIX = ".out"
# Example sizes the trace runs at (the exported batch and prompt length stay dynamic).
_EXAMPLE_BATCH, _EXAMPLE_TOKENS = 2, 3


@dataclasses.dataclass
class PhaseGraph:
    """One exported phase: its ONNX file and I/O."""

    phase: str
    path: Path
    inputs: list[dict]  # name, dtype, shape (ints, or a dimension name for dynamic ones)
    outputs: list[dict]
    aliases: dict[str, str]  # state output -> the state input it updates
    in_place: list[str]  # the state outputs a plugin writes in place (the others are new tensors: copy back)
    seconds: float = 0.0


def phases_of(spec_tokens: int) -> tuple[str, ...]:
    return ("prefill", "verify", "commit") if spec_tokens else ("prefill", "decode")


class _Record:
    """What a trace learns, kept across torch.export's copies of the module (copies share it)."""

    written: list[str] = []

    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self


class _Phase(nn.Module):
    """A phase of `net` as a function of (phase inputs, *state tensors), state as graph I/O."""

    def __init__(self, net: HybridLM, template: StateSet, phase: str, state_names: list[str]):
        super().__init__()
        self.net, self.template, self.phase, self.state_names = net, template, phase, state_names
        self.trace = _Record()  # written: the state names the traced phase writes

    def forward(self, *args):
        n = len(args) - len(self.state_names)
        inputs, tensors = args[:n], dict(zip(self.state_names, args[n:]))
        state = self.template.over(tensors)
        out = getattr(self.net, self.phase)(state, *inputs, ops=FUNCTIONAL)
        written = [k for k in self.state_names if state.tensors[k] is not tensors[k]]
        self.trace.written = written
        new = tuple(state.tensors[k] for k in written)
        return new if out is None else (out, *new)


def _phase_inputs(phase, template: StateSet, max_batch: int):
    b, S, T = _EXAMPLE_BATCH, _EXAMPLE_TOKENS, template.spec_tokens
    slot_idx = torch.arange(b, dtype=torch.int32)
    # the ranges only tell torch.export the sizes are dynamic (at least the example's + 1: a range that ends at the
    # example size would make it static); the engines' optimisation profiles hold the real limits
    batch = torch.export.Dim("batch", min=1, max=max(max_batch, b + 1))
    if phase == "prefill":
        tokens = torch.export.Dim("tokens", min=2, max=max(template.max_seq_len, S + 1))
        args = (torch.ones(b, S, dtype=torch.long), torch.full((b,), S, dtype=torch.int32), slot_idx)
        return ("input_ids", "lengths", "slot_idx"), args, ({0: batch, 1: tokens}, {0: batch}, {0: batch}), ["logits"]
    if phase == "decode":
        args = (torch.ones(b, dtype=torch.long), torch.full((b,), S, dtype=torch.long), slot_idx)
        return ("input_ids", "positions", "slot_idx"), args, ({0: batch}, {0: batch}, {0: batch}), ["logits"]
    if phase == "verify":
        args = (torch.ones(b, T, dtype=torch.long), torch.full((b,), S, dtype=torch.long), slot_idx)
        return ("input_ids", "positions", "slot_idx"), args, ({0: batch}, {0: batch}, {0: batch}), ["logits"]
    args = (torch.ones(b, dtype=torch.int32), slot_idx)
    return ("accepted", "slot_idx"), args, ({0: batch}, {0: batch}), []


@contextlib.contextmanager
def _quiet():
    """The exporters' warnings and notices (deprecations, optional packages not installed) kept off stderr."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def _value_info(v) -> dict:
    import onnx

    t = v.type.tensor_type
    return {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name,
            "shape": [d.dim_param or d.dim_value for d in t.shape.dim]}


def _rename_outputs(model, names: list[str]) -> None:
    """Names the graph outputs (the exporter keeps its own names for an ExportedProgram's outputs)."""
    renames = {o.name: n for o, n in zip(model.graph.output, names) if o.name != n}
    for node in model.graph.node:
        node.input[:] = [renames.get(i, i) for i in node.input]
        node.output[:] = [renames.get(o, o) for o in node.output]
    for v in list(model.graph.output) + list(model.graph.value_info):
        v.name = renames.get(v.name, v.name)


def _name_dims(model, names: dict[str, dict[int, str]]) -> None:
    """Names the dynamic dimensions of the phase inputs (input -> {axis: name}, e.g. {"input_ids": {0: "batch"}})
    and every dimension the exporter gave the same symbol."""
    renames = {}
    for v in model.graph.input:
        dims = v.type.tensor_type.shape.dim
        for axis, name in names.get(v.name, {}).items():
            if dims[axis].dim_param:
                renames[dims[axis].dim_param] = name
    for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param in renames:
                d.dim_param = renames[d.dim_param]


def _prune_unused_inputs(model) -> None:
    """Drops graph inputs no node reads (a phase's untouched state, e.g. a conventional pool's ring)."""
    used = {i for node in model.graph.node for i in node.input} | {o.name for o in model.graph.output}
    keep = [i for i in model.graph.input if i.name in used]
    del model.graph.input[:]
    model.graph.input.extend(keep)


def export_phase(net: HybridLM, template: StateSet, phase: str, path: Path, max_batch: int) -> PhaseGraph:
    """Exports one phase of `net` over a state shaped like `template`, for batches up to `max_batch`, to `path`
    (weights in `path`.data)."""
    import onnx

    start = time.perf_counter()
    names, args, dyn, outs = _phase_inputs(phase, template, max_batch)
    state_names = list(template.tensors)
    module = _Phase(net, template, phase, state_names)
    state_args = tuple(template.tensors[n] for n in state_names)
    dynamic = tuple(dyn) + tuple(None for _ in state_names)
    with torch.no_grad(), _quiet():
        program = torch.export.export(module, args + state_args, dynamic_shapes=(dynamic,), strict=False,
                                      prefer_deferred_runtime_asserts_over_guards=True)
    written = module.trace.written
    output_names = outs + [n + STATE_OUTPUT_SUFFIX for n in written]
    with _quiet():
        onnx_program = torch.onnx.export(program, args + state_args, dynamo=True, opset_version=OPSET,
                                         custom_translation_table=plugin_nodes.translation_table(),
                                         input_names=list(names) + state_names, verbose=False, optimize=True)
    model = onnx_program.model_proto
    _rename_outputs(model, output_names)
    _name_dims(model, {n: {axis: dim.__name__ for axis, dim in d.items()} for n, d in zip(names, dyn)})
    _prune_unused_inputs(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = path.name + ".data"
    (path.parent / data).unlink(missing_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                    size_threshold=1024)
    inputs = [_value_info(v) for v in model.graph.input]
    outputs = [_value_info(v) for v in model.graph.output]
    aliases = {n + STATE_OUTPUT_SUFFIX: n for n in written}
    from trtllm_replayssm.trt_plugins import PLUGIN_NAMESPACE

    by_plugins = {o for node in model.graph.node if node.domain == PLUGIN_NAMESPACE for o in node.output}
    in_place = [o for o in aliases if o in by_plugins]
    return PhaseGraph(phase, path, inputs, outputs, aliases, in_place, time.perf_counter() - start)


def check_settings(mode: str, read_format: str) -> None:
    """Refuses, naming the setting, what the plugins cannot serve (before anything is loaded or exported)."""
    if mode == "replay" and read_format != "none":
        raise NetworkError(f"read_format={read_format!r}: the plugins read no read copy yet (engines: none)")


def check_exportable(net: HybridLM) -> None:
    check_settings(net.mode, net.replay.read_format)


def export_phases(net: HybridLM, num_slots: int, max_seq_len: int, out_dir: Path, spec_tokens: int = 0,
                  max_batch: int | None = None, progress=None) -> list[PhaseGraph]:
    """Every phase of `net` (phases_of(spec_tokens)) exported to out_dir/<phase>.onnx over a state of
    `num_slots` slots of `max_seq_len` tokens, for batches of up to `max_batch` rows (default num_slots).
    progress(phase, seconds) is called after each."""
    check_exportable(net)
    template = net.new_state(num_slots, max_seq_len, spec_tokens)
    graphs = []
    for phase in phases_of(spec_tokens):
        graphs.append(export_phase(net, template, phase, Path(out_dir) / f"{phase}.onnx", max_batch or num_slots))
        if progress is not None:
            progress(phase, graphs[-1].seconds)
    return graphs
