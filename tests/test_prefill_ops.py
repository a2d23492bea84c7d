"""Prefill ops on CPU tensors: equal to conventional decode called token by token (bit for bit, every buffer of
every slot), close to the fp64 recurrence, outputs written at prompt tokens only, and a replay step straight after
prefill equal to a conventional step (the checkpoint hand-off)."""

import dataclasses

import pytest
import torch

import gdn_cases
import mamba2_cases
from conftest import poisoned
from mamba2_cases import rel_err
from oracle import SequentialOracle
from prefill_cases import (assert_bits_equal, assert_pools_identical, expected_conv1d, expected_gdn,
                           expected_mamba2, gdn_prompt, layout, live, mamba2_prompt, random_pool)
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.gdn.reference import gdn_gating, gdn_sequence, prepare_qk
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.ops.prefill import conv1d_prefill, gdn_prefill, mamba2_prefill, token_slots
from trtllm_replayssm.pool import Mamba2StatePool

M2 = Mamba2LayerShape(4, 64, 64, 2)
GDN = GdnLayerShape(2, 4, 64, 64)
KDA = GdnLayerShape(1, 2, 64, 64, per_channel_decay=True)
# (state dtype, activation dtype, read copy): fp32, then low-precision checkpoints and read copies.
CONFIGS = [("fp32", "fp32", "none"), ("fp32", "bf16", "fp8"), ("bf16", "bf16", "none"), ("fp16", "fp16", "fp8"),
           ("fp32", "bf16", "nvfp4")]
CFG_IDS = ["-".join(c) for c in CONFIGS]


def _cfg(state, act, fmt, L=4):
    return ReplayConfig(L, state, act, fmt)


@pytest.mark.parametrize("lay", ["mixed", "one_token", "single_row"])
@pytest.mark.parametrize("state, act, fmt", CONFIGS, ids=CFG_IDS)
def test_mamba2_prefill_equals_conventional_decode_token_by_token(lay, state, act, fmt):
    b, S, slots, lengths, slot_idx = layout(lay, "cpu")
    pool = random_pool(mamba2_cases, M2, slots, _cfg(state, act, fmt), "cpu")
    expected = pool.clone()
    A, D, dt_bias = mamba2_cases.layer_params(M2, "cpu")
    inputs = mamba2_prompt(M2, b, S, pool.cfg.act_dtype, "cpu")
    y = poisoned(inputs[0].shape, inputs[0].dtype, "cpu")
    y_exp = y.clone()
    got = mamba2_prefill(pool, *inputs[:4], A, D=D, z=inputs[4], dt_bias=dt_bias, lengths=lengths,
                         slot_idx=slot_idx, out=y)
    assert got is y
    expected_mamba2(expected, inputs, A, D, dt_bias, lengths, slot_idx, y_exp)
    assert_bits_equal(y, y_exp, "y")
    assert_pools_identical(pool, expected, "pool")
    for b_, s, n in live(lengths, slot_idx):
        assert not torch.isnan(y[b_, :n]).any() and torch.isnan(y[b_, n:]).all(), f"row {b_}"
        assert int(pool.history()[s]) == 0 and int(pool.origin()[s]) == 0


@pytest.mark.parametrize("lay", ["mixed", "one_token"])
@pytest.mark.parametrize("state, act, fmt", [CONFIGS[0], CONFIGS[1], CONFIGS[2]], ids=CFG_IDS[:3])
def test_gdn_prefill_equals_conventional_decode_token_by_token(lay, state, act, fmt):
    b, S, slots, lengths, slot_idx = layout(lay, "cpu")
    pool = random_pool(gdn_cases, GDN, slots, _cfg(state, act, fmt), "cpu")
    expected = pool.clone()
    A_log, dt_bias = gdn_cases.gate_params(GDN, "cpu")
    q, k, v, a, bb = inputs = gdn_prompt(GDN, b, S, pool.cfg.act_dtype, "cpu")
    y = poisoned(v.shape, v.dtype, "cpu")
    y_exp = y.clone()
    gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx, out=y)
    expected_gdn(expected, inputs, A_log, dt_bias, lengths, slot_idx, y_exp)
    assert_bits_equal(y, y_exp, "y")
    assert_pools_identical(pool, expected, "pool")


