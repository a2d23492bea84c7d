"""CPU tests of the PyTorch references: replay against the fp64 sequential recurrence, L=1 anchor, flush."""

import pytest
import torch

from mamba2_cases import clone_pool, layer_params, random_pool, rel_err, slot_map, step_inputs
from oracle import SequentialOracle
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.ops.mamba2.reference import mamba2_prefill, mamba2_sequence, mamba2_step
from trtllm_replayssm.ops.mamba2.replay_reference import replay_row
from trtllm_replayssm.pool import Mamba2StatePool

SMALL = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=2)


@pytest.mark.parametrize("t", [1, 2, 5, 16])
@pytest.mark.parametrize("flush", [False, True], ids=["output_only", "flush"])
def test_replay_row_matches_fp64_recurrence(t, flush):
    """Both replay routes, in fp64, equal the sequential recurrence to fp64 rounding."""
    H, P, N = 4, 64, 64
    A = -torch.exp(torch.rand(H, dtype=torch.float64) * 2.7)
    S0 = torch.randn(H, P, N, dtype=torch.float64)
    xs = torch.randn(t, 1, H, P, dtype=torch.float64)
    dts = torch.rand(t, 1, H, dtype=torch.float64) * 0.3 + 0.01
    Bs = torch.randn(t, 1, H, N, dtype=torch.float64)
    C = torch.randn(1, H, N, dtype=torch.float64)
    Cs = C.expand(t, 1, H, N)
    ys, S = mamba2_sequence(S0[None], xs, dts, A, Bs, Cs, dt_softplus=False)
    y, S_replay = replay_row(S0, xs[:, 0], dts[:, 0], Bs[:, 0], C[0], A, flush)
    assert rel_err(y, ys[-1, 0]) < 1e-12, "replayed output differs from the recurrence"
    if flush:
        assert rel_err(S_replay, S[0]) < 1e-12, "flushed state differs from the recurrence"
    else:
        assert S_replay is None


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "latency_route"])
@pytest.mark.parametrize("L", [1, 3, 8])
def test_replay_reference_matches_recurrence_over_flushes(L, latency_route_bytes):
    """Pool-level replay (fp32) follows the fp64 recurrence for 3L+5 steps from desynchronised cursors,
    with shuffled slots and padding rows; with the ring (latency route off) and on the latency route (these
    small steps take it by default: every row flushes, the first step folding each row's records).
    Tolerance 2e-5: fp32 arithmetic over <= L replayed terms."""
    cfg = ReplayConfig(buffer_len=L, state_dtype=torch.float32, act_dtype=torch.float32,
                       latency_route_bytes=latency_route_bytes)
    pool = random_pool(SMALL, num_slots=7, cfg=cfg, device="cpu")
    A, D, dt_bias = layer_params(SMALL, "cpu")
    oracle = SequentialOracle(pool, A, D, dt_bias)
    for step in range(3 * L + 5):
        slots = slot_map(5, 7, n_pad=1, device="cpu")
        x, dt, B, C, z = step_inputs(SMALL, 5, torch.float32, "cpu")
        y = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        y_ref = oracle.step(slots, x, dt, B, C, z)
        keep = slots >= 0
        assert rel_err(y[keep], y_ref[keep]) < 2e-5, f"step {step}: replay output off the fp64 recurrence"


def _assert_steps_equal_conventional(pool, steps, after_step=None):
    """`steps` replay steps on `pool` (every slot, fp32) against conventional steps on a copy of its checkpoint:
    y and the checkpoint equal bit for bit after every step; after_step(step) adds the caller's checks."""
    state = pool.checkpoint.clone()
    A, D, dt_bias = layer_params(SMALL, "cpu")
    for step in range(steps):
        x, dt, B, C, z = step_inputs(SMALL, pool.num_slots, torch.float32, "cpu")
        y_rep = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias)
        y_conv = conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias)
        assert torch.equal(y_rep, y_conv), f"step {step}: y"
        assert torch.equal(pool.checkpoint, state), f"step {step}: checkpoint"
        if after_step is not None:
            after_step(step)


def test_l1_replay_equals_conventional_bitwise():
    """With L=1 every step flushes with an empty ring: replay must reproduce conventional decode bit for bit."""
    cfg = ReplayConfig(buffer_len=1, state_dtype=torch.float32, act_dtype=torch.float32)
    pool = random_pool(SMALL, num_slots=4, cfg=cfg, device="cpu", desync=False)
    _assert_steps_equal_conventional(pool, steps=4)


def test_flush_empties_ring_and_keeps_checkpoint_until_then():
    L = 4
    cfg = ReplayConfig(buffer_len=L, state_dtype=torch.float32, act_dtype=torch.float32, latency_route_bytes=0)
    pool = random_pool(SMALL, num_slots=2, cfg=cfg, device="cpu", desync=False)
    A, D, dt_bias = layer_params(SMALL, "cpu")
    before = pool.checkpoint.clone()
    for step in range(L):
        x, dt, B, C, z = step_inputs(SMALL, 2, torch.float32, "cpu")
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias)
        if step < L - 1:
            assert torch.equal(pool.checkpoint, before), "checkpoint changed on a non-flush step"
            assert pool.history().tolist() == [step + 1] * 2
    assert pool.history().tolist() == [0, 0]
    assert not torch.equal(pool.checkpoint, before), "flush did not store the checkpoint"


