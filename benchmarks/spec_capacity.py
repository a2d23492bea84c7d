"""Requests that fit a fixed state budget with speculative decoding: ReplaySSM (one checkpoint + a ring of L >= 2T
records per SSM layer, a conv window of k-1+T) against the snapshot path (T states per SSM layer), on the
serve_decode.py configs. Real: the bytes per slot of the network's StateSet made with spec_tokens=T (what the
runtime and the engines allocate); planned: trtllm_replayssm/planner.py. Memory only: no GPU needed.

    python benchmarks/spec_capacity.py --out benchmarks/spec_capacity.md
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_decode import configs  # noqa: E402

from trtllm_replayssm.config import ReplayConfig  # noqa: E402
from trtllm_replayssm.model_config import analyze  # noqa: E402
from trtllm_replayssm.network import load_network  # noqa: E402
from trtllm_replayssm.planner import PlanSettings, request_bytes  # noqa: E402

BUDGET = 16 * 2**30
CONTEXT = 200


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--T", type=int, default=4)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    T, L = args.T, max(16, 2 * args.T)
    lines = [f"Requests that fit a 16 GiB state budget with speculative decoding (T={T}; ReplaySSM ring L={L}; fp32 "
             f"state, bf16 activations, KV cache of {CONTEXT} tokens; real: the StateSet's bytes per slot, planned: "
             "planner.py; `benchmarks/spec_capacity.py`):", "",
             "| config | snapshot path real / planned | ReplaySSM real / planned | ReplaySSM / snapshot |",
             "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, cfg in configs(False).items():
            cfg = dict(cfg, vocab_size=1024)  # the vocabulary holds no per-request state
            folder = Path(tmp) / name
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(cfg))
            plan = analyze(cfg)
            fits = {}
            for mode, planned_mode in (("conventional", "conventional_spec"), ("replay", "replay_spec")):
                net = load_network(str(folder), mode=mode, dtype="bf16", replay=ReplayConfig(L, "fp32"))
                real = net.new_state(1, CONTEXT, spec_tokens=T).bytes_per_slot
                settings = PlanSettings(context_len=CONTEXT, T=T, buffer_len=L, spec_buffer_len=L)
                planned = request_bytes(plan, planned_mode, settings)["total"]
                fits[mode] = (BUDGET // real, BUDGET // planned)
            c, r = fits["conventional"], fits["replay"]
            lines.append(f"| {name} | {c[0]} / {c[1]} | {r[0]} / {r[1]} | {r[0] / c[0]:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
