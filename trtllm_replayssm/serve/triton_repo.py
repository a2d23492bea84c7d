"""Writes a Triton model repository for a ReplaySSM model: `<repo>/<name>/config.pbtxt` (Python backend,
decoupled, Triton's LLM I/O conventions, the runtime's settings as parameters) and `<name>/1/model.py`, which
imports the model from the installed package (trtllm_replayssm/serve/triton_model.py)."""

from __future__ import annotations

from pathlib import Path

MODEL_PY = '''"""Triton Python-backend model written by `trtllm-replayssm triton-repo`: the model is in the installed package."""

from trtllm_replayssm.serve.triton_model import TritonPythonModel  # noqa: F401
'''

# (name, Triton type, dims): inputs are optional; one of input_ids / text_input is required per request.
INPUTS = [("input_ids", "TYPE_INT32", "[ -1 ]"), ("text_input", "TYPE_STRING", "[ 1 ]"),
          ("max_tokens", "TYPE_INT32", "[ 1 ]"), ("stream", "TYPE_BOOL", "[ 1 ]"),
          ("temperature", "TYPE_FP32", "[ 1 ]"), ("top_p", "TYPE_FP32", "[ 1 ]"), ("top_k", "TYPE_INT32", "[ 1 ]"),
          ("random_seed", "TYPE_UINT64", "[ 1 ]"), ("end_id", "TYPE_INT32", "[ 1 ]"),
          ("ignore_eos", "TYPE_BOOL", "[ 1 ]"), ("stop_words", "TYPE_STRING", "[ -1 ]")]
OUTPUTS = [("output_ids", "TYPE_INT32", "[ -1 ]"), ("text_output", "TYPE_STRING", "[ -1 ]")]


def config_pbtxt(name: str, settings: dict) -> str:
    inputs = ",\n".join(f'  {{ name: "{n}" data_type: {t} dims: {d} optional: true }}' for n, t, d in INPUTS)
    outputs = ",\n".join(f'  {{ name: "{n}" data_type: {t} dims: {d} }}' for n, t, d in OUTPUTS)
    params = "\n".join(f'parameters: {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
                       for k, v in settings.items() if v is not None)
    return (f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            f"model_transaction_policy {{ decoupled: true }}\n"
            f"input [\n{inputs}\n]\noutput [\n{outputs}\n]\n"
            f"instance_group [ {{ count: 1 kind: KIND_CPU }} ]\n{params}\n")


def write_repository(repo: Path, name: str, settings: dict) -> Path:
    """Writes (or overwrites) the model `name` in `repo`; settings: the runtime's options as strings."""
    model = Path(repo) / name
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(config_pbtxt(name, settings))
    (model / "1" / "model.py").write_text(MODEL_PY)
    return model
