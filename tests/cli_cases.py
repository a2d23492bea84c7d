"""The command line's input table: per subcommand, argument lists that must be refused (with the key words of the
one-line message) and argument lists that must work (with words their output shows), and the small good values
the property-based test mixes with bad ones. `{name}` in an argument is a path from `paths(tmp)`."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import shutil
from importlib import resources
from pathlib import Path

import pytest
import torch

from trtllm_replayssm.cli import main

PROG = "trtllm-replayssm"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


def paths(tmp) -> dict:
    """Model directories and files for `{name}` placeholders: a copy of the bundled tiny config, a small Qwen3.5
    config (3 GDN layers of 2 key and 4 value heads of 64), a directory without config.json, a file that is not
    JSON, a JSON list, a config of an unsupported model type and one with a field of the wrong type."""
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    with resources.as_file(resources.files("trtllm_replayssm.configs") / "nemotron_h_tiny.json") as src:
        shutil.copy(src, model / "config.json")
    (tmp / "empty").mkdir(exist_ok=True)
    (tmp / "notjson.json").write_text("model_type: nemotron_h\n")
    (tmp / "list.json").write_text("[1, 2]\n")
    (tmp / "llama.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2}))
    gdn = json.loads((resources.files("trtllm_replayssm.configs") / "qwen3_5_4b.json").read_text())
    gdn["text_config"].update(num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
                              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64,
                              linear_value_head_dim=64)
    (tmp / "gdn_tiny.json").write_text(json.dumps(gdn))
    (tmp / "badfield.json").write_text(json.dumps({**json.loads((model / "config.json").read_text()),
                                                   "mamba_num_heads": "sixteen"}))
    (tmp / "badhead.json").write_text(json.dumps({**json.loads((model / "config.json").read_text()),
                                                  "mamba_head_dim": 96}))
    return {"model": str(model), "badhead": str(tmp / "badhead.json"), "model_json": str(model / "config.json"), "empty": str(tmp / "empty"),
            "notjson": str(tmp / "notjson.json"), "list": str(tmp / "list.json"), "llama": str(tmp / "llama.json"),
            "badfield": str(tmp / "badfield.json"), "gdn_tiny": str(tmp / "gdn_tiny.json"), "nodir": str(tmp / "nodir" / "x.png")}


TINY_BUILD = ["--model", "nemotron_h_tiny", "--onnx-only", "--max-batch", "2", "--max-seq-len", "32",
              "--buffer-len", "4", "--act-dtype", "fp32"]


@functools.cache
def tiny_build(root: str) -> str:
    """A `build --onnx-only` output of the bundled tiny model under `root` (made once): `{build}` in a row."""
    out = Path(root) / "build"
    code, _, err = invoke(["build", "--output", str(out), *TINY_BUILD])
    assert code == 0, err
    return str(out)


def fill(argv, where: dict) -> list:
    if any("{build}" in a for a in argv):
        where = dict(where, build=tiny_build(str(Path(where["empty"]).parent)))
    return [a.format(**where) for a in argv]


def invoke(argv) -> tuple[int, str, str]:
    """main(argv) in-process: (exit status, stdout, stderr); SystemExit (argparse, usage errors) gives its code.
    Any other exception propagates: a traceback the user would see."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _range(flag, lo, hi):
    return [flag, f"out of range ({lo}..{hi})"]


