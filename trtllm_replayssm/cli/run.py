"""`trtllm-replayssm run`: decode every SSM layer (Mamba-2 or Gated DeltaNet) of a model config with ReplaySSM and
with conventional decoding, side by side, for a batch of requests that start at different steps; report the agreement and
(on a GPU) the time per step. Without arguments it uses the small config bundled with the package, and the
GPU kernels when a CUDA device and the kernel library are present (the PyTorch reference otherwise)."""

from __future__ import annotations

import math
import time

import torch

from trtllm_replayssm import _lib
from trtllm_replayssm.config import DEFAULT_BUFFER_LEN, PAD_SLOT_ID, ReplayConfig
from trtllm_replayssm.model_config import analyze, load_config
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool


def register(sub):
    p = sub.add_parser("run", help="decode a model's SSM layers with ReplaySSM and conventional decoding")
    p.add_argument("--config", default=None, help="config.json or model directory (default: bundled tiny config)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--buffer-len", type=int, default=DEFAULT_BUFFER_LEN)
    p.add_argument("--state-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--act-dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when usable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--latency-route-bytes", type=int, default=0,
                   help="the latency route's limit (config.py; default 0 here: the run exercises the ring, which "
                        "its small batches would otherwise skip)")
    p.set_defaults(func=main)


def main(args) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() and _lib.available() else "cpu"))
    torch.manual_seed(args.seed)
    layers = [layer for layer in analyze(load_config(args.config)).layers if layer.kind in ("mamba2", "gdn")]
    if not layers:
        raise SystemExit("run: the config has no Mamba-2 or Gated DeltaNet layers")
    cfg = ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype, latency_route_bytes=args.latency_route_bytes)
    kinds = sorted({layer.kind for layer in layers})
    print(f"{len(layers)} SSM layers ({', '.join(kinds)}) {layers[0].shape}, batch {args.batch}, {args.steps} steps, "
          f"L={cfg.buffer_len}, state {args.state_dtype}, activations {args.act_dtype}, on {device} "
          f"({'kernels' if device.type == 'cuda' else 'PyTorch reference'})")
    worst = 0.0
    replay_s = conv_s = 0.0
    for layer in layers:
        step_fn = _mamba2_layer if layer.kind == "mamba2" else _gdn_layer
        run_step = step_fn(layer.shape, cfg, args.batch, device)
        for step in range(args.steps):
            # Request b joins at step b (rows at different ring positions); earlier steps pad its row.
            slots = torch.tensor([b if b <= step else PAD_SLOT_ID for b in range(args.batch)], dtype=torch.int32,
                                 device=device)
            y_rep, y_conv, t_rep, t_conv = run_step(slots)
            replay_s, conv_s = replay_s + t_rep, conv_s + t_conv
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


def _mamba2_layer(s, cfg, batch, device):
    """A Mamba-2 layer with random parameters and pool; returns one step on fresh random inputs, both ways."""
    pool = Mamba2StatePool(s, batch, cfg, device=device)
    pool.checkpoint.normal_()
    state = pool.checkpoint.clone()  # the conventional path's own copy
    A = -torch.exp(torch.rand(s.nheads, device=device) * math.log(16.0))
    D, dt_bias = torch.randn(s.nheads, device=device), torch.rand(s.nheads, device=device) * 3 - 4

    def step(slots):
        x = torch.randn(batch, s.nheads, s.head_dim, device=device).to(cfg.act_dtype)
        z = torch.randn_like(x)
        dt = torch.randn(batch, s.nheads, device=device).to(cfg.act_dtype)
        B = torch.randn(batch, s.ngroups, s.dstate, device=device).to(cfg.act_dtype)
        C = torch.randn_like(B)
        t0 = _now(device)
        y_rep = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        t1 = _now(device)
        y_conv = conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        return y_rep, y_conv, t1 - t0, _now(device) - t1

    return step


def _gdn_layer(s, cfg, batch, device):
    """A Gated DeltaNet layer with random gating parameters and pool (raw gates, q/k normalised by the op)."""
    pool = GdnStatePool(s, batch, cfg, device=device)
    pool.checkpoint.normal_(std=0.1)
    state = pool.checkpoint.clone()
    A_log = torch.rand(s.num_v_heads, device=device) - 2.0
    dt_bias = torch.randn(s.num_v_heads, device=device)

    def step(slots):
        q = torch.randn(batch, s.num_k_heads, s.head_k_dim, device=device).to(cfg.act_dtype)
        k = torch.randn_like(q)
        v = torch.randn(batch, s.num_v_heads, s.head_v_dim, device=device).to(cfg.act_dtype)
        a = torch.randn(batch, s.num_v_heads, device=device)
        b = torch.randn(batch, s.num_v_heads, device=device)
        gates = dict(a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots)
        t0 = _now(device)
        y_rep = gdn_replay_decode(pool, q, k, v, **gates)
        t1 = _now(device)
        y_conv = gdn_conventional_decode(state, s, q, k, v, **gates)
        return y_rep, y_conv, t1 - t0, _now(device) - t1

    return step


def _now(device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
