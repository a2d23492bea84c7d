"""`trtllm-replayssm run`: decode every SSM layer (Mamba-2 or Gated DeltaNet) of a model config with ReplaySSM and
with conventional decoding, side by side, for a batch of requests that start at different steps; report the agreement and
(on a GPU) the time per step. Without arguments it uses the small config bundled with the package, and the
GPU kernels when a CUDA device and the kernel library are present (the PyTorch reference otherwise)."""

from __future__ import annotations

import math
import time

import torch

from trtllm_replayssm.cli import args as cli
from trtllm_replayssm.config import PAD_SLOT_ID, ReplayConfig
from trtllm_replayssm.model_config import DEFAULT_CONFIG
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool, gdn_buffer_specs, mamba2_buffer_specs

_SPECS = {"mamba2": mamba2_buffer_specs, "gdn": gdn_buffer_specs}


def register(sub):
    p = sub.add_parser("run", help="decode a model's SSM layers with ReplaySSM and conventional decoding")
    cli.add_model(p)
    p.add_argument("--batch", type=cli.int_range(1, cli.MAX_BATCH), default=8,
                   help="requests; request b joins at step b (default %(default)s)")
    p.add_argument("--steps", type=cli.int_range(1, cli.MAX_STEPS), default=48,
                   help="decode steps per layer (default %(default)s)")
    cli.add_replay(p, act_dtype="fp32")
    cli.add_device(p)
    cli.add_seed(p)
    p.add_argument("--latency-route-bytes", type=cli.int_range(0, 1 << 40), default=0,
                   help="the latency route's limit (config.py; default 0 here: the run exercises the ring, which "
                        "its small batches would otherwise skip)")
    cli.add_quiet(p)
    p.set_defaults(func=main)


def main(args) -> int:
    model = cli.load_model(args.config)
    layers = [layer for layer in model.layers if layer.kind in _SPECS]
    with cli.usage_errors():
        device = cli.resolve_device(args.device, kernels=True)
        if not layers:
            raise cli.UsageError(f"model config {args.config or DEFAULT_CONFIG}: no Mamba-2 or Gated DeltaNet layers to decode")
        cfg = ReplayConfig(args.buffer_len, args.state_dtype, args.act_dtype,
                           latency_route_bytes=args.latency_route_bytes)
        cfg.validate()
        # One layer's pool and the conventional path's copy of its checkpoints are alive at a time.
        layer_bytes = max(sum(s.bytes_per_slot for s in _SPECS[layer.kind](layer.shape, cfg)) for layer in layers)
        cli.check_memory(2 * args.batch * layer_bytes, device, f"a batch of {args.batch} requests' state buffers")
    torch.manual_seed(args.seed)
    kinds = sorted({layer.kind for layer in layers})
    print(f"{len(layers)} SSM layers ({', '.join(kinds)}) {layers[0].shape}, batch {args.batch}, {args.steps} steps, "
          f"L={cfg.buffer_len}, state {args.state_dtype}, activations {args.act_dtype}, on {device} "
          f"({'kernels' if device.type == 'cuda' else 'PyTorch reference'})", flush=True)
    # Relative difference per (layer, step), poisoned: an entry left unwritten fails the check below.
    diffs = torch.full((len(layers), args.steps), float("nan"), device=device)
    replay_s = conv_s = 0.0
    with cli.progress(total=len(layers) * args.steps, args=args, desc="decode", unit="step") as bar:
        for i, layer in enumerate(layers):
            step_fn = _mamba2_layer if layer.kind == "mamba2" else _gdn_layer
            run_step = step_fn(layer.shape, cfg, args.batch, device)
            for step in range(args.steps):
                # Request b joins at step b (rows at different ring positions); earlier steps pad its row.
                slots = torch.tensor([b if b <= step else PAD_SLOT_ID for b in range(args.batch)],
                                     dtype=torch.int32, device=device)
                y_rep, y_conv, t_rep, t_conv = run_step(slots)
                replay_s, conv_s = replay_s + t_rep, conv_s + t_conv
                live = slots >= 0  # row 0 from step 0 on
                a, b = y_rep[live].double(), y_conv[live].double()
                diffs[i, step] = (a - b).norm() / b.norm()
                bar.update()
            del run_step  # frees the layer's pool before the next one is allocated
    worst = _worst(diffs.cpu(), [layer.index for layer in layers])
    print(f"max relative difference ReplaySSM vs conventional (per step, all layers): {worst:.2e}")
    if device.type == "cuda":
        n = len(layers) * args.steps
        print(f"eager time per layer-step (includes Python overhead): ReplaySSM {replay_s / n * 1e6:.1f} µs, "
              f"conventional {conv_s / n * 1e6:.1f} µs")
    return 0


def _worst(diffs: torch.Tensor, layer_index: list) -> float:
    """The largest relative difference of diffs [layer, step]; a Failure naming the first layer and step where it
    is not finite (a NaN or infinite output on either side; a `max` over Python floats would skip a NaN)."""
    bad = (~torch.isfinite(diffs)).nonzero()
    if len(bad):
        i, step = (int(v) for v in bad[0])
        raise cli.Failure(f"the outputs are not finite (relative difference {float(diffs[i, step])}) at layer "
                          f"{layer_index[i]}, step {step}; {len(bad)} of {diffs.numel()} layer-steps")
    return float(diffs.max())


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