# (argv, words of the message); every option of every subcommand has at least one row.
BAD = [
    ([], ["a command is required", "run", "plan"]),
    (["nosuch"], ["invalid choice", "nosuch"]),
    (["run", "--config", "nosuch"], ["--config", "'nosuch'", "bundled config", "nemotron_h_tiny"]),
    (["run", "--config", ""], ["--config", "empty"]),
    (["run", "--config", "{empty}"], ["--config", "has no config.json"]),
    (["run", "--config", "{notjson}"], ["model config", "notjson.json", "Expecting value"]),
    (["run", "--config", "{list}"], ["model config", "JSON object", "list"]),
    (["run", "--config", "{llama}"], ["model config", "model_type='llama' is not supported"]),
    (["run", "--config", "{badfield}"], ["model config", "badfield.json", "malformed"]),
    (["run", "--batch", "0"], _range("--batch", 1, 4096)),
    (["run", "--batch", "-1"], _range("--batch", 1, 4096)),
    (["run", "--batch", "100000"], _range("--batch", 1, 4096)),
    (["run", "--batch", "two"], ["--batch", "'two' is not an integer"]),
    (["run", "--steps", "0"], _range("--steps", 1, 1000000)),
    (["run", "--steps", "-3"], _range("--steps", 1, 1000000)),
    (["run", "--steps", "1000000000"], _range("--steps", 1, 1000000)),
    (["run", "--steps", "2.5"], ["--steps", "'2.5' is not an integer"]),
    (["run", "--buffer-len", "0"], _range("--buffer-len", 1, 64)),
    (["run", "--buffer-len", "65"], _range("--buffer-len", 1, 64)),
    (["run", "--state-dtype", "fp8"], ["--state-dtype", "invalid choice", "'fp8'"]),
    (["run", "--act-dtype", "int8"], ["--act-dtype", "invalid choice", "'int8'"]),
    (["run", "--device", "tpu"], ["--device", "'tpu' is not a device"]),
    (["run", "--device", "cuda:99"], ["--device", "cuda:99"]),
    pytest.param(["run", "--device", "cuda"], ["--device", "no CUDA device is usable"], marks=NO_CUDA),
    (["run", "--seed", "-1"], _range("--seed", 0, 2**63 - 1)),
    (["run", "--latency-route-bytes", "-1"], ["--latency-route-bytes", "out of range"]),
    (["run", "--state-dtype", "fp16", "--latency-route-bytes", "4096"],
     ["latency_route_bytes=4096", "state_dtype=fp32"]),
    (["run", "--quiet", "loud"], ["unrecognized arguments", "loud"]),
    (["run", "--nosuch"], ["unrecognized arguments", "--nosuch"]),
    (["plan", "--config", "nosuch"], ["--config", "'nosuch'", "bundled config"]),
    (["plan", "--config", "{llama}"], ["model_type='llama' is not supported"]),
    (["plan", "--context", "0"], _range("--context", 1, 1 << 24)),
    (["plan", "--context", "-5"], _range("--context", 1, 1 << 24)),
    (["plan", "--context", "99999999999"], _range("--context", 1, 1 << 24)),
    (["plan", "--gpu-mem-gb", "0"], ["--gpu-mem-gb", "out of range", "more than 0"]),
    (["plan", "--gpu-mem-gb", "-1"], ["--gpu-mem-gb", "out of range"]),
    (["plan", "--gpu-mem-gb", "nan"], ["--gpu-mem-gb", "nan", "out of range"]),
    (["plan", "--gpu-mem-gb", "inf"], ["--gpu-mem-gb", "inf", "out of range"]),
    (["plan", "--gpu-mem-gb", "lots"], ["--gpu-mem-gb", "'lots' is not a number"]),
    (["plan", "--weight-gb", "-1"], ["--weight-gb", "out of range"]),
    (["plan", "--weight-gb", "200"], ["--weight-gb 200", "--gpu-mem-gb 141"]),
    (["plan", "--T", "0"], _range("--T", 2, 8)),
    (["plan", "--T", "1"], _range("--T", 2, 8)),
    (["plan", "--T", "9"], _range("--T", 2, 8)),
    (["plan", "--buffer-len", "0"], _range("--buffer-len", 1, 64)),
    (["plan", "--buffer-len", "64"], ["--buffer-len + --T = 68", "--spec-buffer-len"]),
    (["plan", "--spec-buffer-len", "3"], _range("--spec-buffer-len", 4, 64)),
    (["plan", "--spec-buffer-len", "65"], _range("--spec-buffer-len", 4, 64)),
    (["plan", "--spec-buffer-len", "6"], ["spec_buffer_len=6", "2T=8"]),
    (["plan", "--state-dtype", "fp64"], ["--state-dtype", "invalid choice"]),
    (["plan", "--act-dtype", "fp8"], ["--act-dtype", "invalid choice"]),
    (["build", "--model", "nemotron_h_tiny"], ["--output DIR is required"]),
    (["build", "--output", ""], ["--output", "empty"]),
    (["build", "--output", "{empty}/b", "--read-format", "fp4"], ["--read-format", "invalid choice"]),
    (["build", "--output", "{empty}/b", "--read-format", "bf16"], ["read_format='bf16'", "engines: none"]),
    (["build", "--output", "{empty}/b", "--mode", "snapshot"], ["--mode", "invalid choice"]),
    (["build", "--output", "{empty}/b", "--max-batch", "0"], _range("--max-batch", 1, 4096)),
    (["build", "--output", "{empty}/b", "--max-seq-len", "1"], _range("--max-seq-len", 2, 1 << 20)),
    (["build", "--output", "{empty}/b", "--spec-tokens", "9"], _range("--spec-tokens", 0, 8)),
    (["build", "--output", "{empty}/b", "--spec-tokens", "1"], ["--spec-tokens 1", "2..8, or 0"]),
    (["build", "--output", "{empty}/b", "--spec-tokens", "4", "--buffer-len", "6"], ["buffer_len=6", "2T"]),
    (["build", "--output", "{empty}/b", "--target", "40"], _range("--target", 50, 130)),
    (["build", "--output", "{empty}/b", "--target", "89,,90"], ["--target", "empty entry"]),
    (["build", "--output", "{empty}/b", "--model", "{llama}"], ["model_type='llama' is not supported"]),
    (["build", "--output", "{empty}/b", "--model", "{badhead}"], ["head_dim=96", "supported"]),
    (["build", "--onnx-only", "x"], ["unrecognized arguments", "x"]),
    (["build", "--quiet", "x"], ["unrecognized arguments", "x"]),
    (["inspect"], ["the following arguments are required", "DIR|ENGINE"]),
    (["inspect", "{empty}"], ["no config.json in it", "trtllm-replayssm build"]),
    (["inspect", "{model_json}"], ["config.json is not the config.json of a `trtllm-replayssm build` output"]),
    (["inspect", "{empty}/x.engine"], ["no config.json beside it"]),
    (["inspect", "{build}", "--json", "x"], ["unrecognized arguments", "x"]),
    (["inspect", "{build}", "--gpu-gb", "0"], ["--gpu-gb", "out of range"]),
    (["serve", "--engine", ""], ["--engine", "empty"]),
    (["serve", "--engine", "{build}", "nemotron_h_tiny"], ["MODEL or --engine DIR, not both"]),
    (["serve", "--executor", "cuda"], ["--executor", "invalid choice"]),
    (["triton-repo", "--output", "{empty}/r", "--engine", "{empty}"], ["--engine", "no config.json"]),
    (["triton-repo", "--output", "{empty}/r", "--executor", "x"], ["--executor", "invalid choice"]),
    (["triton", "--engine", "{empty}"], ["--engine", "no config.json"]),
    (["triton", "--executor", "x"], ["--executor", "invalid choice"]),
    (["build", "--dry-run", "yes"], ["unrecognized arguments", "yes"]),
    (["build", "--dry-run", "--model", "nosuch"], ["--model", "'nosuch'", "bundled config"]),
    (["build", "--dry-run", "--model", "{notjson}"], ["model config", "Expecting value"]),
    (["build", "--dry-run", "--buffer-len", "-4"], _range("--buffer-len", 1, 64)),
    (["build", "--dry-run", "--state-dtype", "int4"], ["--state-dtype", "invalid choice"]),
    (["build", "--dry-run", "--act-dtype", "int4"], ["--act-dtype", "invalid choice"]),
    (["drift", "--steps", "0"], _range("--steps", 1, 1000000)),
    (["drift", "--steps", "-1"], _range("--steps", 1, 1000000)),
    (["drift", "--steps", "2000000"], _range("--steps", 1, 1000000)),
    (["drift", "--checkpoints", "a,b"], ["--checkpoints", "'a' is not an integer"]),
    (["drift", "--checkpoints", "0"], _range("--checkpoints", 1, 1000000)),
    (["drift", "--checkpoints", "5,,6"], ["--checkpoints", "empty entry"]),
    (["drift", "--heads", "0"], _range("--heads", 1, 1024)),
    (["drift", "--heads", "3"], ["--groups 2", "--heads 3"]),
    (["drift", "--heads", "5000"], _range("--heads", 1, 1024)),
    (["drift", "--head-dim", "32"], ["--head-dim", "invalid choice"]),
    (["drift", "--dstate", "100"], ["--dstate", "invalid choice"]),
    (["drift", "--groups", "0"], _range("--groups", 1, 1024)),
    (["drift", "--groups", "3"], ["--groups 3", "--heads 8"]),
    (["drift", "--batch", "0"], _range("--batch", 1, 4096)),
    (["drift", "--buffer-len", "0"], _range("--buffer-len", 1, 64)),
    (["drift", "--configs", "foo"], ["--configs", "'foo' is not one of", "replay fp32"]),
    (["drift", "--configs", ""], ["--configs", "empty entry"]),
    (["drift", "--seed", "x"], ["--seed", "'x' is not an integer"]),
    (["drift", "--png", "{nodir}"], ["--png"]),
    (["drift", "--quiet", "please"], ["unrecognized arguments", "please"]),
    (["info", "--verbose"], ["unrecognized arguments", "--verbose"]),
    (["serve", "nosuch"], ["model", "'nosuch'", "bundled config"]),
    (["serve", "--device", "tpu"], ["--device", "'tpu' is not a device"]),
    (["serve", "--mode", "fast"], ["--mode", "invalid choice"]),
    (["serve", "--buffer-len", "0"], _range("--buffer-len", 1, 64)),
    (["serve", "--state-dtype", "fp8"], ["--state-dtype", "invalid choice"]),
    (["serve", "--read-format", "int4"], ["--read-format", "invalid choice"]),
    (["serve", "--dtype", "fp64"], ["--dtype", "invalid choice"]),
    (["serve", "--max-batch", "0"], _range("--max-batch", 1, 4096)),
    (["serve", "--max-seq-len", "1"], _range("--max-seq-len", 2, 1 << 20)),
    (["serve", "--max-queue", "-1"], _range("--max-queue", 0, 1 << 20)),
    (["serve", "--pool-gib", "0"], ["--pool-gib", "out of range"]),
    (["serve", "--pool-gib", "lots"], ["--pool-gib", "'lots' is not a number"]),
    (["serve", "--seed", "-1"], _range("--seed", 0, 2**63 - 1)),
    (["serve", "--host", "no such host!"], ["--host", "no such host!"]),
    (["serve", "--port", "0"], _range("--port", 1, 65535)),
    (["serve", "--served-model-name", ""], ["--served-model-name", "empty"]),
    (["serve", "--read-format", "fp8", "--state-dtype", "fp32", "--buffer-len", "4", "--max-batch", "2",
      "--mode", "replay", "--dtype", "fp32", "--device", "cpu", "--seed", "1", "--max-seq-len", "8",
      "--max-queue", "1", "--pool-gib", "0.5", "--host", "127.0.0.1", "--port", "1", "--served-model-name", "m", "--nosuch"],
     ["unrecognized arguments", "--nosuch"]),
    (["bench-serve", "--url", "http://127.0.0.1:1"], ["cannot reach", "127.0.0.1:1"]),
    (["bench-serve", "--url", "nourl"], ["--url", "nourl"]),
    (["bench-serve", "--model", ""], ["--model", "empty"]),
    (["bench-serve", "--num-requests", "0"], _range("--num-requests", 1, 1000000)),
    (["bench-serve", "--concurrency", "0"], _range("--concurrency", 1, 100000)),
    (["bench-serve", "--prompt-len", "0"], _range("--prompt-len", 1, 1 << 20)),
    (["bench-serve", "--output-len", "0"], _range("--output-len", 1, 1 << 20)),
    (["bench-serve", "--vocab", "1"], _range("--vocab", 2, 1 << 24)),
    (["bench-serve", "--seed", "x"], ["--seed", "'x' is not an integer"]),
    (["bench-serve", "--json", "yes"], ["unrecognized arguments", "yes"]),
    (["bench-serve", "--quiet", "--json", "--nosuch"], ["unrecognized arguments", "--nosuch"]),
    (["bench-serve", "--api", "grpc"], ["--api", "invalid choice", "'grpc'"]),
    (["bench-serve", "--api", "triton", "--url", "http://127.0.0.1:1"], ["cannot reach", "127.0.0.1:1"]),
]

