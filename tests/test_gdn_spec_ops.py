"""CPU tests of the Gated DeltaNet speculative ops (ops/gdn/spec.py) and of their C ABI (no GPU needed): the CPU
path is the reference, inputs are validated before anything is written, the ctypes mirror follows
gdn/spec_params.h, and the library's validation names the offending value and agrees with the Python lists."""

import ctypes
from pathlib import Path

import pytest
import torch

from conftest import poisoned
from gdn_cases import fold_ring
from gdn_spec_cases import raw_window_inputs, spec_pool, window_inputs
from mamba2_cases import rel_err
from oracle import gdn_raw_token, window_truth
from test_validation import _header_fields
from trtllm_replayssm import _lib
from trtllm_replayssm.config import (DTYPE_CODES, GDN_HEAD_DIMS, GDN_KERNEL_READ_COPY_ACTS, GDN_KERNEL_READ_COPY_STATE,
                                     GDN_KERNEL_READ_FORMATS, MAX_BUFFER_LEN, READ_FORMAT_CODES, SPEC_MAX_WINDOW,
                                     SPEC_MIN_WINDOW, GdnLayerShape, ReplayConfig, dtype_name)
from trtllm_replayssm.ops.gdn import check_kernel_read_copy, replay_verify, snapshot_verify, spec_kernels
from trtllm_replayssm.ops.gdn.reference import gdn_gating, prepare_qk
from trtllm_replayssm.ops.gdn.spec_reference import replay_verify_reference, snapshot_verify_reference

SHAPE = GdnLayerShape(2, 4, 64, 64)
PREPARED = dict(use_qk_l2norm=False, scale=1.0)


FP32_TOL = 1e-5  # fp32 arithmetic over a window of <= 8 tokens and a ring of <= L records (measured ~1e-7)


def test_cpu_ops_follow_the_fp64_recurrence():
    """The independent anchor of the CPU ops: from raw q, k and gate projections, every live row's window outputs
    (both paths) and the snapshot path's stored states follow the fp64 token-by-token recurrence written out in
    tests/oracle.py (its own gating and q / k preparation), from the slot's true state: its checkpoint with the ring
    folded in, or the snapshot path's state."""
    T, L = 4, 12
    pool = spec_pool(SHAPE, 5, ReplayConfig(L, torch.float32, torch.float32), T, "cpu")
    A_log, dt_bias = torch.rand(4) - 1.5, torch.rand(4) - 2.0
    slots = torch.tensor([3, -1, 0, 4], dtype=torch.int32)
    live, used = slots >= 0, slots[slots >= 0].long()
    raw = raw_window_inputs(SHAPE, 4, T, torch.float32, "cpu")
    gates = dict(a=raw[3], b=raw[4], A_log=A_log, dt_bias=dt_bias, slot_idx=slots)
    step = gdn_raw_token(A_log, dt_bias)
    y_true, _ = window_truth(step, fold_ring(pool), slots, *raw)
    y = replay_verify(pool, *raw[:3], **gates)
    assert 0 < rel_err(y[live], y_true[live]) < FP32_TOL

    state, snaps = torch.randn(5, 4, 64, 64), poisoned((5, T, 4, 64, 64), torch.float32, "cpu")
    y_true, states_true = window_truth(step, state.double(), slots, *raw)
    y = snapshot_verify(state, snaps, *raw[:3], **gates)
    assert 0 < rel_err(y[live], y_true[live]) < FP32_TOL
    assert 0 < rel_err(snaps[used], states_true[live]) < FP32_TOL


def test_cpu_replay_verify_is_the_reference_with_prepared_gates():
    """On CPU tensors the op prepares q, k and the gates and runs the reference: same outputs and pool."""
    T, L = 4, 12
    pool = spec_pool(SHAPE, 5, ReplayConfig(L, torch.float32, torch.float32), T, "cpu")
    ref = pool.clone()
    A_log, dt_bias = torch.rand(4) - 1.5, torch.rand(4) - 2.0
    slots = torch.tensor([3, -1, 0, 4], dtype=torch.int32)
    q, k, v, a, b = raw_window_inputs(SHAPE, 4, T, torch.float32, "cpu")
    y = replay_verify(pool, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots)
    qp, kp = prepare_qk(q, k)
    g, beta = gdn_gating(a, b, A_log, dt_bias)
    y_ref = replay_verify_reference(ref, qp, kp, v, g, beta, slots)
    live = slots >= 0
    assert torch.equal(y[live], y_ref[live])
    for name, t in pool.buffers.items():
        assert torch.equal(t, ref.buffers[name]), name


