"""`inspect`: what a build folder (or one of its engines) holds, from its config.json: per layer kind, mode,
ring length, precisions, state bytes per slot; each phase's engine I/O; the most concurrent requests at the
built limits against the conventional layout (planner.py); the TensorRT line and SM targets."""

from __future__ import annotations

import json
from pathlib import Path

from trtllm_replayssm.model_config import analyze
from trtllm_replayssm.planner import PlanSettings, request_bytes

H200_BYTES = 141e9  # the GPU the concurrency figures assume unless told otherwise


def find_config(path) -> Path:
    """config.json of a build folder, or beside an engine / ONNX file of one."""
    path = Path(path)
    config = path / "config.json" if path.is_dir() else path.parent / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{path}: no config.json {'in it' if path.is_dir() else 'beside it'} "
                                "(a folder written by `trtllm-replayssm build`)")
    return config


def summary(path, gpu_bytes: float = H200_BYTES) -> dict:
    """The inspect report of a build folder or engine as a dict (what --json prints)."""
    config_path = find_config(path)
    try:
        return _summary(path, config_path, gpu_bytes)
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        raise ValueError(f"{config_path} is malformed ({type(e).__name__}: {e})") from None


def _summary(path, config_path: Path, gpu_bytes: float) -> dict:
    config = json.loads(config_path.read_text())
    if not isinstance(config, dict) or "format" not in config or "phases" not in config:
        raise ValueError(f"{config_path} is not the config.json of a `trtllm-replayssm build` output")
    if config["format"] != 1:
        raise ValueError(f"{config_path}: format {config['format']!r} is not one this version reads (1)")
    s = config["settings"]
    kinds = {}
    for layer in config["layers"]:
        k = kinds.setdefault(layer["kind"], {"layers": 0, "bytes_per_slot": 0})
        k["layers"] += 1
        k["bytes_per_slot"] += layer["bytes_per_slot"]
    plan = analyze(json.loads((config_path.parent / config["model"]["config"]).read_text()))
    spec = s["spec_tokens"]
    ps = PlanSettings(context_len=s["max_seq_len"], T=max(spec, 1), buffer_len=s["buffer_len"],
                      spec_buffer_len=s["buffer_len"] if spec else None, state_dtype=s["state_dtype"],
                      act_dtype=s["act_dtype"], kv_dtype=s["act_dtype"])
    weights = sum(p.stat().st_size for p in config_path.parent.glob("*.onnx.data")) / max(len(config["phases"]), 1)
    modes = ("replay_spec", "conventional_spec") if spec else ("replay", "conventional")
    per_request = {m: request_bytes(plan, m, ps)["total"] for m in modes}
    fits = {m: max(int((gpu_bytes - weights) // b), 0) for m, b in per_request.items()}
    return {
        "path": str(path), "model": config["model"]["name"], "model_type": config["model"]["model_type"],
        "settings": s, "layer_kinds": kinds, "bytes_per_slot": config["bytes_per_slot"],
        "phases": {p: {"inputs": v["inputs"], "outputs": v["outputs"], "aliases": v["aliases"],
                       "engines": v["engines"]} for p, v in config["phases"].items()},
        "concurrency": {"gpu_bytes": gpu_bytes, "weight_bytes": weights, "built_slots": s["num_slots"],
                        "bytes_per_request": per_request, "requests_that_fit": fits},
        "plugins": config["plugins"], "tensorrt": config["tensorrt"],
    }


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def format_summary(r: dict) -> str:
    s = r["settings"]
    lines = [f"{r['path']}: {r['model']} ({r['model_type']}), mode {s['mode']}, L={s['buffer_len']}, "
             f"state {s['state_dtype']}, act {s['act_dtype']}, read copy {s['read_format']}, "
             f"{s['num_slots']} slots x {s['max_seq_len']} tokens" + (f", T={s['spec_tokens']}" if s["spec_tokens"] else ""),
             "", f"{'layer kind':<12} {'layers':>6} {'KiB per slot':>14}"]
    for kind, k in r["layer_kinds"].items():
        lines.append(f"{kind:<12} {k['layers']:>6} {k['bytes_per_slot'] / 1024:>14.1f}")
    lines.append(f"{'total':<12} {'':>6} {r['bytes_per_slot'] / 1024:>14.1f}")
    t = r["tensorrt"]
    targets = ", ".join(f"SM{x}" for x in t["targets"]) or "none (ONNX only)"
    lines += ["", f"TensorRT: {t['backend'] or 'none'} {t['version'] or ''}; targets {targets}; plugins "
              f"{', '.join(r['plugins']['used'])} (v{r['plugins']['version']}, namespace {r['plugins']['namespace']})"]
    for phase, p in r["phases"].items():
        engines = ", ".join(p["engines"].values()) or "no engine"
        lines += ["", f"phase {phase} ({engines})"]
        state_in = [i for i in p["inputs"] if i["name"].startswith("layer")]
        for i in p["inputs"]:
            if not i["name"].startswith("layer"):
                lines.append(f"  in   {i['name']:<28} {i['dtype']:<8} {_shape(i['shape'])}")
        for o in p["outputs"]:
            if o["name"] not in p["aliases"]:
                lines.append(f"  out  {o['name']:<28} {o['dtype']:<8} {_shape(o['shape'])}")
        lines.append(f"  state: {len(state_in)} inputs, {len(p['aliases'])} written (output <name>.out aliases <name>)")
    c = r["concurrency"]
    lines += ["", f"requests that fit in {c['gpu_bytes'] / 1e9:.0f} GB beside {c['weight_bytes'] / 1e9:.2f} GB of "
              f"weights at {s['max_seq_len']} tokens (planner; the engines were built for {c['built_slots']} slots):"]
    for mode, n in c["requests_that_fit"].items():
        lines.append(f"  {mode:<18} {n:>8}   ({c['bytes_per_request'][mode] / 2**20:.2f} MiB per request)")
    return "\n".join(lines)