BAD += [
    (["triton-repo"], ["--output", "required"]),
    (["triton-repo", "--output", "{notjson}"], ["--output", "not a folder"]),
    (["triton-repo", "--output", "{empty}/r", "nosuch"], ["model", "'nosuch'"]),
    (["triton-repo", "--output", "{empty}/r", "--device", "tpu"], ["--device", "'tpu'"]),
    (["triton-repo", "--output", "{empty}/r", "--mode", "x"], ["--mode", "invalid choice"]),
    (["triton-repo", "--output", "{empty}/r", "--buffer-len", "99"], _range("--buffer-len", 1, 64)),
    (["triton-repo", "--output", "{empty}/r", "--state-dtype", "fp8"], ["--state-dtype", "invalid choice"]),
    (["triton-repo", "--output", "{empty}/r", "--read-format", "x"], ["--read-format", "invalid choice"]),
    (["triton-repo", "--output", "{empty}/r", "--dtype", "x"], ["--dtype", "invalid choice"]),
    (["triton-repo", "--output", "{empty}/r", "--max-batch", "0"], _range("--max-batch", 1, 4096)),
    (["triton-repo", "--output", "{empty}/r", "--max-seq-len", "0"], _range("--max-seq-len", 2, 1 << 20)),
    (["triton-repo", "--output", "{empty}/r", "--max-queue", "-2"], _range("--max-queue", 0, 1 << 20)),
    (["triton-repo", "--output", "{empty}/r", "--pool-gib", "-1"], ["--pool-gib", "out of range"]),
    (["triton-repo", "--output", "{empty}/r", "--seed", "-1"], _range("--seed", 0, 2**63 - 1)),
    (["triton-repo", "--output", "{empty}/r", "--name", ""], ["--name", "empty"]),
    (["triton", "--http-port", "0"], _range("--http-port", 1, 65535)),
    (["triton", "--grpc-port", "70000"], _range("--grpc-port", 1, 65535)),
    (["triton", "--metrics-port", "-1"], _range("--metrics-port", 1, 65535)),
    (["triton", "--http-port", "9000", "--grpc-port", "9000"], ["must differ"]),
    (["triton", "--model-control-mode", "poll"], ["--model-control-mode", "invalid choice", "'poll'"]),
    (["triton", "--name", "", "--device", "cpu", "--mode", "replay", "--buffer-len", "4", "--state-dtype", "fp32",
      "--read-format", "none", "--dtype", "fp32", "--max-batch", "2", "--max-seq-len", "8", "--max-queue", "1",
      "--pool-gib", "1", "--seed", "1"], ["--name", "empty"]),
]