def test_gdn_prefill_precomputed_gates_equal_raw_gates_and_kda_runs():
    for shape in (GDN, KDA):
        b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
        pools = [random_pool(gdn_cases, shape, slots, _cfg("fp32", "fp32", "none"), "cpu") for _ in range(2)]
        pools[1] = pools[0].clone()
        A_log, dt_bias = gdn_cases.gate_params(shape, "cpu")
        q, k, v, a, bb = gdn_prompt(shape, b, S, torch.float32, "cpu")
        g, beta = gdn_gating(a, bb, A_log, dt_bias)
        y_raw = gdn_prefill(pools[0], q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths,
                            slot_idx=slot_idx)
        y_pre = gdn_prefill(pools[1], q, k, v, g=g, beta=beta, lengths=lengths, slot_idx=slot_idx)
        # Gates computed over [b, S] at once may round their last bit differently from the per-token ones.
        assert rel_err(y_raw, y_pre) < 1e-6, f"y {shape}"
        assert rel_err(pools[0].checkpoint, pools[1].checkpoint) < 1e-6, f"checkpoint {shape}"
        assert pools[0].checkpoint[slot_idx[0]].abs().sum() > 0


def test_conv1d_prefill_equals_updates_and_keeps_the_last_inputs():
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    C, k = 24, 4
    state = torch.randn(slots, C, k - 1)
    before = state.clone()
    x, weight, bias = torch.randn(b, S, C), torch.randn(C, k), torch.randn(C)
    y = poisoned(x.shape, x.dtype, "cpu")
    y_exp, state_exp = y.clone(), state.clone()
    conv1d_prefill(state, x, weight, bias, lengths=lengths, slot_idx=slot_idx, out=y)
    expected_conv1d(state_exp, x, weight, bias, lengths, slot_idx, y_exp)
    assert_bits_equal(y, y_exp, "y")
    assert_bits_equal(state, state_exp, "state")
    used = set()
    for row, s, n in live(lengths, slot_idx):
        used.add(s)
        tail = torch.cat([torch.zeros(C, k - 1), x[row, :n].T], dim=1)[:, -(k - 1):]
        assert torch.equal(state[s], tail), f"slot {s} holds the last k-1 inputs of row {row}"
    for s in set(range(slots)) - used:
        assert torch.equal(state[s], before[s]), f"unused slot {s}"


@pytest.mark.parametrize("seed", range(6))
def test_random_layouts_equal_decode_token_by_token(seed):
    """Random batch, prompt and pool sizes, lengths, padding rows and slot orders (Mamba-2 and the conv)."""
    g = torch.Generator().manual_seed(seed)
    b, S = (int(torch.randint(1, 7, (), generator=g)), int(torch.randint(1, 10, (), generator=g)))
    slots = b + int(torch.randint(0, 5, (), generator=g))
    lengths = torch.randint(1, S + 1, (b,), generator=g, dtype=torch.int32)
    slot_idx = mamba2_cases.slot_map(b, slots, int(torch.randint(0, b, (), generator=g)), "cpu", generator=g)
    pool = random_pool(mamba2_cases, M2, slots, _cfg("fp32", "bf16", "fp8"), "cpu")
    expected = pool.clone()
    A, D, dt_bias = mamba2_cases.layer_params(M2, "cpu")
    inputs = mamba2_prompt(M2, b, S, torch.bfloat16, "cpu")
    y = poisoned(inputs[0].shape, torch.bfloat16, "cpu")
    y_exp = y.clone()
    mamba2_prefill(pool, *inputs[:4], A, D=D, z=inputs[4], dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx,
                   out=y)
    expected_mamba2(expected, inputs, A, D, dt_bias, lengths, slot_idx, y_exp)
    assert_bits_equal(y, y_exp, f"y, b={b} S={S}")
    assert_pools_identical(pool, expected, f"pool, b={b} S={S} slots={slots}")
    state = torch.randn(slots, 40, 3, generator=g).bfloat16()
    state_exp, x, weight = state.clone(), torch.randn(b, S, 40, generator=g).bfloat16(), torch.randn(40, 4, generator=g)
    yc = conv1d_prefill(state, x, weight, lengths=lengths, slot_idx=slot_idx)
    yc_exp = expected_conv1d(state_exp, x, weight, None, lengths, slot_idx, torch.zeros_like(x))
    assert_bits_equal(yc, yc_exp, "conv y")
    assert_bits_equal(state, state_exp, "conv state")


