"""The runtime over a `build` output folder instead of the PyTorch network: the engine executor.

    engine = Engine.from_build("out/", backend="tensorrt")   # runtime/engine.py; serve --engine out/

`BuiltModel` reads config.json (what the Engine needs of a model: name, vocabulary, end tokens, mode) and
`BuiltRunner` drives the phase graphs with the runner's interface (prefill, decode, release, step): it owns the
state tensors named in config.json, binds each phase's state inputs to them and each state output `<name>.out`
to the same memory (the plugins update it in place; a KV cache output is copied back), rows chosen by slot_idx.

Executors:
- "tensorrt": the engines through TensorRT's runtime on a GPU it supports (TensorRT 10.x / 11.x installed, the
  engines built for this GPU's SM); state on the GPU;
- "onnx": the ONNX graphs through onnx.reference on the CPU, plugin nodes by the project's ops
  (builder/onnx_runner.py): slow, for checking a build without TensorRT.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from trtllm_replayssm.config import parse_dtype

from .runner import ModelRunner, buckets

EXECUTORS = ("tensorrt", "onnx")


def _dtype(name: str) -> torch.dtype:
    """A config.json dtype name: fp32 / fp16 / bf16, or a numpy / torch name (int32, float32, ...)."""
    try:
        return parse_dtype(name)
    except ValueError:
        return getattr(torch, name)


class BuiltModel:
    """What the Engine and the servers read of a model, from a build's config.json."""

    def __init__(self, build_dir):
        self.dir = Path(build_dir)
        path = self.dir / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"{self.dir}: no config.json (a folder written by `trtllm-replayssm build`)")
        try:
            self.config = json.loads(path.read_text())
            m, s = self.config["model"], self.config["settings"]
            self.name, self.model_type, self.vocab_size = m["name"], m["model_type"], m["vocab_size"]
            self.eos_token_ids = tuple(m["eos_token_ids"])
            self.mode, self.num_slots, self.max_seq_len = s["mode"], s["num_slots"], s["max_seq_len"]
            self.phases, self.state = self.config["phases"], self.config["state"]
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is malformed (not written by this version of `trtllm-replayssm build`?): "
                             f"{type(e).__name__}: {e}") from None
        self.eos_token_id = self.eos_token_ids[0] if self.eos_token_ids else None
        self.model_dir = None  # no tokenizer travels with a build
        if s["spec_tokens"]:
            raise ValueError(f"{self.dir} was built for speculative decoding (spec_tokens={s['spec_tokens']}); "
                             "the runtime serves plain decode builds")


class _OnnxExecutor:
    device = torch.device("cpu")

    def __init__(self, model: BuiltModel):
        from trtllm_replayssm.builder.onnx_runner import OnnxRunner

        low = sorted({t["dtype"] for t in model.state if t["dtype"] in ("bf16", "fp16")})
        if low:
            raise ValueError(f"{model.dir} holds {'/'.join(low)} state: the onnx executor runs fp32 builds only "
                             "(onnx.reference works in numpy); build with --act-dtype fp32 --state-dtype fp32")
        state = {t["name"]: np.zeros(t["shape"], dtype=torch.empty((), dtype=_dtype(t["dtype"])).numpy().dtype)
                 for t in model.state}
        phases = {p: model.dir / v["onnx"] for p, v in model.config["phases"].items()}
        self.runner = OnnxRunner(phases, state)

    def run(self, phase: str, **inputs) -> torch.Tensor:
        out = self.runner.run(phase, **{k: v.numpy() for k, v in inputs.items()})
        return torch.from_numpy(out["logits"])

    def zero_rows(self, slots: list[int]) -> None:
        for t in self.runner.state.values():
            t[slots] = 0


