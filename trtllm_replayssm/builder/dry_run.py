"""The builder's layer plan: what the ReplaySSM rewrite will do with each layer of a model (`--dry-run`)."""

from __future__ import annotations

from trtllm_replayssm.config import ReplayConfig, dtype_name
from trtllm_replayssm.model_config import ModelPlan
from trtllm_replayssm.pool import gdn_buffer_specs, mamba2_buffer_specs

_SPECS = {"mamba2": mamba2_buffer_specs, "gdn": gdn_buffer_specs}
_ACTIONS = {
    "mamba2": "ReplaySSM Mamba-2 decode over a state pool",
    "gdn": "ReplaySSM Gated DeltaNet decode over a state pool",
    "attention": "unchanged",
    "mlp": "unchanged",
    "moe": "unchanged",
}


def layer_rows(model: ModelPlan, cfg: ReplayConfig) -> list[dict]:
    """One row per layer: index, kind, shape, state and pool bytes per request slot, action."""
    rows = []
    for layer in model.layers:
        row = {"index": layer.index, "kind": layer.kind, "ffn": layer.ffn, "shape": layer.shape,
               "state_bytes": 0, "pool_bytes": 0, "action": _ACTIONS[layer.kind]}
        if layer.kind in _SPECS:
            specs = _SPECS[layer.kind](layer.shape, cfg)
            row["state_bytes"] = sum(s.bytes_per_slot for s in specs if s.name == "checkpoint")
            row["pool_bytes"] = sum(s.bytes_per_slot for s in specs)
        rows.append(row)
    return rows


def format_plan(model: ModelPlan, cfg: ReplayConfig) -> str:
    rows = layer_rows(model, cfg)
    lines = [f"model_type {model.model_type}, {len(rows)} layers, activations {model.act_dtype}; "
             f"ReplaySSM L={cfg.buffer_len}, state {dtype_name(cfg.state_dtype)}"]
    lines.append(f"{'layer':>5}  {'kind':<10} {'ffn':<4} {'state KiB':>10} {'pool KiB':>10}  shape -> action")
    for r in rows:
        shape = "" if r["shape"] is None else repr(r["shape"])
        lines.append(f"{r['index']:>5}  {r['kind']:<10} {r['ffn'] or '':<4} {r['state_bytes'] / 1024:>10.0f} "
                     f"{r['pool_bytes'] / 1024:>10.0f}  {shape} -> {r['action']}")
    ssm = [r for r in rows if r["pool_bytes"]]
    lines.append(f"SSM layers: {len(ssm)}; per request slot: state {sum(r['state_bytes'] for r in ssm) / 2**20:.1f} MiB, "
                 f"ReplaySSM pool {sum(r['pool_bytes'] for r in ssm) / 2**20:.1f} MiB")
    return "\n".join(lines)