def test_latency_route_at_history_zero_is_the_conventional_step_bitwise():
    """A small step on the latency route (the default here) with every cursor at history 0 is the conventional
    step bit for bit: same y, same checkpoint; cursors stay at 0 and no ring record is written."""
    cfg = ReplayConfig(buffer_len=6, state_dtype=torch.float32, act_dtype=torch.float32)
    pool = random_pool(SMALL, num_slots=4, cfg=cfg, device="cpu", desync=False)
    assert pool.flushes_every_row(4) and pool.history().eq(0).all()
    before = clone_pool(pool)

    def history_stays_zero(step):
        assert pool.history().eq(0).all(), f"step {step}: history moved on the latency route"

    _assert_steps_equal_conventional(pool, steps=8, after_step=history_stays_zero)
    for name in ("ring_x", "ring_B", "ring_dt", "cursor"):
        assert torch.equal(pool.buffers[name], before.buffers[name]), f"{name} written on the latency route"


def test_latency_route_switches_with_the_batch_and_folds_the_records():
    """Steps alternate between few rows (the latency route: every row flushes, folding the records its ring
    holds) and more rows (the ring: output-only or flush by the cursor) over a limit of two rows' checkpoints,
    against the fp64 recurrence, from desynchronised cursors; a latency step leaves its rows at history 0."""
    L = 5
    slot_bytes = SMALL.nheads * SMALL.head_dim * SMALL.dstate * 4
    cfg = ReplayConfig(buffer_len=L, state_dtype=torch.float32, act_dtype=torch.float32,
                       latency_route_bytes=2 * slot_bytes)
    pool = random_pool(SMALL, num_slots=7, cfg=cfg, device="cpu")
    assert pool.flushes_every_row(2) and not pool.flushes_every_row(3)
    A, D, dt_bias = layer_params(SMALL, "cpu")
    oracle = SequentialOracle(pool, A, D, dt_bias)
    folded = 0
    for step in range(4 * L):
        batch = 2 if step % 3 == 0 else 5
        slots = slot_map(batch, 7, n_pad=1, device="cpu")
        hist_before = pool.history().clone()
        x, dt, B, C, z = step_inputs(SMALL, batch, torch.float32, "cpu")
        y = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        y_ref = oracle.step(slots, x, dt, B, C, z)
        keep = slots >= 0
        assert rel_err(y[keep], y_ref[keep]) < 2e-5, f"step {step}: output off the fp64 recurrence"
        live = slots[keep].long()
        if batch == 2:
            assert pool.history()[live].eq(0).all(), f"step {step}: a latency step left a record"
            folded += int(hist_before[live].gt(0).sum())
    assert folded > 0, "no latency step met a row with records to fold"


def test_prefill_then_decode_continues_the_recurrence():
    """Decoding from a prefilled checkpoint with an empty ring continues the prompt's recurrence."""
    cfg = ReplayConfig(buffer_len=4, state_dtype=torch.float32, act_dtype=torch.float32)
    A, D, dt_bias = layer_params(SMALL, "cpu")
    T = 9
    seq = [step_inputs(SMALL, 1, torch.float64, "cpu") for _ in range(T + 6)]
    xs, dts, Bs, Cs, zs = (torch.stack([s[i] for s in seq]) for i in range(5))
    ys_all, _ = mamba2_sequence(torch.zeros(1, 4, 64, 64, dtype=torch.float64), xs, dts, A.double(), Bs, Cs,
                                D.double(), zs, dt_bias.double())
    _, final = mamba2_prefill(xs[:T], dts[:T], A, Bs[:T], Cs[:T], D, zs[:T], dt_bias)
    pool = Mamba2StatePool(SMALL, 1, cfg)
    pool.reset_slot(0, final[0])
    for t in range(T, T + 6):
        y = replay_decode(pool, xs[t].float(), dts[t].float(), Bs[t].float(), Cs[t].float(), A, D=D,
                          z=zs[t].float(), dt_bias=dt_bias)
        assert rel_err(y, ys_all[t]) < 2e-5


def test_padded_rows_and_unused_slots_untouched_reference():
    cfg = ReplayConfig(buffer_len=5, state_dtype=torch.float32, act_dtype=torch.float32)
    pool = random_pool(SMALL, num_slots=6, cfg=cfg, device="cpu")
    before = clone_pool(pool)
    A, D, dt_bias = layer_params(SMALL, "cpu")
    slots = torch.tensor([3, -1, 1], dtype=torch.int32)
    x, dt, B, C, z = step_inputs(SMALL, 3, torch.float32, "cpu")
    out = torch.full_like(x, float("nan"))
    replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
    assert torch.isnan(out[1]).all() and not torch.isnan(out[[0, 2]]).any()
    for name, t in pool.buffers.items():
        for s in (0, 2, 4, 5):
            assert torch.equal(t[s], before.buffers[name][s]), f"{name} of unused slot {s} changed"
    assert int(pool.history()[3]) in (0, int(before.history()[3]) + 1)


def test_step_is_pure():
    """mamba2_step leaves its inputs unchanged (the reference has no hidden in-place updates)."""
    state = torch.randn(2, 4, 64, 64)
    keep = state.clone()
    A, D, dt_bias = layer_params(SMALL, "cpu")
    x, dt, B, C, z = step_inputs(SMALL, 2, torch.float32, "cpu")
    mamba2_step(state, x, dt, A, B, C, D, z, dt_bias)
    assert torch.equal(state, keep)