# Commands that start or need a running server: their good runs are real server processes in
# tests/test_serve.py, not in-process rows here; the property-based test draws only refused argument lists.
SERVERS = {"serve", "bench-serve", "triton"}

# (argv, words the output shows); small sizes so that the whole table runs in seconds.
GOOD = [
    (["run", "--steps", "3", "--batch", "2", "--device", "cpu", "--seed", "5", "--quiet"],
     ["4 SSM layers (mamba2)", "batch 2, 3 steps", "on cpu", "max relative difference"]),
    (["run", "--config", "{gdn_tiny}", "--steps", "3", "--batch", "2", "--buffer-len", "2"],
     ["3 SSM layers (gdn)", "num_k_heads=2, num_v_heads=4, head_k_dim=64", "L=2"]),
    (["run", "--config", "{model}", "--steps", "2", "--batch", "2", "--state-dtype", "bf16", "--act-dtype", "bf16"],
     ["(mamba2)", "state bf16, activations bf16"]),
    (["run", "--config", "{model_json}", "--steps", "2", "--batch", "3", "--latency-route-bytes", "1000000"],
     ["batch 3, 2 steps"]),
    (["plan", "--config", "nemotron3_super", "--context", "1", "--gpu-mem-gb", "80", "--weight-gb", "10", "--T", "2"],
     ["context 1, T=2", "80 GB GPU, 10 GB weights", "replay_spec"]),
    (["plan", "--buffer-len", "64", "--spec-buffer-len", "64", "--state-dtype", "fp16", "--act-dtype", "fp32"],
     ["L=64, spec L=64", "state fp16, activations fp32"]),
    (["build", "--dry-run", "--model", "qwen3_5_4b", "--buffer-len", "8", "--state-dtype", "bf16",
      "--act-dtype", "fp16"], ["model_type qwen3_5", "L=8, state bf16"]),
    (["drift", "--steps", "3", "--checkpoints", "2,3", "--heads", "4", "--head-dim", "80", "--dstate", "128",
      "--groups", "1", "--batch", "1", "--buffer-len", "2", "--configs", "replay fp32,shared nvfp4 checkpoint",
      "--seed", "3", "--quiet"],
     ["nheads=4, head_dim=80, dstate=128, ngroups=1", "| replay fp32 |", "| shared nvfp4 checkpoint |", "3 steps |"]),
    (["info"], ["kernel library", "Mamba-2: head_dim", "Gated DeltaNet and KDA: head_k_dim and head_v_dim",
                "gated RMSNorm (the mixers' output norm): group sizes multiples of 8 up to 8192"]),
]

