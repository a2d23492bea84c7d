"""Reads the SSM layers of a Hugging Face config.json (Nemotron-H / Nemotron-3 for now)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from trtllm_replayssm.config import Mamba2LayerShape

DEFAULT_CONFIG = "nemotron_h_tiny.json"


@dataclass(frozen=True)
class SSMLayer:
    index: int  # position in the model's layer stack
    shape: Mamba2LayerShape


def load_config(path: str | Path | None = None) -> dict:
    """A config.json as a dict; None loads the small config bundled with the package."""
    if path is None:
        return json.loads(resources.files("trtllm_replayssm.configs").joinpath(DEFAULT_CONFIG).read_text())
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    return json.loads(path.read_text())


def _field(cfg: dict, *names):
    for n in names:
        if n in cfg:
            return cfg[n]
    raise ValueError(f"config has none of the fields {names}")


def mamba2_layers(cfg: dict) -> list[SSMLayer]:
    """The Mamba-2 layers of a Nemotron-H config (hybrid_override_pattern 'M' entries), validated."""
    if cfg.get("model_type") != "nemotron_h":
        raise ValueError(f"model_type={cfg.get('model_type')!r} is not supported here (supported: 'nemotron_h')")
    pattern = _field(cfg, "hybrid_override_pattern")
    shape = Mamba2LayerShape(nheads=_field(cfg, "mamba_num_heads"), head_dim=_field(cfg, "mamba_head_dim"),
                             dstate=_field(cfg, "ssm_state_size"), ngroups=_field(cfg, "n_groups"))
    shape.validate()
    return [SSMLayer(i, shape) for i, kind in enumerate(pattern) if kind == "M"]