def test_mamba2_prefill_matches_fp64_oracle():
    """tests/oracle.py's fp64 recurrence, started from zero states and stepped with the same per-token slots."""
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    pool = random_pool(mamba2_cases, M2, slots, _cfg("fp32", "fp32", "none"), "cpu")
    A, D, dt_bias = mamba2_cases.layer_params(M2, "cpu")
    x, dt, B, C, z = mamba2_prompt(M2, b, S, torch.float32, "cpu")
    y = mamba2_prefill(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    oracle = SequentialOracle(Mamba2StatePool(M2, slots, pool.cfg), A, D, dt_bias)
    for t in range(S):
        y_t = oracle.step(token_slots(slot_idx, lengths, t), x[:, t], dt[:, t], B[:, t], C[:, t], z[:, t])
        for row, s, n in live(lengths, slot_idx):
            if t < n:
                assert rel_err(y[row, t], y_t[row]) < 1e-5, f"y of row {row}, token {t}"
    for row, s, n in live(lengths, slot_idx):
        assert rel_err(pool.checkpoint[s], oracle.states[s]) < 1e-5, f"state of slot {s}"


def test_gdn_prefill_matches_fp64_recurrence():
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    pool = random_pool(gdn_cases, GDN, slots, _cfg("fp32", "fp32", "none"), "cpu")
    A_log, dt_bias = gdn_cases.gate_params(GDN, "cpu")
    q, k, v, a, bb = gdn_prompt(GDN, b, S, torch.float32, "cpu")
    y = gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    g, beta = gdn_gating(a, bb, A_log, dt_bias, torch.float64)
    qp, kp = prepare_qk(q, k, dtype=torch.float64)
    for row, s, n in live(lengths, slot_idx):
        seq = [t[row, :n, None].double() for t in (qp, kp, v, g, beta)]
        ys, final = gdn_sequence(torch.zeros(1, 4, 64, 64, dtype=torch.float64), *seq)
        assert rel_err(y[row, :n], ys[:, 0]) < 1e-5, f"y of row {row}"
        assert rel_err(pool.checkpoint[s], final[0]) < 1e-5, f"state of slot {s}"


@pytest.mark.parametrize("state, act, fmt", CONFIGS, ids=CFG_IDS)
def test_mamba2_replay_after_prefill_equals_conventional(state, act, fmt):
    """The hand-off: from the prefilled checkpoint and empty ring, replay steps (ring route and a flush) follow
    conventional decode, within the read copy's rounding (stale ring records of the slots' earlier requests play
    no part)."""
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    cfg = dataclasses.replace(_cfg(state, act, fmt), latency_route_bytes=0)
    pool = random_pool(mamba2_cases, M2, slots, cfg, "cpu")
    A, D, dt_bias = mamba2_cases.layer_params(M2, "cpu")
    x, dt, B, C, z = mamba2_prompt(M2, b, S, pool.cfg.act_dtype, "cpu")
    mamba2_prefill(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    state_conv = pool.checkpoint.clone()
    tol = {"none": 2e-2 if act != "fp32" else 1e-5, "fp8": 6e-2, "nvfp4": 0.2}[fmt]
    for step in range(cfg.buffer_len + 1):  # ring route, then the flush, then the ring route again
        x1, dt1, B1, C1, z1 = mamba2_cases.step_inputs(M2, b, pool.cfg.act_dtype, "cpu")
        y_rep = replay_decode(pool, x1, dt1, B1, C1, A, D=D, z=z1, dt_bias=dt_bias, slot_idx=slot_idx)
        y_conv = conventional_decode(state_conv, x1, dt1, B1, C1, A, D=D, z=z1, dt_bias=dt_bias, slot_idx=slot_idx)
        rows = slot_idx >= 0
        assert rel_err(y_rep[rows], y_conv[rows]) < tol, f"step {step}"


def test_gdn_replay_after_prefill_equals_conventional():
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    cfg = ReplayConfig(4, "fp32", "fp32", latency_route_bytes=0)
    pool = random_pool(gdn_cases, GDN, slots, cfg, "cpu")
    A_log, dt_bias = gdn_cases.gate_params(GDN, "cpu")
    q, k, v, a, bb = gdn_prompt(GDN, b, S, torch.float32, "cpu")
    gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    state_conv = pool.checkpoint.clone()
    for step in range(cfg.buffer_len + 1):
        q1, k1, v1, a1, b1 = gdn_cases.raw_step_inputs(GDN, b, torch.float32, "cpu")
        gates = dict(a=a1, b=b1, A_log=A_log, dt_bias=dt_bias, slot_idx=slot_idx)
        y_rep = gdn_replay_decode(pool, q1, k1, v1, **gates)
        y_conv = gdn_conventional_decode(state_conv, GDN, q1, k1, v1, **gates)
        rows = slot_idx >= 0
        assert rel_err(y_rep[rows], y_conv[rows]) < 1e-5, f"step {step}"


def _mamba2_args(b=3, S=5):
    pool = mamba2_cases.random_pool(M2, 4, _cfg("fp32", "fp32", "none"), "cpu")
    A, D, dt_bias = mamba2_cases.layer_params(M2, "cpu")
    x, dt, B, C, z = mamba2_prompt(M2, b, S, torch.float32, "cpu")
    return pool, dict(x=x, dt=dt, B=B, C=C, A=A, D=D, z=z, dt_bias=dt_bias,
                      lengths=torch.tensor([5, 2, 1], dtype=torch.int32), slot_idx=torch.tensor([3, 0, -1],
                                                                                              dtype=torch.int32))


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update(lengths=torch.tensor([5, 6, 1], dtype=torch.int32)), r"lengths\[1\]=6 is out of range \(1..5"),
    (lambda d: d.update(lengths=torch.tensor([0, 2, 1], dtype=torch.int32)), r"lengths\[0\]=0 is out of range"),
    (lambda d: d.update(lengths=torch.tensor([5, 2, 1])), "lengths must be int32 of shape"),
    (lambda d: d.update(slot_idx=None), "slot_idx must be int32 of shape"),
    (lambda d: d.update(x=d["x"][:, 0]), r"x must be a tensor \[batch, tokens, nheads, head_dim\]"),
    (lambda d: d.update(dt=d["dt"][:, :4]), r"dt has shape \(3, 4, 4\), expected \(3, 5, 4\)"),
    (lambda d: d.update(B=d["B"][..., :32]), r"B has shape \(3, 5, 2, 32\)"),
    (lambda d: d.update(z=d["z"].double()), "z has dtype float64, expected fp32"),
    (lambda d: d.update(x=d["x"].bfloat16()), "x has dtype bf16 but the pool's act_dtype is fp32"),
    (lambda d: d.update(A=d["A"][:2]), r"A has shape \(2,\)"),
])
def test_mamba2_prefill_rejects_bad_input_and_touches_nothing(mutate, match):
    pool, d = _mamba2_args()
    before = pool.clone()
    mutate(d)
    with pytest.raises(ValueError, match=match):
        mamba2_prefill(pool, d.pop("x"), d.pop("dt"), d.pop("B"), d.pop("C"), d.pop("A"), **d)
    assert_pools_identical(pool, before, "after a refused call")


