"""CPU tests of the Mamba-2 speculative ops (replay_verify, snapshot_verify) and the family-independent commits
(spec_commit, snapshot_commit): the CPU path runs the references with the ops' semantics (padding rows and `out`
untouched where they should be), bad input is rejected before anything is written with an error naming the
value, and the native validation (no GPU needed) agrees with the Python lists."""

import ctypes

import pytest
import torch

from conftest import poisoned
from mamba2_cases import layer_params, slot_map
from mamba2_spec_cases import spec_pool, window_inputs
from trtllm_replayssm import _lib
from trtllm_replayssm.config import (DTYPE_CODES, MAMBA2_ACT_DTYPES, MAMBA2_DSTATES, MAMBA2_HEAD_DIMS,
                                     MAMBA2_STATE_DTYPES, MAX_BUFFER_LEN, SPEC_MAX_WINDOW, SPEC_MIN_WINDOW,
                                     Mamba2LayerShape, ReplayConfig)
from trtllm_replayssm.ops import commit_kernels
from trtllm_replayssm.ops.mamba2 import replay_verify, snapshot_verify, spec_kernels
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import (commit_reference, snapshot_commit, snapshot_commit_reference,
                                        spec_commit)

SHAPE = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=2)
CPU = torch.device("cpu")


def _case(T=4, L=12, batch=3, act=torch.bfloat16, slots=5):
    pool = spec_pool(SHAPE, slots, ReplayConfig(L, torch.float32, act), min(T, L // 2), CPU)
    A, D, dt_bias = layer_params(SHAPE, CPU)
    return pool, A, D, dt_bias, window_inputs(SHAPE, batch, T, act, CPU)


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
