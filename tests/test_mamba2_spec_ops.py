"""CPU tests of the Mamba-2 speculative ops (replay_verify, snapshot_verify) and the family-independent commits
(spec_commit, snapshot_commit): the CPU path runs the references with the ops' semantics (padding rows and `out`
untouched where they should be), bad input is rejected before anything is written with an error naming the
value, and the native validation (no GPU needed) agrees with the Python lists."""

import ctypes

import pytest
import torch

from conftest import poisoned
from mamba2_cases import layer_params, rel_err, slot_map
from mamba2_spec_cases import spec_pool, window_inputs
from oracle import fold_ring, mamba2_token, window_truth
from trtllm_replayssm import _lib
from trtllm_replayssm.config import (DTYPE_CODES, MAMBA2_ACT_DTYPES, MAMBA2_DSTATES, MAMBA2_HEAD_DIMS,
                                     MAMBA2_STATE_DTYPES, MAMBA2_VERIFY_READ_COPY_ACTS, MAMBA2_VERIFY_READ_COPY_STATE,
                                     MAMBA2_VERIFY_READ_FORMATS, MAX_BUFFER_LEN, READ_FORMAT_CODES, SPEC_MAX_WINDOW,
                                     SPEC_MIN_WINDOW, Mamba2LayerShape, ReplayConfig, dtype_name)
from trtllm_replayssm.ops import commit_kernels
from trtllm_replayssm.ops.mamba2 import replay_verify, snapshot_verify, spec_kernels
from trtllm_replayssm.ops.mamba2.spec import check_verify_read_copy
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import (commit_reference, snapshot_commit, snapshot_commit_reference,
                                        spec_commit)

SHAPE = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=2)
CPU = torch.device("cpu")


