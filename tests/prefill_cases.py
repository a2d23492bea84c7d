"""Prefill problems shared by the CPU tests (test_prefill_ops.py) and the kernel tests (test_prefill_kernels.py):
random prompts of mixed lengths with padding rows, and the expected result built by conventional decode called
token by token, one row at a time."""

from __future__ import annotations

import torch

import gdn_cases
import mamba2_cases
from read_copy_checks import buffer_bytes, with_quantised_copies
from trtllm_replayssm.ops.conv1d import conv1d_update
from trtllm_replayssm.ops.gdn import gdn_conventional_decode
from trtllm_replayssm.ops.mamba2 import conventional_decode

# (batch, tokens, slots, lengths, slot_idx): mixed odd lengths, a padding row (its length is ignored), shuffled
# slots in a pool larger than the batch; one-token prompts; a batch of one full row.
LAYOUTS = {
    "mixed": (5, 7, 9, [7, 1, 4, 0, 3], [6, 0, 3, -1, 8]),
    "one_token": (3, 1, 4, [1, 1, 1], [2, -1, 0]),
    "single_row": (1, 6, 2, [6], [1]),
}


def layout(name, device):
    b, S, slots, lengths, slot_idx = LAYOUTS[name]
    return b, S, slots, torch.tensor(lengths, dtype=torch.int32, device=device), \
        torch.tensor(slot_idx, dtype=torch.int32, device=device)


def tokens(t, b, S):
    """[b*S, ...] -> [b, S, ...] (None stays None)."""
    return None if t is None else t.reshape(b, S, *t.shape[1:])


def mamba2_prompt(shape, b, S, act_dtype, device, with_z=True):
    """(x, dt, B, C, z) [b, S, ...] in act_dtype."""
    return tuple(tokens(t, b, S) for t in mamba2_cases.step_inputs(shape, b * S, act_dtype, device, with_z))


def gdn_prompt(shape, b, S, act_dtype, device):
    """Raw (q, k, v, a, b) [b, S, ...]: q, k, v in act_dtype, gate projections fp32."""
    return tuple(tokens(t, b, S) for t in gdn_cases.raw_step_inputs(shape, b * S, act_dtype, device))


def random_pool(family_cases, shape, num_slots, cfg, device):
    """A pool of random checkpoints, rings and cursors with read copies consistent with the checkpoints: prefill
    must overwrite what it owns and leave the rest bit for bit."""
    return with_quantised_copies(family_cases.random_pool(shape, num_slots, cfg, device))


def live(lengths, slot_idx):
    """(row, slot, length) of the non-padding rows."""
    return [(b, s, n) for b, (s, n) in enumerate(zip(slot_idx.tolist(), lengths.tolist())) if s >= 0]


def expected_mamba2(pool, inputs, A, D, dt_bias, lengths, slot_idx, y):
    """Conventional decode token by token, row by row, on `pool` (a copy), then each slot reset to its final state
    (read copy from the checkpoint, empty ring). Writes y at the rows' prompt tokens."""
    x, dt, B, C, z = inputs
    for b, s, n in live(lengths, slot_idx):
        pool.checkpoint[s] = 0
        row = torch.tensor([s], dtype=torch.int32, device=x.device)
        for t in range(n):
            y[b:b + 1, t] = conventional_decode(pool.checkpoint, x[b:b + 1, t], dt[b:b + 1, t], B[b:b + 1, t],
                                                C[b:b + 1, t], A, D=D, z=None if z is None else z[b:b + 1, t],
                                                dt_bias=dt_bias, slot_idx=row)
        pool.reset_slot(s, pool.checkpoint[s].clone())


def expected_gdn(pool, inputs, A_log, dt_bias, lengths, slot_idx, y):
    """As expected_mamba2, for a GdnStatePool and raw gates."""
    q, k, v, a, bb = inputs
    for b, s, n in live(lengths, slot_idx):
        pool.checkpoint[s] = 0
        row = torch.tensor([s], dtype=torch.int32, device=v.device)
        for t in range(n):
            y[b:b + 1, t] = gdn_conventional_decode(pool.checkpoint, pool.shape, q[b:b + 1, t], k[b:b + 1, t],
                                                    v[b:b + 1, t], a=a[b:b + 1, t], b=bb[b:b + 1, t], A_log=A_log,
                                                    dt_bias=dt_bias, slot_idx=row)
        pool.reset_slot(s, pool.checkpoint[s].clone())


def expected_conv1d(state, x, weight, bias, lengths, slot_idx, y):
    """conv1d_update token by token, row by row, from a zero state. Returns y."""
    for b, s, n in live(lengths, slot_idx):
        state[s] = 0
        row = torch.tensor([s], dtype=torch.int32, device=x.device)
        for t in range(n):
            y[b:b + 1, t] = conv1d_update(state, x[b:b + 1, t], weight, bias, True, slot_idx=row)
    return y


def assert_pools_identical(pool, expected, where):
    """Every buffer of every slot bit for bit (NaN patterns included)."""
    for name, t in pool.buffers.items():
        for s in range(pool.num_slots):
            assert torch.equal(buffer_bytes(t[s]), buffer_bytes(expected.buffers[name][s])), f"{where}: {name} slot {s}"


def assert_bits_equal(a, b, where):
    assert torch.equal(buffer_bytes(a), buffer_bytes(b)), f"{where}: differs at {(a != b).nonzero()[:4].tolist()}"