def test_gdn_and_conv1d_prefill_reject_bad_input():
    pool = gdn_cases.random_pool(GDN, 4, _cfg("fp32", "fp32", "none"), "cpu")
    A_log, dt_bias = gdn_cases.gate_params(GDN, "cpu")
    q, k, v, a, bb = gdn_prompt(GDN, 2, 3, torch.float32, "cpu")
    lengths, slots = torch.tensor([3, 4], dtype=torch.int32), torch.tensor([1, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"lengths\[1\]=4 is out of range \(1..3"):
        gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths, slot_idx=slots)
    with pytest.raises(ValueError, match=r"a has shape \(2, 2, 4\), expected \(2, 3, 4\)"):
        gdn_prefill(pool, q, k, v, a=a[:, :2], b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths - 1,
                    slot_idx=slots)
    with pytest.raises(ValueError, match="give either g and beta, or all of a, b, A_log and dt_bias"):
        gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, lengths=lengths - 1, slot_idx=slots)
    state = torch.randn(4, 8, 3)
    with pytest.raises(ValueError, match=r"x has shape \(2, 3, 7\), expected \[batch, tokens, 8\]"):
        conv1d_prefill(state, torch.randn(2, 3, 7), torch.randn(8, 4), lengths=lengths - 1, slot_idx=slots)
    with pytest.raises(ValueError, match="state holds 3 inputs per channel, expected k-1 = 2"):
        conv1d_prefill(state, torch.randn(2, 3, 8), torch.randn(8, 3), lengths=lengths - 1, slot_idx=slots)
