"""Minimal ReplaySSM decode: one Mamba-2 layer, a pool of request slots, prefill, then decode steps.

    python examples/replay_decode.py            # GPU kernels if present, else the PyTorch reference
"""

import math

import torch

from trtllm_replayssm import Mamba2LayerShape, Mamba2StatePool, ReplayConfig, replay_decode
from trtllm_replayssm.ops.mamba2.reference import mamba2_prefill

device = "cuda" if torch.cuda.is_available() else "cpu"
shape = Mamba2LayerShape(nheads=16, head_dim=64, dstate=128, ngroups=4)
# latency_route_bytes=0 keeps the ring in use: by default a step this small (three rows, 1.5 MiB of fp32 state)
# takes the latency route, where every row flushes at every step and the rings stay empty (config.py says why).
cfg = ReplayConfig(buffer_len=16, state_dtype="fp32", act_dtype="bf16", latency_route_bytes=0)
pool = Mamba2StatePool(shape, num_slots=4, cfg=cfg, device=device)
print("bytes per slot:", pool.bytes_per_slot())

H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
A = -torch.exp(torch.rand(H, device=device) * math.log(16.0))
D, dt_bias = torch.randn(H, device=device), torch.rand(H, device=device) - 3

# Prefill a 10-token prompt for slot 2 (sequential reference), hand its final state to the pool.
T = 10
_, final = mamba2_prefill(torch.randn(T, 1, H, P, device=device), torch.randn(T, 1, H, device=device), A,
                          torch.randn(T, 1, G, N, device=device), torch.randn(T, 1, G, N, device=device), D,
                          dt_bias=dt_bias)
pool.reset_slot(2, final[0])

# Decode 40 steps for slots 2 and 0 (slot 0 starts from a zero state); row 1 is padding.
slots = torch.tensor([2, -1, 0], dtype=torch.int32, device=device)
for step in range(40):
    x = torch.randn(3, H, P, device=device).bfloat16()
    y = replay_decode(pool, x, torch.randn(3, H, device=device).bfloat16(), torch.randn(3, G, N, device=device).bfloat16(),
                      torch.randn(3, G, N, device=device).bfloat16(), A, D=D, dt_bias=dt_bias, slot_idx=slots)
# A row's ring holds its tokens since the last flush; the step that would fill it (the 16th record) folds the ring
# into the checkpoint instead, so after 40 steps slots 0 and 2 hold 40 - 2 x 16 = 8 records; slots 1 and 3 took
# no step (row 1 is padding).
print("ring records per slot after 40 steps (L=16: a row flushes every 16 steps; 40 = 2 x 16 + 8):",
      pool.history().tolist())
print("with the default config this 3-row step takes the latency route (every row flushes at every step, the rings "
      "stay empty):", Mamba2StatePool(shape, num_slots=4, cfg=ReplayConfig(buffer_len=16), device=device)
      .flushes_every_row(3))