class _TensorRTExecutor:
    def __init__(self, model: BuiltModel):
        import tensorrt as trt  # the full TensorRT runtime

        built_with = model.config["tensorrt"]
        if built_with.get("backend") != "tensorrt":
            raise ValueError(f"{model.dir} was built by {built_with.get('backend') or 'no TensorRT'} "
                             f"{built_with.get('version') or ''}: the tensorrt executor runs engines of TensorRT "
                             "10.x / 11.x (rebuild on the GPU machine with `tensorrt` installed)")
        if built_with.get("version") != trt.__version__:
            raise ValueError(f"{model.dir} was built by TensorRT {built_with.get('version')}, this is "
                             f"{trt.__version__}: rebuild it here")
        if not torch.cuda.is_available():
            raise ValueError("the tensorrt executor needs a CUDA device (use --executor onnx to check a build on "
                             "the CPU)")
        self.trt, self.device = trt, torch.device("cuda")
        major, minor = torch.cuda.get_device_capability()
        target = str(10 * major + minor)
        self.logger = trt.Logger(trt.Logger.WARNING)
        # the library the engines were built with, copied into the build
        trt.get_plugin_registry().load_library(str(model.dir / model.config["plugins"]["library"]))
        runtime = trt.Runtime(self.logger)
        self.state = {t["name"]: torch.zeros(t["shape"], dtype=_dtype(t["dtype"]), device=self.device)
                      for t in model.state}
        self.contexts, self.phases = {}, model.phases
        for phase, p in self.phases.items():
            if target not in p["engines"]:
                raise ValueError(f"{model.dir}: no {phase} engine for this GPU (SM{target}; built for "
                                 f"SM {', '.join(p['engines']) or 'none'}): rebuild with --target {target}")
            engine = runtime.deserialize_cuda_engine((model.dir / p["engines"][target]).read_bytes())
            if engine is None:
                raise ValueError(f"TensorRT could not load {model.dir / p['engines'][target]} (see its log above)")
            self.contexts[phase] = (engine, engine.create_execution_context())
        self.stream = torch.cuda.Stream(self.device)

    def run(self, phase: str, **inputs) -> torch.Tensor | None:
        engine, ctx = self.contexts[phase]
        p = self.phases[phase]
        keep = {k: v.to(self.device).contiguous() for k, v in inputs.items()}
        for i in p["inputs"]:
            t = keep.get(i["name"], self.state.get(i["name"]))
            ctx.set_input_shape(i["name"], tuple(t.shape))
            ctx.set_tensor_address(i["name"], t.data_ptr())
        outputs, copies = {}, []
        for o in p["outputs"]:
            name = o["name"]
            if name in p["in_place"]:  # a plugin's output: the same memory as the state input it updates
                out = self.state[p["aliases"][name]]
            else:  # logits, or a state written by plain ops (a KV cache): a fresh buffer
                out = torch.empty(tuple(ctx.get_tensor_shape(name)), dtype=_dtype(o["dtype"]),
                                  device=self.device)
                outputs[name] = out
                if name in p["aliases"]:
                    copies.append((self.state[p["aliases"][name]], out))
            ctx.set_tensor_address(name, out.data_ptr())
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # inputs and zeroed rows first
        if not ctx.execute_async_v3(self.stream.cuda_stream):
            raise RuntimeError(f"TensorRT failed to run the {phase} engine")
        with torch.cuda.stream(self.stream):
            for dst, src in copies:
                dst.copy_(src)
        self.stream.synchronize()
        return outputs.get("logits")

    def zero_rows(self, slots: list[int]) -> None:
        for t in self.state.values():
            t[slots] = 0


class BuiltRunner(ModelRunner):
    """ModelRunner's interface over a build's graphs (module docstring)."""

    def __init__(self, model: BuiltModel, executor: str = "tensorrt"):
        if executor not in EXECUTORS:
            raise ValueError(f"executor={executor!r} is not one of {', '.join(EXECUTORS)}")
        self.net, self.num_slots, self.max_seq_len = model, model.num_slots, model.max_seq_len
        self.exec = _TensorRTExecutor(model) if executor == "tensorrt" else _OnnxExecutor(model)
        self.device = self.exec.device
        self.buckets = buckets(self.num_slots)
        self.cuda_graphs = False
        self._graphs = {}
        self.last_step_s = 0.0

    def prefill(self, prompts: list[list[int]], slots: list[int]) -> torch.Tensor:
        S = max(2, max(len(p) for p in prompts))  # the graphs take prompts of at least 2 positions (padding)
        ids = torch.zeros(len(prompts), S, dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, :len(p)] = torch.tensor(p, dtype=torch.long)
        lengths = torch.tensor([len(p) for p in prompts], dtype=torch.int32)
        return self.exec.run("prefill", input_ids=ids, lengths=lengths, slot_idx=torch.tensor(slots, dtype=torch.int32))

    def decode(self, tokens: list[int], positions: list[int], slots: list[int]) -> torch.Tensor:
        return self.exec.run("decode", input_ids=torch.tensor(tokens, dtype=torch.long),
                             positions=torch.tensor(positions, dtype=torch.long),
                             slot_idx=torch.tensor(slots, dtype=torch.int32))

    def capture_all(self) -> None:
        """Nothing to capture: each phase is one engine launch."""

    def release(self, slots: list[int]) -> None:
        self.exec.zero_rows(list(slots))