def test_cpu_snapshot_verify_is_the_reference_and_skips_padding():
    T = 3
    state = torch.randn(5, 4, 64, 64)
    snaps, ref_snaps = torch.zeros(5, T, 4, 64, 64), torch.zeros(5, T, 4, 64, 64)
    slots = torch.tensor([2, -1, 4], dtype=torch.int32)
    q, k, v, g, beta = window_inputs(SHAPE, 3, T, torch.float32, "cpu")
    out = torch.full_like(v, float("nan"))
    snapshot_verify(state, snaps, q, k, v, g, beta, slot_idx=slots, out=out, **PREPARED)
    y_ref = snapshot_verify_reference(state, ref_snaps, q, k, v, g, beta, slots)
    assert torch.equal(out[[0, 2]], y_ref[[0, 2]]) and torch.isnan(out[1]).all()
    assert torch.equal(snaps, ref_snaps)
    assert rel_err(snaps[2, 0], state[2]) > 0  # the snapshot is the state after the token, not the input state


def _case(T=4, L=12, batch=3):
    pool = spec_pool(SHAPE, 4, ReplayConfig(L, torch.float32, torch.bfloat16), min(T, L // 2), "cpu")
    q, k, v, g, beta = window_inputs(SHAPE, batch, T, torch.bfloat16, "cpu")
    return pool, dict(q=q, k=k, v=v, g=g, beta=beta)


@pytest.mark.parametrize("case, mutate, match", [
    (dict(L=7), None, "buffer_len=7 must be >= 2T=8"),
    (dict(T=9, L=24), None,
     rf"T=9 tokens per row \(v.shape\[1\]\) is out of range \({SPEC_MIN_WINDOW}..{SPEC_MAX_WINDOW}\)"),
    (dict(T=1), None, r"T=1 tokens per row"),
    ({}, lambda d: d.update(v=d["v"].float()), "v has dtype fp32 but the pool's act_dtype is bf16"),
    ({}, lambda d: d.update(q=d["q"][:, :, :, :32]), r"q has shape \(3, 4, 2, 32\), expected \(3, 4, 2, 64\)"),
    ({}, lambda d: d.update(g=d["g"][:, :2]), r"g has shape \(3, 2, 4\), expected \(3, 4, 4\)"),
    ({}, lambda d: d.update(beta=None), "give either g and beta, or all of a, b, A_log and dt_bias"),
    ({}, lambda d: d.update(slot_idx=torch.tensor([0, 1, 2])), "slot_idx must be int32 of shape"),
    ({}, lambda d: d.update(out=torch.empty(3, 4, 4, 32, dtype=torch.bfloat16)), "out must have v's shape"),
], ids=["L_below_2T", "T_9", "T_1", "v_dtype", "q_dim", "g_window", "beta_missing", "slot_idx_int64", "out_shape"])
def test_replay_verify_rejects_bad_input_and_touches_nothing(case, mutate, match):
    pool, d = _case(**case)
    if mutate:
        mutate(d)
    before = pool.clone()
    with pytest.raises(ValueError, match=match):
        replay_verify(pool, d.pop("q"), d.pop("k"), d.pop("v"), **d, **PREPARED)
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), f"{name} changed on a rejected call"


@pytest.mark.parametrize("snaps_shape, match", [
    ((4, 3, 4, 64, 64), r"snapshots has shape \(4, 3, 4, 64, 64\), expected \(4, 4, 4, 64, 64\)"),
    ((4, 4, 4, 64, 32), r"snapshots has shape"),
])
def test_snapshot_verify_rejects_mismatched_snapshots(snaps_shape, match):
    state = torch.randn(4, 4, 64, 64)
    q, k, v, g, beta = window_inputs(SHAPE, 3, 4, torch.float32, "cpu")
    snaps = torch.zeros(snaps_shape)
    with pytest.raises(ValueError, match=match):
        snapshot_verify(state, snaps, q, k, v, g, beta, **PREPARED)
    assert not snaps.any()
    with pytest.raises(ValueError, match=r"state has shape \(4, 4, 64, 32\), expected \[slots, \*\(4, 64, 64\)\]"):
        snapshot_verify(state[..., :32], snaps, q, k, v, g, beta, **PREPARED)


# ---- The C ABI (library validation only: no launch, no GPU) ----

HEADER = Path(__file__).resolve().parents[1] / "plugins" / "include" / "replayssm" / "gdn" / "spec_params.h"
needs_lib = pytest.mark.skipif(not (_lib.available() and _lib.has_symbol(_lib.load(), "rssm_gdn_verify")),
                               reason="kernel library not built, or built without the GDN verify kernels")


def test_binding_fields_follow_spec_params_h():
    """Field names, order and types of the ctypes mirror equal the C struct's (no library needed)."""
    assert [(n, t) for n, t in spec_kernels.GdnVerifyParams._fields_] == \
        _header_fields(HEADER, "rssm_gdn_verify_params")


def _status(**overrides):
    """The library's validation of a well-formed replay verify (T = 4, L = 16) with overrides; strides follow the
    (overridden) sizes unless overridden themselves."""
    sizes = dict(batch=2, num_k_heads=2, num_v_heads=4, head_k_dim=128, head_v_dim=128, window=4, buffer_len=16,
                 num_slots=4, pad_slot_id=-1, mode=spec_kernels.REPLAY, state_dtype=0, act_dtype=2)
    sizes.update({k: v for k, v in overrides.items() if k in sizes})
    T, H, HV, K, V = (sizes[n] for n in ("window", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"))
    p = spec_kernels.GdnVerifyParams(**sizes)
    for name, (heads, dim) in (("q", (H, K)), ("k", (H, K)), ("v", (HV, V)), ("y", (HV, V))):
        setattr(p, f"{name}_batch_stride", T * heads * dim)
        setattr(p, f"{name}_token_stride", heads * dim)
        setattr(p, f"{name}_head_stride", dim)
    for name in ("g", "beta"):
        setattr(p, f"{name}_batch_stride", T * HV)
        setattr(p, f"{name}_token_stride", HV)
    dummy = 1 << 20  # 16-byte aligned fake addresses: validation never dereferences them
    for name in ("state", "ring_u", "ring_k", "ring_g", "cursor", "snapshots", "q", "k", "v", "g", "beta", "y"):
        setattr(p, name, dummy)
    for k, v in overrides.items():
        if k not in sizes:
            setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_gdn_verify_validate(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


@needs_lib
def test_native_abi_struct_size_matches_binding():
    assert spec_kernels.abi_size_matches()


@needs_lib
def test_native_dispatch_table_matches_python_lists():
    for hd in range(1, 300):
        assert (_status(head_k_dim=hd)[0] == 0) == (hd in GDN_HEAD_DIMS), f"head_k_dim={hd}"
        assert (_status(head_v_dim=hd)[0] == 0) == (hd in GDN_HEAD_DIMS), f"head_v_dim={hd}"
    for T in range(-1, 12):
        ok = SPEC_MIN_WINDOW <= T <= SPEC_MAX_WINDOW
        assert (_status(window=T, buffer_len=MAX_BUFFER_LEN)[0] == 0) == ok, f"window={T}"
        assert (_status(window=T, mode=spec_kernels.SNAPSHOT)[0] == 0) == ok, f"snapshot window={T}"
    for L in range(-1, 70):
        assert (_status(buffer_len=L)[0] == 0) == (8 <= L <= MAX_BUFFER_LEN), f"buffer_len={L} (T=4)"
    for code in range(-1, 5):
        assert (_status(state_dtype=code)[0] == 0) == (code in (0, 1, 2)), f"state_dtype={code}"
        assert (_status(act_dtype=code)[0] == 0) == (code in (0, 1, 2)), f"act_dtype={code}"


@needs_lib
def test_native_snapshot_path_needs_no_ring():
    assert _status(mode=spec_kernels.SNAPSHOT, ring_u=None, ring_k=None, ring_g=None, cursor=None,
                   buffer_len=0) == (0, "")


@needs_lib
@pytest.mark.parametrize("overrides, words", [
    (dict(head_k_dim=96), "head_k_dim=96"),
    (dict(head_v_dim=32), "head_v_dim=32"),
    (dict(window=9), "window=9 is out of range (2..8"),
    (dict(window=1), "window=1 is out of range"),
    (dict(buffer_len=7), "buffer_len=7 is out of range for window=4 (8..64"),
    (dict(buffer_len=65), "buffer_len=65"),
    (dict(num_v_heads=3), "num_v_heads=3"),
    (dict(num_k_heads=0), "num_k_heads=0 is out of range (1..65535)"),
    (dict(num_k_heads=1, num_v_heads=70000), "num_v_heads=70000 is more than 65535 value heads per key head"),
    (dict(act_dtype=5), "act_dtype=5"),
    (dict(ring_u=None), "ring_u is NULL"),
    (dict(cursor=None), "cursor is NULL"),
    (dict(mode=0, snapshots=None), "snapshots is NULL"),
    (dict(g=None), "g is NULL"),
    (dict(state=(1 << 20) + 4), "state is not 16-byte aligned"),
    (dict(mode=7), "mode=7"),
    (dict(batch=9, slot_idx=None), "batch=9 exceeds num_slots=4"),
    (dict(v=(1 << 20) + 2), "v rows must be 16-byte aligned"),
    (dict(q_token_stride=129), "q rows must be 16-byte aligned"),
    (dict(k_batch_stride=4), "k rows must be 16-byte aligned"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_native_errors_name_the_offending_value(overrides, words):
    status, msg = _status(**overrides)
    assert status == 1 and words in msg, msg


@needs_lib
def test_native_rejects_mismatched_struct_size():
    lib = _lib.load()
    p = spec_kernels.GdnVerifyParams()
    assert lib.rssm_gdn_verify_validate(ctypes.byref(p), ctypes.sizeof(p) - 8) == 3


# ---- Read copies of the verify kernel: the native table against config.GDN_KERNEL_READ_* (the decode family's
#      list), errors naming the value, and the op's refusal of combinations without a kernel (no GPU needed) ----

DUMMY = 1 << 20  # a 16-byte aligned fake address: validation never dereferences it


@needs_lib
def test_native_verify_read_copy_table_matches_python_lists():
    """The (state dtype, act dtype, read format, mode) combinations the library accepts are exactly those of
    config.GDN_KERNEL_READ_*; the others are refused naming the format. Zero fields (read_format 0) mean no copy,
    as the TensorRT plugin's zero-initialised params leave them."""
    codes = {dtype_name(d): c for d, c in DTYPE_CODES.items()}
    for state in ("fp32", "fp16", "bf16"):
        for act in ("fp32", "fp16", "bf16"):
            for fmt, code in READ_FORMAT_CODES.items():
                for mode in (spec_kernels.SNAPSHOT, spec_kernels.REPLAY):
                    want = fmt == "none" or (state == GDN_KERNEL_READ_COPY_STATE and act in GDN_KERNEL_READ_COPY_ACTS
                                             and fmt in GDN_KERNEL_READ_FORMATS and mode == spec_kernels.REPLAY)
                    status, msg = _status(state_dtype=codes[state], act_dtype=codes[act], read_format=code, mode=mode,
                                          read_state=DUMMY, read_scale=DUMMY)
                    where = f"state {state}, act {act}, read_format {fmt}, mode {mode}"
                    assert (status == 0) == want, f"{where}: {msg}"
                    if not want:
                        assert f"read_format={code} ({fmt})" in msg, msg
    assert "read_format=9 (unknown)" in _status(read_format=9, read_state=DUMMY)[1]
    assert _status(read_format=0, read_state=None, read_scale=None)[0] == 0


@needs_lib
@pytest.mark.parametrize("overrides, words", [
    (dict(read_format=4), "read_format=4 (nvfp4) is not supported by the GDN verify kernel"),
    (dict(read_format=7), "read_format=7 (unknown) is not supported"),
    (dict(read_format=1, read_state=None), "read_state is NULL (required by read_format=1, fp16)"),
    (dict(read_format=3, read_scale=None), "read_scale is NULL (required by read_format=3, fp8)"),
    (dict(read_format=2, read_state=DUMMY + 8), "read_state is not 16-byte aligned"),
    (dict(read_format=3, read_scale=DUMMY + 2), "read_scale is not 4-byte aligned"),
    (dict(read_format=1, mode=spec_kernels.SNAPSHOT), "read_format=1 (fp16) needs mode=1 (replay), got mode=0"),
    (dict(read_format=3, state_dtype=2), "read_format=3 (fp8) with state_dtype=2 is not supported"),
    (dict(read_format=2, act_dtype=0), "read_format=2 (bf16) with act_dtype=0 (fp32) is not supported"),
], ids=["nvfp4", "unknown", "no_read_state", "fp8_no_scale", "misaligned_copy", "misaligned_scale", "snapshot_path",
        "bf16_checkpoint", "fp32_activations"])
def test_native_verify_read_copy_errors_name_the_value(overrides, words):
    args = dict(read_state=DUMMY, read_scale=DUMMY)
    args.update(overrides)
    status, msg = _status(**args)
    assert status == 1 and words in msg, msg


@needs_lib
def test_native_verify_fp16_bf16_copies_need_no_scale():
    for code in (1, 2):
        status, msg = _status(read_format=code, read_state=DUMMY, read_scale=None)
        assert status == 0, msg


@pytest.mark.parametrize("kda, state, act, fmt, match", [
    (False, "fp32", "bf16", "nvfp4", "read_format=nvfp4: the GDN verify kernel reads the copy formats fp16, bf16, fp8"),
    (True, "fp32", "bf16", "fp8", r"read_format=fp8 with per_channel_decay \(KDA\): the KDA verify kernel"),
    (False, "fp16", "fp16", "fp8", "read_format=fp8 with state_dtype=fp16: the GDN verify kernel reads copies of"),
    (False, "fp32", "fp32", "fp16", "read_format=fp16 with act_dtype=fp32: the GDN verify kernel"),
], ids=["nvfp4", "kda", "fp16_checkpoint", "fp32_activations"])
def test_verify_op_refuses_read_copies_without_a_kernel(kda, state, act, fmt, match):
    """The check the CUDA path runs before filling the params (no GPU needed): the combination and the value are
    named, and the kernel ("verify")."""
    shape = GdnLayerShape(2, 4, 128, 128, per_channel_decay=kda)
    with pytest.raises(NotImplementedError, match=match):
        check_kernel_read_copy(shape, ReplayConfig(16, state, act, fmt), kernel="verify")


@pytest.mark.parametrize("act", GDN_KERNEL_READ_COPY_ACTS)
@pytest.mark.parametrize("fmt", ("none",) + GDN_KERNEL_READ_FORMATS)
def test_verify_op_accepts_the_kernel_read_copies(act, fmt):
    check_kernel_read_copy(GdnLayerShape(2, 4, 128, 128), ReplayConfig(16, GDN_KERNEL_READ_COPY_STATE, act, fmt),
                           kernel="verify")


def test_verify_binding_passes_the_pool_copy():
    """fill_params carries the format code and the copy's buffers (CPU tensors: addresses only, nothing launched)."""
    pool = spec_pool(SHAPE, 4, ReplayConfig(12, torch.float32, torch.bfloat16, "fp8"), 4, "cpu")
    q, k, v, g, beta = window_inputs(SHAPE, 3, 4, torch.bfloat16, "cpu")
    y = torch.empty_like(v)
    rings = dict(ring_u=pool.ring_u, ring_k=pool.ring_k, ring_g=pool.ring_g, cursor=pool.cursor, buffer_len=12)
    p = spec_kernels.fill_params(spec_kernels.REPLAY, pool.checkpoint, q, k, v, g, beta, y, **rings,
                                 read_format="fp8", read_state=pool.buffers["read_state"],
                                 read_scale=pool.buffers["read_scale"])
    assert p.read_format == READ_FORMAT_CODES["fp8"]
    assert p.read_state == pool.buffers["read_state"].data_ptr()
    assert p.read_scale == pool.buffers["read_scale"].data_ptr()
    plain = spec_kernels.fill_params(spec_kernels.REPLAY, pool.checkpoint, q, k, v, g, beta, y, **rings)
    assert plain.read_format == 0 and plain.read_state is None and plain.read_scale is None


def test_cpu_replay_verify_with_a_read_copy_is_the_reference():
    """CPU tensors: the op with a read copy is the reference (y from the copy, the fold rewrites it)."""
    for fmt in GDN_KERNEL_READ_FORMATS:
        pool = spec_pool(SHAPE, 4, ReplayConfig(12, torch.float32, torch.bfloat16, fmt), 4, "cpu")
        ref = pool.clone()
        q, k, v, g, beta = window_inputs(SHAPE, 3, 4, torch.bfloat16, "cpu")
        y = replay_verify(pool, q, k, v, g, beta, **PREPARED)
        y_ref = replay_verify_reference(ref, q, k, v, g, beta)
        assert torch.equal(y, y_ref), fmt
        for name, t in pool.buffers.items():
            assert torch.equal(t, ref.buffers[name]), f"{fmt}: {name}"