GOOD += [
    (["build", "--output", "{empty}/engine", "--onnx-only", "--model", "qwen3_5_tiny", "--mode", "conventional",
      "--buffer-len", "4", "--state-dtype", "bf16", "--act-dtype", "fp32", "--read-format", "none",
      "--max-batch", "3", "--max-seq-len", "16", "--spec-tokens", "2", "--target", "89", "--quiet"],
     ["export prefill.onnx", "export verify.onnx", "export commit.onnx", "engine skipped: --onnx-only", "done"]),
    (["inspect", "{build}"], ["mode replay, L=4", "mamba2", "phase decode", "in   positions", "requests that fit"]),
    (["inspect", "{build}", "--json", "--gpu-gb", "80"], ['"bytes_per_slot"', '"gpu_bytes": 80000000000']),
    (["triton-repo", "--output", "{empty}/repo2", "--engine", "{build}", "--executor", "onnx", "--name", "m2"],
     ["wrote", "m2/config.pbtxt"]),
    (["triton-repo", "--output", "{empty}/repo", "{model}", "--device", "cpu", "--mode", "conventional",
      "--buffer-len", "4", "--state-dtype", "bf16", "--read-format", "none", "--dtype", "fp32", "--max-batch", "2",
      "--max-seq-len", "64", "--max-queue", "3", "--pool-gib", "1", "--seed", "4", "--name", "m"],
     ["wrote", "m/config.pbtxt", "m/1/model.py"]),
]

