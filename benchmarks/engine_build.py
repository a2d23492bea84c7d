"""Engine builds at real layer shapes: `trtllm-replayssm build` of a few Nemotron-3-Super and Qwen3.5-122B-A10B
layers (random weights), replay and conventional, for SM89 with TensorRT-RTX (any machine; no GPU needed).

Configs (the bundled full configs' SSM and attention shapes and hidden size; the vocabulary cut to 8192 and the
MLP to 1024 so that the weights stay small: neither changes an SSM or attention layer):
- Super-3M1A: Nemotron-3-Super's Mamba-2 (H=128, P=64, N=128, G=8, hidden 4096) and attention, pattern MM*M;
- Qwen122B-3G1A: Qwen3.5-122B-A10B's Gated DeltaNet (HK=16, HV=64, K=V=128, hidden 3072) and gated attention.

    python benchmarks/engine_build.py --out benchmarks/engine_build.md

Prints and writes a table: export and engine-build seconds per phase, engine and weight sizes, the plugin library
size (it is serialised into every engine).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from trtllm_replayssm.builder.build import BuildSettings, build
from trtllm_replayssm.model_config import load_config

VOCAB, MLP = 8192, 1024


def configs() -> dict:
    sup = load_config("nemotron3_super")
    q = load_config("qwen3_5_122b_a10b")
    q = q.get("text_config", q)
    keep = ("hidden_size", "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel",
            "num_attention_heads", "num_key_value_heads", "head_dim")
    super_cfg = {k: sup[k] for k in keep} | {"model_type": "nemotron_h", "hybrid_override_pattern": "MM*M",
                                             "num_hidden_layers": 4, "intermediate_size": MLP, "vocab_size": VOCAB}
    qkeep = ("hidden_size", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
             "linear_value_head_dim", "linear_conv_kernel_dim", "num_attention_heads", "num_key_value_heads",
             "head_dim")
    qwen_cfg = {k: q[k] for k in qkeep} | {"model_type": "qwen3_5_text", "num_hidden_layers": 4,
                                           "layer_types": ["linear_attention"] * 3 + ["full_attention"],
                                           "intermediate_size": MLP, "vocab_size": VOCAB}
    return {"Super-3M1A": super_cfg, "Qwen122B-3G1A": qwen_cfg}


def one(name: str, cfg: dict, mode: str, args, work: Path) -> dict:
    model = work / name / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(cfg))
    out = work / name / mode
    lines = []
    t0 = time.perf_counter()
    config = build(str(model), out, BuildSettings(buffer_len=16, state_dtype="fp32", act_dtype="bf16", mode=mode,
                                                  max_batch=args.max_batch, max_seq_len=args.max_seq_len,
                                                  targets=[89]), log=lines.append)
    total = time.perf_counter() - t0
    row = {"config": name, "mode": mode, "total_s": total, "layers": len(config["layers"]),
           "weights_mib": (out / "decode.onnx.data").stat().st_size / 2**20,
           "library_mib": (out / "libreplayssm_trt.so").stat().st_size / 2**20}
    for line in lines:
        parts = line.split()
        if parts[0] == "export":
            row[f"export_{parts[1].split('.')[0]}_s"] = float(parts[2])
        elif parts[0] == "engine":
            phase = parts[1].split(".")[0]
            row[f"engine_{phase}_mib"] = float(parts[2])
            row[f"engine_{phase}_s"] = float(parts[4])
    return row


def table(rows, args) -> str:
    out = [f"TensorRT-RTX engine builds for SM89 on a CPU-only machine ({args.max_batch} slots, max_seq_len "
           f"{args.max_seq_len}, L=16, fp32 state, bf16 activations; vocabulary {VOCAB}, MLP {MLP}; engines hold "
           "the plugin library: engine size = weights + library + TensorRT's code):", "",
           "| config | mode | layers | export prefill / decode (s) | engine prefill / decode (s) | "
           "engine prefill / decode (MiB) | weights (MiB) | plugin library (MiB) | total (s) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['config']} | {r['mode']} | {r['layers']} | {r['export_prefill_s']:.1f} / "
                   f"{r['export_decode_s']:.1f} | {r['engine_prefill_s']:.1f} / {r['engine_decode_s']:.1f} | "
                   f"{r['engine_prefill_mib']:.0f} / {r['engine_decode_mib']:.0f} | {r['weights_mib']:.0f} | "
                   f"{r['library_mib']:.0f} | {r['total_s']:.0f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-seq-len", type=int, default=4096)
    p.add_argument("--configs", default="Super-3M1A,Qwen122B-3G1A")
    p.add_argument("--out", type=Path, default=None, help="write the table here (markdown)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="engine-build-") as work:
        for name in args.configs.split(","):
            for mode in ("replay", "conventional"):
                rows.append(one(name, configs()[name], mode, args, Path(work)))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    text = table(rows, args)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