def _case(T=4, L=12, batch=3, act=torch.bfloat16, slots=5):
    pool = spec_pool(SHAPE, slots, ReplayConfig(L, torch.float32, act), min(T, L // 2), CPU)
    A, D, dt_bias = layer_params(SHAPE, CPU)
    return pool, A, D, dt_bias, window_inputs(SHAPE, batch, T, act, CPU)


# One bf16 ulp (2^-8) of the output: the only rounding beyond fp32 arithmetic is y's store in bf16 (half an ulp).
BF16_Y_TOL = 2.0 ** -8
FP32_STATE_TOL = 1e-5  # fp32 arithmetic over a window of <= 8 tokens (measured ~1e-7)


def test_cpu_ops_follow_the_fp64_recurrence():
    """The independent anchor of the CPU ops: every live row's window outputs (both paths) and the snapshot path's
    stored states follow the fp64 token-by-token recurrence (tests/oracle.py) from the slot's true state: its
    checkpoint with the ring folded in, or the snapshot path's state."""
    T = 4
    pool, A, D, dt_bias, (x, dt, B, C, z) = _case(T=T, batch=4)
    slots = slot_map(4, 5, n_pad=1, device=CPU)
    live, used = slots >= 0, slots[slots >= 0].long()
    step = mamba2_token(A, D, dt_bias)
    y_true, _ = window_truth(step, fold_ring(pool, A), slots, x, dt, B, C, z)
    y = replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
    assert 0 < rel_err(y[live], y_true[live]) < BF16_Y_TOL

    state, snaps = torch.randn(5, 4, 64, 64), poisoned((5, T, 4, 64, 64), torch.float32, CPU)
    y_true, states_true = window_truth(step, state.double(), slots, x, dt, B, C, z)
    y = snapshot_verify(state, snaps, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
    assert 0 < rel_err(y[live], y_true[live]) < BF16_Y_TOL
    assert rel_err(snaps[used], states_true[live]) < FP32_STATE_TOL


def test_cpu_ops_follow_references_and_leave_padding_alone():
    T = 4
    pool, A, D, dt_bias, (x, dt, B, C, z) = _case(T=T, batch=4)
    ref = pool.clone()
    slots = slot_map(4, 5, n_pad=1, device=CPU)
    out = poisoned(x.shape, x.dtype, CPU)
    y = replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
    y_ref = replay_verify_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
    live = slots >= 0
    assert y is out and torch.equal(y[live], y_ref[live]) and torch.isnan(y[~live]).all()
    accepted = torch.randint(1, T + 1, (4,), dtype=torch.int32)
    spec_commit(pool, accepted, slot_idx=slots, window=T)
    commit_reference(ref, accepted, slot_idx=slots)
    for name, t in pool.buffers.items():
        assert torch.equal(t, ref.buffers[name]), name

    state = torch.randn(5, 4, 64, 64)
    snaps, ref_state, ref_snaps = torch.zeros(5, T, 4, 64, 64), state.clone(), torch.zeros(5, T, 4, 64, 64)
    out = poisoned(x.shape, x.dtype, CPU)
    y = snapshot_verify(state, snaps, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
    y_ref = snapshot_verify_reference(ref_state, ref_snaps, x, dt, B, C, A, D, z, dt_bias, True, slots)
    assert torch.equal(y[live], y_ref[live]) and torch.isnan(y[~live]).all() and torch.equal(snaps, ref_snaps)
    snapshot_commit(state, snaps, accepted, slot_idx=slots)
    snapshot_commit_reference(ref_state, ref_snaps, accepted, slot_idx=slots)
    assert torch.equal(state, ref_state)


@pytest.mark.parametrize("case, mutate, match", [
    (dict(L=7), None, "buffer_len=7 must be >= 2T=8"),
    (dict(T=1), None, "T=1 tokens per row"),
    (dict(T=9, L=24), None, r"T=9 tokens per row \(x.shape\[1\]\) is out of range \(2..8\)"),
    ({}, lambda a: a.update(x=a["x"][:, 0]), r"x must be a tensor of shape \[batch, T, nheads, head_dim\]"),
    ({}, lambda a: a.update(x=a["x"].float()), "x has dtype fp32 but the pool's act_dtype is bf16"),
    ({}, lambda a: a.update(x=a["x"][..., :32]), r"x has shape \(3, 4, 4, 32\)"),
    ({}, lambda a: a.update(dt=a["dt"][:, :, :2]), r"dt has shape \(3, 4, 2\)"),
    ({}, lambda a: a.update(B=a["B"][:, :3]), r"B has shape \(3, 3, 2, 64\)"),
    ({}, lambda a: a.update(C=a["C"][:, :, :1]), r"C has shape \(3, 4, 1, 64\)"),
    ({}, lambda a: a.update(z=a["z"][:2]), r"z has shape \(2, 4, 4, 64\)"),
    ({}, lambda a: a.update(A=a["A"].double()), "A has dtype float64"),
    ({}, lambda a: a.update(slot_idx=torch.tensor([0, 1, 2])), "slot_idx has dtype int64"),
    ({}, lambda a: a.update(out=torch.empty(3, 4, 4, 32, dtype=torch.bfloat16)), r"out has shape \(3, 4, 4, 32\)"),
    (dict(batch=6), None, "batch=6 exceeds the pool's 5 slots"),
])
def test_replay_verify_rejects_bad_input_and_touches_nothing(case, mutate, match):
    pool, A, D, dt_bias, (x, dt, B, C, z) = _case(**case)
    args = dict(x=x, dt=dt, B=B, C=C, A=A, D=D, z=z, dt_bias=dt_bias)
    if mutate:
        mutate(args)
    before = pool.clone()
    with pytest.raises(ValueError, match=match):
        replay_verify(pool, args.pop("x"), args.pop("dt"), args.pop("B"), args.pop("C"), args.pop("A"), **args)
    for k, v in pool.buffers.items():
        assert torch.equal(v, before.buffers[k]), f"{k} changed on a rejected call"


@pytest.mark.parametrize("mutate, match", [
    (lambda s: s.update(snapshots=torch.zeros(5, 3, 4, 64, 64)), r"snapshots has shape \(5, 3, 4, 64, 64\)"),
    (lambda s: s.update(snapshots=torch.zeros(5, 4, 4, 64, 64, dtype=torch.bfloat16)),
     "snapshots has dtype bf16, expected fp32"),
    (lambda s: s.update(state=torch.zeros(5, 4, 64, 64).transpose(2, 3)), "state must be contiguous"),
    (lambda s: s.update(state=torch.zeros(5, 4, 64, 48)), "dstate=48 is not supported"),
])
def test_snapshot_verify_rejects_bad_input_and_touches_nothing(mutate, match):
    _, A, D, dt_bias, (x, dt, B, C, z) = _case()
    t = dict(state=torch.randn(5, 4, 64, 64), snapshots=torch.zeros(5, 4, 4, 64, 64))
    mutate(t)
    before = {k: v.clone() for k, v in t.items()}
    with pytest.raises(ValueError, match=match):
        snapshot_verify(t["state"], t["snapshots"], x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias)
    for k, v in t.items():
        assert torch.equal(v, before[k]), f"{k} changed on a rejected call"


@pytest.mark.parametrize("kwargs, match", [
    (dict(accepted=torch.ones(3, dtype=torch.int64)), "accepted has dtype int64, expected int32"),
    (dict(accepted=torch.ones(3, 1, dtype=torch.int32)), r"accepted must be a tensor of shape \[batch\]"),
    (dict(window=7), "buffer_len=12 must be >= 2T=14"),
    (dict(window=0), "window=0 must be a positive int"),
    (dict(slot_idx=torch.tensor([0, 1], dtype=torch.int32)), r"slot_idx has shape \(2,\), expected \(3,\)"),
    (dict(accepted=torch.ones(6, dtype=torch.int32)), "batch=6 exceeds the pool's 5 slots"),
])
def test_spec_commit_rejects_bad_input_and_touches_nothing(kwargs, match):
    pool = _case()[0]
    args = dict(accepted=torch.ones(3, dtype=torch.int32), window=4)
    args.update(kwargs)
    before = pool.cursor.clone()
    with pytest.raises(ValueError, match=match):
        spec_commit(pool, args.pop("accepted"), **args)
    assert torch.equal(pool.cursor, before)


def test_spec_commit_needs_the_window():
    pool = _case()[0]
    with pytest.raises(TypeError, match="window"):
        spec_commit(pool, torch.ones(3, dtype=torch.int32))


def test_snapshot_commit_rejects_mismatched_snapshots():
    state = torch.randn(5, 4, 64, 64)
    before = state.clone()
    with pytest.raises(ValueError, match=r"snapshots has shape \(5, 4, 4, 64, 32\)"):
        snapshot_commit(state, torch.zeros(5, 4, 4, 64, 32), torch.ones(3, dtype=torch.int32))
    assert torch.equal(state, before)


# ---- Native validation (no launch, no GPU): the library's tables agree with the Python lists.

def _has(name):
    return _lib.available() and _lib.has_symbol(_lib.load(), name)


needs_verify = pytest.mark.skipif(not _has("rssm_mamba2_verify"),
                                  reason="kernel library not built, or built before the speculative kernels")
DUMMY = 1 << 20  # a 16-byte aligned fake address: validation never dereferences pointers


def _verify_status(**overrides):
    b, T, H, P, N, G = 2, 4, 8, 64, 128, 2
    p = spec_kernels.Mamba2VerifyParams(batch=b, nheads=H, head_dim=P, dstate=N, ngroups=G, window=T, buffer_len=16,
                                        num_slots=4, pad_slot_id=-1, mode=spec_kernels.REPLAY, state_dtype=0,
                                        act_dtype=2, dt_softplus=1)
    for name, strides in (("x", (T * H * P, H * P, P)), ("dt", (T * H, H, 1)), ("B", (T * G * N, G * N, N)),
                          ("C", (T * G * N, G * N, N)), ("y", (T * H * P, H * P, P))):
        inner = "group" if name in ("B", "C") else "head"
        for d, s in zip(("batch", "token", inner), strides):
            setattr(p, f"{name}_{d}_stride", s)
    for name in ("state", "ring_x", "ring_B", "ring_dt", "cursor", "x", "dt", "B", "C", "A", "y"):
        setattr(p, name, DUMMY)
    for k, v in overrides.items():
        setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_mamba2_verify_validate(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


@needs_verify
def test_native_struct_sizes_match_bindings():
    assert spec_kernels.abi_size_matches()
    assert commit_kernels.abi_sizes_match()


@needs_verify
def test_native_verify_table_matches_python_lists():
    assert _verify_status()[0] == 0, _verify_status()[1]
    for hd in range(1, 300):
        assert (_verify_status(head_dim=hd)[0] == 0) == (hd in MAMBA2_HEAD_DIMS), f"head_dim={hd}"
    for n in range(1, 600):
        assert (_verify_status(dstate=n)[0] == 0) == (n in MAMBA2_DSTATES), f"dstate={n}"
    for T in range(-1, 20):
        ok = SPEC_MIN_WINDOW <= T <= SPEC_MAX_WINDOW
        assert (_verify_status(window=T, buffer_len=MAX_BUFFER_LEN)[0] == 0) == ok, f"window={T}"
        assert (_verify_status(window=T, buffer_len=MAX_BUFFER_LEN, mode=spec_kernels.SNAPSHOT,
                               snapshots=DUMMY)[0] == 0) == ok, f"window={T} (snapshot path)"
    for T in (2, 5, 8):
        for L in range(-1, 70):
            assert (_verify_status(window=T, buffer_len=L)[0] == 0) == (2 * T <= L <= MAX_BUFFER_LEN), f"T={T} L={L}"
    for code in range(-1, 5):
        assert (_verify_status(state_dtype=code)[0] == 0) == (code in {DTYPE_CODES[d] for d in MAMBA2_STATE_DTYPES})
        assert (_verify_status(act_dtype=code)[0] == 0) == (code in {DTYPE_CODES[d] for d in MAMBA2_ACT_DTYPES})


@needs_verify
@pytest.mark.parametrize("overrides, words", [
    (dict(window=9), "window=9 is out of range (2..8"),
    (dict(window=4, buffer_len=7), "buffer_len=7 is out of range for window=4 (8..64"),
    (dict(head_dim=96), "head_dim=96"),
    (dict(dstate=32), "dstate=32"),
    (dict(mode=5), "mode=5"),
    (dict(ngroups=3), "ngroups=3"),
    (dict(ring_x=None), "ring_x is NULL"),
    (dict(cursor=DUMMY + 4), "cursor is not 16-byte aligned"),
    (dict(mode=spec_kernels.SNAPSHOT), "snapshots is NULL"),
    (dict(batch=9, slot_idx=None), "batch=9 exceeds num_slots=4"),
    (dict(x=DUMMY + 2), "x rows must be 16-byte aligned"),
    (dict(B_token_stride=129), "B rows must be 16-byte aligned"),
    (dict(z=DUMMY, z_batch_stride=3), "z rows must be 16-byte aligned (pointer"),
    (dict(mode=spec_kernels.SNAPSHOT, snapshots=DUMMY + 4), "snapshots is not 16-byte aligned"),
    (dict(batch=70000), "batch=70000 is out of range (0..65535)"),
    (dict(num_slots=-1), "num_slots=-1 is negative"),
])
def test_native_verify_errors_name_the_offending_value(overrides, words):
    status, msg = _verify_status(**overrides)
    assert status == 1 and words in msg, msg


# ---- Read copies of the verify kernel: the native table against config.MAMBA2_VERIFY_READ_*, errors naming the
#      value, and the op's refusal of combinations without a kernel (no GPU needed) ----

@needs_verify
def test_native_verify_read_copy_table_matches_python_lists():
    """The (state dtype, act dtype, read format, mode) combinations the library accepts are exactly those of
    config.MAMBA2_VERIFY_READ_*; the others are refused naming the format. Zero fields (read_format 0) mean no copy,
    as the TensorRT plugin's zero-initialised params leave them."""
    codes = {dtype_name(d): c for d, c in DTYPE_CODES.items()}
    for state in ("fp32", "fp16", "bf16"):
        for act in ("fp32", "fp16", "bf16"):
            for fmt, code in READ_FORMAT_CODES.items():
                for mode in (spec_kernels.SNAPSHOT, spec_kernels.REPLAY):
                    want = fmt == "none" or (state == MAMBA2_VERIFY_READ_COPY_STATE and act in
                                             MAMBA2_VERIFY_READ_COPY_ACTS and fmt in MAMBA2_VERIFY_READ_FORMATS and
                                             mode == spec_kernels.REPLAY)
                    status, msg = _verify_status(state_dtype=codes[state], act_dtype=codes[act], read_format=code,
                                                 mode=mode, snapshots=DUMMY, read_state=DUMMY, read_scale=DUMMY)
                    where = f"state {state}, act {act}, read_format {fmt}, mode {mode}"
                    assert (status == 0) == want, f"{where}: {msg}"
                    if not want:
                        assert f"read_format={code} ({fmt})" in msg, msg
    assert "read_format=9 (unknown)" in _verify_status(read_format=9, read_state=DUMMY)[1]
    assert _verify_status(read_format=0, read_state=None, read_scale=None)[0] == 0


@needs_verify
@pytest.mark.parametrize("overrides, words", [
    (dict(read_format=4), "read_format=4 (nvfp4) is not supported; the verify kernel reads fp16 / bf16 / fp8 copies"),
    (dict(read_format=7), "read_format=7 (unknown) is not supported"),
    (dict(read_format=1, read_state=None), "read_state is NULL (required by read_format=1, fp16)"),
    (dict(read_format=3, read_scale=None), "read_scale is NULL (required by read_format=3, fp8)"),
    (dict(read_format=2, read_state=DUMMY + 8), "read_state is not 16-byte aligned"),
    (dict(read_format=3, read_scale=DUMMY + 2), "read_scale is not 4-byte aligned"),
    (dict(read_format=1, mode=spec_kernels.SNAPSHOT, snapshots=DUMMY), "needs mode=1 (replay), got mode=0"),
    (dict(read_format=3, state_dtype=2), "read_format=3 (fp8) with state_dtype=2 is not supported"),
    (dict(read_format=2, act_dtype=0), "read_format=2 (bf16) with act_dtype=0 (fp32) is not supported"),
], ids=["nvfp4", "unknown", "no_read_state", "fp8_no_scale", "misaligned_copy", "misaligned_scale", "snapshot_path",
        "bf16_checkpoint", "fp32_activations"])
def test_native_verify_read_copy_errors_name_the_value(overrides, words):
    args = dict(read_state=DUMMY, read_scale=DUMMY)
    args.update(overrides)
    status, msg = _verify_status(**args)
    assert status == 1 and words in msg, msg


@needs_verify
def test_native_verify_fp16_bf16_copies_need_no_scale():
    for code in (1, 2):
        status, msg = _verify_status(read_format=code, read_state=DUMMY, read_scale=None)
        assert status == 0, msg


@pytest.mark.parametrize("state, act, fmt, match", [
    ("fp32", "bf16", "nvfp4", "read_format=nvfp4: the verify kernel reads fp16 / bf16 / fp8 copies"),
    ("fp16", "fp16", "fp8", "read_format=fp8 with state_dtype=fp16: the verify kernel reads copies of an fp32"),
    ("bf16", "bf16", "fp8", "read_format=fp8 with state_dtype=bf16"),
    ("fp32", "fp32", "fp16", "read_format=fp16 with act_dtype=fp32"),
], ids=["nvfp4", "fp16_checkpoint", "bf16_checkpoint", "fp32_activations"])
def test_verify_op_refuses_read_copies_without_a_kernel(state, act, fmt, match):
    """The check the CUDA path runs before filling the params (no GPU needed): the combination and the value are
    named."""
    with pytest.raises(NotImplementedError, match=match):
        check_verify_read_copy(ReplayConfig(16, state, act, fmt))


@pytest.mark.parametrize("act", MAMBA2_VERIFY_READ_COPY_ACTS)
@pytest.mark.parametrize("fmt", ("none",) + MAMBA2_VERIFY_READ_FORMATS)
def test_verify_op_accepts_the_kernel_read_copies(act, fmt):
    check_verify_read_copy(ReplayConfig(16, MAMBA2_VERIFY_READ_COPY_STATE, act, fmt))


def test_verify_binding_passes_the_pool_copy():
    """fill_params carries the format code and the copy's buffers (CPU tensors: addresses only, nothing launched)."""
    pool = spec_pool(SHAPE, 5, ReplayConfig(12, torch.float32, torch.bfloat16, "fp8"), 4, CPU)
    A, D, dt_bias, (x, dt, B, C, z) = _case()[1:]
    y = torch.empty_like(x)
    p = spec_kernels.fill_params(spec_kernels.REPLAY, pool.checkpoint, x, dt, B, C, A, D, z, dt_bias, True, None, -1,
                                 y, ring_x=pool.ring_x, ring_B=pool.ring_B, ring_dt=pool.ring_dt, cursor=pool.cursor,
                                 buffer_len=12, read_format="fp8", read_state=pool.buffers["read_state"],
                                 read_scale=pool.buffers["read_scale"])
    assert p.read_format == READ_FORMAT_CODES["fp8"]
    assert p.read_state == pool.buffers["read_state"].data_ptr()
    assert p.read_scale == pool.buffers["read_scale"].data_ptr()
    plain = spec_kernels.fill_params(spec_kernels.REPLAY, pool.checkpoint, x, dt, B, C, A, D, z, dt_bias, True, None,
                                     -1, y)
    assert plain.read_format == 0 and plain.read_state is None and plain.read_scale is None


@needs_verify
@pytest.mark.parametrize("overrides, words", [
    ({}, ""),
    (dict(window=0), "window=0 is out of range"),
    (dict(window=8, buffer_len=7), "buffer_len=7 is out of range for window=8"),
    (dict(cursor=None), "cursor is NULL"),
    (dict(accepted=None), "accepted is NULL"),
    (dict(batch=9), "batch=9 exceeds num_slots=4"),
    (dict(batch=-1), "batch=-1 is out of range (0..65535)"),
])
def test_native_spec_commit_errors_name_the_offending_value(overrides, words):
    p = commit_kernels.SpecCommitParams(batch=3, nheads=8, num_slots=4, pad_slot_id=-1, window=4, buffer_len=16,
                                        cursor=DUMMY, accepted=DUMMY)
    for k, v in overrides.items():
        setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_spec_commit_validate(ctypes.byref(p), ctypes.sizeof(p))
    assert status == (1 if overrides else 0) and words in lib.rssm_last_error().decode(), lib.rssm_last_error().decode()


@needs_verify
@pytest.mark.parametrize("overrides, words", [
    ({}, ""),
    (dict(state_bytes=24), "state_bytes=24 must be a positive multiple of 16"),
    (dict(snapshots=None), "snapshots is NULL"),
    (dict(state=DUMMY + 8), "state is not 16-byte aligned"),
    (dict(window=0), "window=0 is out of range"),
    (dict(accepted=None), "accepted is NULL"),
    (dict(snapshots=DUMMY + 4), "snapshots is not 16-byte aligned"),
    (dict(batch=9, slot_idx=None), "batch=9 exceeds num_slots=4 and no slot_idx was given"),
])
def test_native_snapshot_commit_errors_name_the_offending_value(overrides, words):
    p = commit_kernels.SnapshotCommitParams(batch=3, num_slots=4, pad_slot_id=-1, window=4, state_bytes=1 << 16,
                                            state=DUMMY, snapshots=DUMMY, accepted=DUMMY)
    for k, v in overrides.items():
        setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_snapshot_commit_validate(ctypes.byref(p), ctypes.sizeof(p))
    assert status == (1 if overrides else 0) and words in lib.rssm_last_error().decode(), lib.rssm_last_error().decode()