# Values the property-based test draws: small good ones (valid runs stay fast) and bad ones of every kind.
SMALL_GOOD = {
    "--config": ["nemotron_h_tiny", "{gdn_tiny}"], "--model": ["nemotron_h_tiny", "qwen3_5_4b"],
    "--batch": ["1", "2"], "--steps": ["1", "2"], "--buffer-len": ["1", "2", "5", "64"],
    "--state-dtype": ["fp32", "fp16", "bf16"], "--act-dtype": ["fp32", "fp16", "bf16"], "--device": ["cpu"],
    "--seed": ["0", "9"], "--latency-route-bytes": ["0", "65536"], "--context": ["1", "8192"],
    "--gpu-mem-gb": ["0.5", "141"], "--weight-gb": ["0", "20"], "--T": ["2", "4", "8"],
    "--spec-buffer-len": ["16", "64"], "--checkpoints": ["1", "2,3"], "--heads": ["2", "4"],
    "--head-dim": ["64", "80"], "--dstate": ["64", "128"], "--groups": ["1", "2"],
    "--configs": ["replay fp32", "shared fp8 checkpoint,replay fp32 + nvfp4 reads"],
    "--gpu-gb": ["80", "141"], "--target": ["89"], "--spec-tokens": ["0", "2"], "--max-seq-len": ["16", "64"],
    "--mode": ["replay", "conventional"], "--read-format": ["none"], "--output": ["{empty}/prop_build"],
}
BAD_VALUES = ["0", "-1", "-7", "65", "4097", "99999999999999999999", "2.5", "nan", "inf", "-inf", "1e3", "abc", "",
              " ", "-", "--", "cuda", "tpu", "cuda:7", "fp8", "nosuch", "{empty}", "{notjson}", "{llama}", "{nodir}",
              "a,b", "5,,6", ",", "\x00", "\u00e9"]
# Prepended to every random argument list (later flags override them): the defaults of these runs are long.
SMALL_PREFIX = {"run": ["--steps", "2", "--batch", "2"], "drift": ["--steps", "3", "--heads", "2"],
                "build": ["--dry-run"], "inspect": ["{build}"], "serve": ["--nosuch"], "bench-serve": ["--nosuch"],
                "triton": ["--nosuch"], "triton-repo": ["--output", "{empty}/prop"]}
