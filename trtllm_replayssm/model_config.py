"""Reads a Hugging Face config.json of a hybrid model into a layer plan: which layers are Mamba-2, Gated
DeltaNet, attention, MLP or MoE, with the shapes the pools and the planner need.

Supported model types: nemotron_h (Nemotron-H / Nemotron-3: `hybrid_override_pattern`, M = Mamba-2,
* = attention, - = MLP, E = MoE; or the `layers_block_type` list newer transformers versions save), qwen3_5 / qwen3_5_moe (fields under `text_config`, `layer_types`),
qwen3_next (`layer_types` or `full_attention_interval`). Anything else, or an unsupported head shape, is
refused with a message that names the field and its value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape

DEFAULT_CONFIG = "nemotron_h_tiny"
SUPPORTED_MODEL_TYPES = ("nemotron_h", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next")


@dataclass(frozen=True)
class AttentionShape:
    num_kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class LayerInfo:
    index: int  # position in the model's layer stack
    kind: str  # "mamba2" | "gdn" | "attention" | "mlp" | "moe"
    shape: object = None  # Mamba2LayerShape | GdnLayerShape | AttentionShape | None
    ffn: str | None = None  # "mlp" | "moe" when the layer also holds a feed-forward block (Qwen)
    conv_channels: int = 0  # channels of the causal conv1d in front of an SSM mixer
    conv_kernel: int = 0


@dataclass(frozen=True)
class ModelPlan:
    model_type: str
    layers: tuple
    act_dtype: str

    def of_kind(self, kind: str) -> list:
        return [layer for layer in self.layers if layer.kind == kind]


def bundled_configs() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("trtllm_replayssm.configs").iterdir()
                  if p.name.endswith(".json"))


def load_config(path: str | Path | None = None) -> dict:
    """A config.json as a dict: a path, a model directory, the name of a bundled config, or None for the
    small default config bundled with the package."""
    name = DEFAULT_CONFIG if path is None else str(path)
    if name in bundled_configs():
        return json.loads(resources.files("trtllm_replayssm.configs").joinpath(name + ".json").read_text())
    p = Path(name)
    if p.is_dir():
        p = p / "config.json"
    if not p.exists():
        raise FileNotFoundError(f"no config at {p} (bundled configs: {', '.join(bundled_configs())})")
    return json.loads(p.read_text())


def _field(cfg: dict, *names, default=None):
    for n in names:
        if n in cfg:
            return cfg[n]
    if default is not None:
        return default
    raise ValueError(f"config has none of the fields {names}")


def _checked(shape, what: str):
    try:
        shape.validate()
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None
    return shape


# Layer names of `layers_block_type`, the form transformers >= 5 saves instead of hybrid_override_pattern.
_NEMOTRON_BLOCK_TYPES = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*",
                         "mlp": "-", "moe": "E"}


def _nemotron_h(cfg: dict) -> list:
    if "hybrid_override_pattern" not in cfg and isinstance(cfg.get("layers_block_type"), list):
        blocks = cfg["layers_block_type"]
        unknown = [b for b in blocks if b not in _NEMOTRON_BLOCK_TYPES]
        if unknown:
            raise ValueError(f"layers_block_type has layer type {unknown[0]!r} "
                             f"(supported: {', '.join(_NEMOTRON_BLOCK_TYPES)})")
        pattern = "".join(_NEMOTRON_BLOCK_TYPES[b] for b in blocks)
    else:
        pattern = _field(cfg, "hybrid_override_pattern")
    mamba = _checked(Mamba2LayerShape(nheads=_field(cfg, "mamba_num_heads"), head_dim=_field(cfg, "mamba_head_dim"),
                                      dstate=_field(cfg, "ssm_state_size"), ngroups=_field(cfg, "n_groups")),
                     "Mamba-2 layers")
    attn = AttentionShape(_field(cfg, "num_key_value_heads"),
                          _field(cfg, "head_dim", "attention_head_dim",
                                 default=cfg.get("hidden_size", 0) // max(cfg.get("num_attention_heads", 1), 1)))
    conv_channels = mamba.nheads * mamba.head_dim + 2 * mamba.ngroups * mamba.dstate
    kinds = {"M": "mamba2", "*": "attention", "-": "mlp", "E": "moe"}
    layers = []
    for i, c in enumerate(pattern):
        if c not in kinds:
            raise ValueError(f"hybrid_override_pattern has layer type {c!r} at {i} (supported: M * - E)")
        kind = kinds[c]
        layers.append(LayerInfo(i, kind, mamba if kind == "mamba2" else attn if kind == "attention" else None,
                                conv_channels=conv_channels if kind == "mamba2" else 0,
                                conv_kernel=_field(cfg, "conv_kernel", default=4) if kind == "mamba2" else 0))
    return layers


def _qwen(cfg: dict) -> list:
    text = cfg.get("text_config", cfg)
    n = _field(text, "num_hidden_layers")
    types = text.get("layer_types")
    if types is None:
        interval = _field(text, "full_attention_interval")
        types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    if len(types) != n:
        raise ValueError(f"layer_types has {len(types)} entries, num_hidden_layers={n}")
    gdn = _checked(GdnLayerShape(num_k_heads=_field(text, "linear_num_key_heads"),
                                 num_v_heads=_field(text, "linear_num_value_heads"),
                                 head_k_dim=_field(text, "linear_key_head_dim"),
                                 head_v_dim=_field(text, "linear_value_head_dim")), "Gated DeltaNet layers")
    attn = AttentionShape(_field(text, "num_key_value_heads"), _field(text, "head_dim"))
    conv_channels = 2 * gdn.num_k_heads * gdn.head_k_dim + gdn.num_v_heads * gdn.head_v_dim
    ffn = "moe" if _field(text, "num_experts", default=0) else "mlp"
    layers = []
    for i, t in enumerate(types):
        if t == "linear_attention":
            layers.append(LayerInfo(i, "gdn", gdn, ffn, conv_channels, _field(text, "linear_conv_kernel_dim", default=4)))
        elif t == "full_attention":
            layers.append(LayerInfo(i, "attention", attn, ffn))
        else:
            raise ValueError(f"layer_types[{i}]={t!r} is not supported (supported: linear_attention, full_attention)")
    return layers


def analyze(cfg: dict) -> ModelPlan:
    """The layer plan of a model config (see the module docstring)."""
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type={model_type!r} is not supported (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    layers = _nemotron_h(cfg) if model_type == "nemotron_h" else _qwen(cfg)
    text = cfg.get("text_config", cfg)
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(
        str(text.get("torch_dtype", cfg.get("torch_dtype", "bfloat16"))), "bf16")
    return ModelPlan(model_type, tuple(layers), dtype)


def mamba2_layers(cfg: dict) -> list:
    """The Mamba-2 layers of a config (a Nemotron-H / Nemotron-3 model)."""
    layers = analyze(cfg).of_kind("mamba2")
    if not layers:
        raise ValueError(f"model_type={cfg.get('model_type')!r} has no Mamba-2 layers")
    return layers
