"""`trtllm-replayssm run`: decode every Mamba-2 layer of a model config with ReplaySSM and with conventional
decoding, side by side, for a batch of requests that start at different steps; report the agreement and
(on a GPU) the time per step. Without arguments it uses the small config bundled with the package, and the
GPU kernels when a CUDA device and the kernel library are present (the PyTorch reference otherwise)."""

from __future__ import annotations

import math
import time

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DEFAULT_BUFFER_LEN, PAD_SLOT_ID, ReplayConfig
from trtllm_replayssm.model_config import load_config, mamba2_layers
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import Mamba2StatePool


def register(sub):
    p = sub.add_parser("run", help="decode a model's Mamba-2 layers with ReplaySSM and conventional decoding")
    p.add_argument("--config", default=None, help="config.json or model directory (default: bundled tiny config)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--buffer-len", type=int, default=DEFAULT_BUFFER_LEN)
    p.add_argument("--state-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--act-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when usable)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=main)


def main(args) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and _lib.available() else "cpu"))
    torch.manual_seed(args.seed)
    layers = mamba2_layers(load_config(args.config))
    cfg = ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype)
    print(f"{len(layers)} Mamba-2 layers {layers[0].shape}, batch {args.batch}, {args.steps} steps, L={cfg.buffer_len}, "
          f"state {args.state_dtype}, activations {args.act_dtype}, on {device} "
          f"({'kernels' if device.type == 'cuda' else 'PyTorch reference'})")
    worst = 0.0
    replay_s = conv_s = 0.0
    for layer in layers:
        s = layer.shape
        pool = Mamba2StatePool(s, args.batch, cfg, device=device)
        pool.checkpoint.normal_()
        state = pool.checkpoint.clone()  # the conventional path's own copy
        A = -torch.exp(torch.rand(s.nheads, device=device) * math.log(16.0))
        D, dt_bias = torch.randn(s.nheads, device=device), torch.rand(s.nheads, device=device) * 3 - 4
        for step in range(args.steps):
            # Request b joins at step b (rows at different ring positions); earlier steps pad its row.
            slots = torch.tensor([b if b <= step else PAD_SLOT_ID for b in range(args.batch)], dtype=torch.int32,
                                 device=device)
            x = torch.randn(args.batch, s.nheads, s.head_dim, device=device).to(cfg.act_dtype)
            z = torch.randn_like(x)
            dt = torch.randn(args.batch, s.nheads, device=device).to(cfg.act_dtype)
            B = torch.randn(args.batch, s.ngroups, s.dstate, device=device).to(cfg.act_dtype)
            C = torch.randn_like(B)
            t0 = _now(device)
            y_rep = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
            t1 = _now(device)
            y_conv = conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
            t2 = _now(device)
            replay_s, conv_s = replay_s + t1 - t0, conv_s + t2 - t1
            live = slots >= 0
            if bool(live.any()):
                a, b = y_rep[live].double(), y_conv[live].double()
                worst = max(worst, float((a - b).norm() / b.norm()))
    print(f"max relative difference ReplaySSM vs conventional (per step, all layers): {worst:.2e}")
    if device.type == "cuda":
        n = len(layers) * args.steps
        print(f"eager time per layer-step (includes Python overhead): ReplaySSM {replay_s / n * 1e6:.1f} µs, "
              f"conventional {conv_s / n * 1e6:.1f} µs")
    return 0


def _now(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
