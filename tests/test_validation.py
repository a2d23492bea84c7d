"""Input validation of the ops, and agreement between the Python lists and the native dispatch tables."""

import ctypes
import re
from pathlib import Path

import pytest
import torch

from mamba2_cases import layer_params, step_inputs
from trtllm_replayssm import _lib
from trtllm_replayssm.config import (DTYPE_CODES, GDN_HEAD_DIMS, GDN_KERNEL_READ_COPY_ACTS,
                                     GDN_KERNEL_READ_COPY_STATE, GDN_KERNEL_READ_FORMATS, MAMBA2_ACT_DTYPES,
                                     MAMBA2_DSTATES, MAMBA2_HEAD_DIMS, MAMBA2_KERNEL_READ_COPIES,
                                     MAMBA2_STATE_DTYPES, MAX_BUFFER_LEN, READ_FORMAT_CODES, GdnLayerShape,
                                     Mamba2LayerShape, ReplayConfig, dtype_name)
from trtllm_replayssm.ops.gdn import check_kernel_read_copy
from trtllm_replayssm.ops.gdn import kernels as gdn_kernels
from trtllm_replayssm.ops.gdn import spec_kernels as gdn_spec_kernels
from trtllm_replayssm.ops.mamba2 import conventional_decode, kernels, replay_decode, spec_kernels
from trtllm_replayssm.pool import Mamba2StatePool

SHAPE = Mamba2LayerShape(4, 64, 64, 2)


def _case(batch=3, act=torch.bfloat16):
    pool = Mamba2StatePool(SHAPE, 4, ReplayConfig(buffer_len=4, act_dtype=act))
    A, D, dt_bias = layer_params(SHAPE, "cpu")
    return pool, A, D, dt_bias, step_inputs(SHAPE, batch, act, "cpu")


@pytest.mark.parametrize("mutate, match", [
    (lambda a: a.update(x=a["x"][:, :, :32]), r"x has shape \(3, 4, 32\)"),
    (lambda a: a.update(x=a["x"].float()), "x has dtype fp32 but the pool's act_dtype is bf16"),
    (lambda a: a.update(B=a["B"].transpose(1, 2).contiguous().transpose(1, 2)), "B must be contiguous"),
    (lambda a: a.update(dt=a["dt"][:, :2]), r"dt has shape \(3, 2\)"),
    (lambda a: a.update(A=a["A"].double()), "A has dtype float64"),
    (lambda a: a.update(slot_idx=torch.tensor([0, 1, 2])), "slot_idx has dtype int64"),
    (lambda a: a.update(z=a["z"][:2]), r"z has shape \(2, 4, 64\)"),
])
def test_replay_rejects_bad_input_and_touches_nothing(mutate, match):
    pool, A, D, dt_bias, (x, dt, B, C, z) = _case()
    args = dict(x=x, dt=dt, B=B, C=C, A=A, D=D, z=z, dt_bias=dt_bias)
    mutate(args)
    before = {k: v.clone() for k, v in pool.buffers.items()}
    with pytest.raises(ValueError, match=match):
        replay_decode(pool, args.pop("x"), args.pop("dt"), args.pop("B"), args.pop("C"), args.pop("A"), **args)
    for k, v in pool.buffers.items():
        assert torch.equal(v, before[k]), f"{k} changed on a rejected call"


def test_batch_larger_than_pool_needs_slot_idx():
    pool, A, D, dt_bias, (x, dt, B, C, z) = _case(batch=5)
    with pytest.raises(ValueError, match="batch=5 exceeds the pool's 4 slots"):
        replay_decode(pool, x, dt, B, C, A)


def test_conventional_rejects_unsupported_head_dim():
    state = torch.zeros(2, 4, 96, 64)
    x = torch.randn(2, 4, 96)
    with pytest.raises(ValueError, match="head_dim=96"):
        conventional_decode(state, x, torch.randn(2, 4), torch.randn(2, 2, 64), torch.randn(2, 2, 64),
                            -torch.ones(4))


needs_lib = pytest.mark.skipif(not _lib.available(), reason="kernel library not built")


def _native_status(**overrides):
    """Runs the library's validation (no launch, no GPU) on a well-formed params struct with overrides."""
    dummy = 1 << 20  # 16-byte aligned fake addresses: validation never dereferences them
    p = kernels.Mamba2DecodeParams(batch=2, nheads=8, head_dim=64, dstate=128, ngroups=2, buffer_len=16,
                                   num_slots=4, pad_slot_id=-1, mode=kernels.REPLAY, state_dtype=0,
                                   act_dtype=2, dt_softplus=1, x_batch_stride=512, x_head_stride=64,
                                   B_batch_stride=256, B_group_stride=128, C_batch_stride=256,
                                   C_group_stride=128)
    for name in ("state", "ring_x", "ring_B", "ring_dt", "cursor", "x", "dt", "B", "C", "A", "y"):
        setattr(p, name, dummy)
    for k, v in overrides.items():
        setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_mamba2_decode_validate(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


@needs_lib
def test_native_abi_struct_size_matches_binding():
    assert kernels.abi_size_matches()


@needs_lib
def test_native_latency_route_accepted_where_the_kernel_takes_it():
    """The latency route's limit passes validation on an fp32 checkpoint without copy whose head tiles own the
    cursor replicas (per tile: 64 x 128, 128 x 64, 80 x 64; per block of four: 64 x 256, 128 x 128, 128 x 256,
    80 x 256), and a limit of 0 passes everywhere."""
    for hd, n in ((64, 128), (128, 64), (80, 64), (64, 256), (128, 128), (128, 256), (80, 256)):
        assert _native_status(latency_route_bytes=1 << 25, head_dim=hd, dstate=n) == (0, ""), (hd, n)
    for hd, n in ((80, 128),):
        assert _native_status(latency_route_bytes=0, head_dim=hd, dstate=n)[0] == 0
        assert _native_status(latency_route_bytes=1, head_dim=hd, dstate=n)[0] == 1


@needs_lib
def test_native_dispatch_table_matches_python_lists():
    for hd in range(1, 300):
        assert (_native_status(head_dim=hd)[0] == 0) == (hd in MAMBA2_HEAD_DIMS), f"head_dim={hd}"
    for n in range(1, 600):
        assert (_native_status(dstate=n)[0] == 0) == (n in MAMBA2_DSTATES), f"dstate={n}"
    _check_buffer_len_and_dtypes(_native_status)


def _check_buffer_len_and_dtypes(status):
    """The ring length range and the dtype codes, as every family's native table must accept them."""
    for L in range(-1, 70):
        assert (status(buffer_len=L)[0] == 0) == (1 <= L <= MAX_BUFFER_LEN), f"buffer_len={L}"
    for code in range(-1, 5):
        sup_s = code in {DTYPE_CODES[d] for d in MAMBA2_STATE_DTYPES}
        sup_a = code in {DTYPE_CODES[d] for d in MAMBA2_ACT_DTYPES}
        assert (status(state_dtype=code)[0] == 0) == sup_s, f"state_dtype={code}"
        assert (status(act_dtype=code)[0] == 0) == sup_a, f"act_dtype={code}"


@needs_lib
@pytest.mark.parametrize("overrides, words", [
    (dict(head_dim=96), "head_dim=96"),
    (dict(dstate=32), "dstate=32"),
    (dict(buffer_len=65), "buffer_len=65"),
    (dict(ngroups=3), "ngroups=3"),
    (dict(ring_B=None), "ring_B is NULL"),
    (dict(state=(1 << 20) + 4), "state is not 16-byte aligned"),
    (dict(mode=7), "mode=7"),
    (dict(batch=9, slot_idx=None), "batch=9 exceeds num_slots=4"),
    (dict(x=(1 << 20) + 2), "x rows must be 16-byte aligned"),
    (dict(B_batch_stride=129), "B rows must be 16-byte aligned"),
    (dict(latency_route_bytes=-5), "latency_route_bytes=-5 is negative"),
    (dict(latency_route_bytes=1024, mode=kernels.CONVENTIONAL), "latency_route_bytes=1024 needs mode=1 (replay)"),
    (dict(latency_route_bytes=1024, state_dtype=2), "needs an fp32 checkpoint without read copy (state_dtype=2"),
    (dict(latency_route_bytes=1024, read_format=1, read_state=1 << 20), "without read copy (state_dtype=0, read_format=1)"),
    (dict(latency_route_bytes=1024, head_dim=80), "tiles <= 8, or a multiple of 4 <= 32; got 80 * 128"),
])
def test_native_errors_name_the_offending_value(overrides, words):
    status, msg = _native_status(**overrides)
    assert status == 1 and words in msg, msg


@needs_lib
def test_native_read_copy_table_matches_python_lists():
    """The (state dtype, read format) pairs the kernel accepts are exactly those the config allows and the
    binding lists as kernel pairs; the others and unknown codes are refused, naming the value."""
    dummy = 1 << 20
    for state in MAMBA2_STATE_DTYPES:
        for fmt, code in READ_FORMAT_CODES.items():
            try:
                ReplayConfig(16, state, "bf16", fmt).validate()
                config_ok = True
            except ValueError:
                config_ok = False
            want = config_ok and (fmt == "none" or (dtype_name(state), fmt) in MAMBA2_KERNEL_READ_COPIES)
            status, msg = _native_status(state_dtype=DTYPE_CODES[state], read_format=code, read_state=dummy,
                                         read_scale=dummy, read_block_scale=dummy)
            assert (status == 0) == want, f"state {state}, read_format {fmt}: {msg}"
            if not want and code:
                assert f"read_format={code}" in msg, msg
    assert "read_format=9 (unknown)" in _native_status(read_format=9, read_state=dummy)[1]


@needs_lib
@pytest.mark.parametrize("overrides, words", [
    (dict(read_format=3, read_state=None), "read_state is NULL"),
    (dict(read_format=3, read_scale=None), "read_scale is NULL"),
    (dict(read_format=1, read_state=(1 << 20) + 8), "read_state is not 16-byte aligned"),
    (dict(read_format=1, mode=kernels.CONVENTIONAL), "needs mode=1 (replay), got mode=0"),
    (dict(read_format=4, read_block_scale=None), "read_block_scale is NULL"),
    (dict(read_format=4, read_block_scale=(1 << 20) + 4), "read_block_scale is not 16-byte aligned"),
    (dict(read_format=4, read_scale=None), "read_scale is NULL (required by read_format=4, nvfp4)"),
    (dict(read_format=4, state_dtype=1), "read_format=4 (nvfp4) with state_dtype=1 is not supported"),
    (dict(read_format=2, state_dtype=2), "read_format=2 (bf16) with state_dtype=2 is not supported"),
])
def test_native_read_copy_errors_name_the_value(overrides, words):
    dummy = 1 << 20
    args = dict(read_state=dummy, read_scale=dummy, read_block_scale=dummy)
    args.update(overrides)
    status, msg = _native_status(**args)
    assert status == 1 and words in msg, msg


@needs_lib
def test_native_rejects_mismatched_struct_size():
    lib = _lib.load()
    p = kernels.Mamba2DecodeParams()
    assert lib.rssm_mamba2_decode_validate(ctypes.byref(p), ctypes.sizeof(p) - 8) == 3


# ---- Gated DeltaNet: the binding against params.h, and the native table against GDN_HEAD_DIMS ----

PARAMS_H = Path(__file__).resolve().parents[1] / "plugins" / "include" / "replayssm"
_C_TYPES = {"int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "float": ctypes.c_float}


def _header_fields(header: Path, struct: str):
    """(name, ctypes type) of each field of `struct` in declaration order; every pointer as c_void_p."""
    body = re.search(r"typedef struct " + struct + r" \{(.*?)\} " + struct + ";", header.read_text(), re.S)
    fields = []
    for line in body.group(1).splitlines():
        decl = re.match(r"\s*(?:const\s+)?(\w+)\s*(\*?)\s*([\w\s,]+);", line.split("//")[0])
        if decl:
            ctype = ctypes.c_void_p if decl.group(2) else _C_TYPES[decl.group(1)]
            fields += [(name.strip(), ctype) for name in decl.group(3).split(",")]
    return fields


@pytest.mark.parametrize("header, struct, binding", [
    ("gdn/params.h", "rssm_gdn_decode_params", gdn_kernels.GdnDecodeParams),
    ("mamba2/params.h", "rssm_mamba2_decode_params", kernels.Mamba2DecodeParams),
    ("mamba2/spec_params.h", "rssm_mamba2_verify_params", spec_kernels.Mamba2VerifyParams),
    ("gdn/spec_params.h", "rssm_gdn_verify_params", gdn_spec_kernels.GdnVerifyParams),
], ids=["gdn", "mamba2", "mamba2_verify", "gdn_verify"])
def test_binding_fields_follow_params_h(header, struct, binding):
    """Field names, order and types of the ctypes mirror equal the C struct's (no library needed)."""
    assert [(n, t) for n, t in binding._fields_] == _header_fields(PARAMS_H / header, struct)


needs_gdn = pytest.mark.skipif(not (_lib.available() and _lib.has_symbol(_lib.load(), "rssm_gdn_decode")),
                               reason="kernel library not built, or built without the GDN kernels")


def _gdn_status(**overrides):
    """The library's GDN validation (no launch, no GPU) of a well-formed replay step with overrides; strides
    follow the (overridden) sizes unless overridden themselves."""
    sizes = dict(batch=2, num_k_heads=2, num_v_heads=4, head_k_dim=128, head_v_dim=128, buffer_len=16,
                 num_slots=4, pad_slot_id=-1, mode=gdn_kernels.REPLAY, state_dtype=0, act_dtype=2)
    sizes.update({k: v for k, v in overrides.items() if k in sizes})
    H, HV, K, V = sizes["num_k_heads"], sizes["num_v_heads"], sizes["head_k_dim"], sizes["head_v_dim"]
    p = gdn_kernels.GdnDecodeParams(**sizes, q_batch_stride=H * K, q_head_stride=K, k_batch_stride=H * K,
                                    k_head_stride=K, v_batch_stride=HV * V, v_head_stride=V, g_batch_stride=HV,
                                    beta_batch_stride=HV, y_batch_stride=HV * V, y_head_stride=V)
    dummy = 1 << 20  # 16-byte aligned fake addresses: validation never dereferences them
    for name in ("state", "ring_u", "ring_k", "ring_g", "cursor", "q", "k", "v", "g", "beta", "y"):
        setattr(p, name, dummy)
    for k, v in overrides.items():
        if k not in sizes:
            setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_gdn_decode_validate(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


@needs_gdn
def test_native_gdn_abi_struct_size_matches_binding():
    assert gdn_kernels.abi_size_matches()


@needs_gdn
def test_native_gdn_dispatch_table_matches_python_lists():
    for hd in range(1, 300):
        assert (_gdn_status(head_k_dim=hd)[0] == 0) == (hd in GDN_HEAD_DIMS), f"head_k_dim={hd}"
        assert (_gdn_status(head_v_dim=hd)[0] == 0) == (hd in GDN_HEAD_DIMS), f"head_v_dim={hd}"
    _check_buffer_len_and_dtypes(_gdn_status)


@needs_gdn
def test_native_gdn_conventional_needs_no_ring():
    assert _gdn_status(mode=gdn_kernels.CONVENTIONAL, ring_u=None, ring_k=None, ring_g=None, cursor=None,
                       buffer_len=1) == (0, "")


@needs_gdn
@pytest.mark.parametrize("overrides, words", [
    (dict(head_k_dim=96), "head_k_dim=96"),
    (dict(head_v_dim=32), "head_v_dim=32"),
    (dict(buffer_len=65), "buffer_len=65"),
    (dict(num_v_heads=3), "num_v_heads=3"),
    (dict(num_k_heads=2, num_v_heads=70000), "num_v_heads=70000 is out of range (1..65535)"),
    (dict(num_k_heads=0), "num_k_heads=0 is out of range (1..65535)"),
    (dict(state_dtype=5), "state_dtype=5"),
    (dict(ring_u=None), "ring_u is NULL"),
    (dict(cursor=None), "cursor is NULL"),
    (dict(g=None), "g is NULL"),
    (dict(state=(1 << 20) + 4), "state is not 16-byte aligned"),
    (dict(mode=7), "mode=7"),
    (dict(batch=9, slot_idx=None), "batch=9 exceeds num_slots=4"),
    (dict(v=(1 << 20) + 2), "v rows must be 16-byte aligned"),
    (dict(q_batch_stride=129), "q rows must be 16-byte aligned"),
    (dict(latency_route_bytes=-3), "latency_route_bytes=-3 is negative"),
    (dict(latency_route_bytes=1024, mode=gdn_kernels.CONVENTIONAL), "latency_route_bytes=1024 needs mode=1 (replay)"),
    (dict(latency_route_bytes=1024, read_format=1, read_state=1 << 20), "without read copy (state_dtype=0, read_format=1)"),
    (dict(latency_route_bytes=1024, state_dtype=1), "needs an fp32 checkpoint without read copy (state_dtype=1"),
    (dict(latency_route_bytes=1024, per_channel_decay=1), "is not supported with per_channel_decay=1 (KDA)"),
    (dict(latency_route_bytes=1024, head_k_dim=256, head_v_dim=256), "head_v_dim * head_k_dim <= 32768, got 256 * 256"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_native_gdn_errors_name_the_offending_value(overrides, words):
    status, msg = _gdn_status(**overrides)
    assert status == 1 and words in msg, msg


@needs_gdn
def test_native_gdn_latency_route_accepted_where_the_kernel_takes_it():
    """The latency route's limit passes validation on GDN shapes whose heads fit eight blocks of four tiles."""
    for k, v in ((128, 128), (128, 256), (256, 128), (64, 64)):
        assert _gdn_status(latency_route_bytes=1 << 25, head_k_dim=k, head_v_dim=v) == (0, ""), (k, v)


@needs_gdn
def test_native_gdn_rejects_mismatched_struct_size():
    lib = _lib.load()
    p = gdn_kernels.GdnDecodeParams()
    assert lib.rssm_gdn_decode_validate(ctypes.byref(p), ctypes.sizeof(p) - 8) == 3


@pytest.mark.skipif(not _lib.available(), reason="kernel library not built")
def test_gdn_binding_asks_to_rebuild_a_library_without_gdn(monkeypatch):
    monkeypatch.setattr(_lib, "has_symbol", lambda lib, name: False)
    with pytest.raises(_lib.KernelError, match="rssm_gdn_decode_validate.*rebuild"):
        gdn_kernels.validate(gdn_kernels.GdnDecodeParams())


@needs_gdn
def test_native_gdn_raw_gates_need_no_g_beta_but_every_raw_input():
    raw = dict(gate_mode=gdn_kernels.GATES_RAW, g=None, beta=None, a=1 << 20, b=1 << 20, A_log=1 << 20,
               dt_bias=1 << 20, gate_dtype=2, gate_param_dtype=0)
    assert _gdn_status(**raw) == (0, "")
    assert _gdn_status(**raw, per_channel_decay=1, qk_flags=gdn_kernels.QK_L2NORM | gdn_kernels.QK_SCALE,
                       q_scale=0.125) == (0, "")
    for name in ("a", "b", "A_log", "dt_bias"):
        status, msg = _gdn_status(**{**raw, name: None})
        assert status != 0 and msg == f"{name} is NULL (required by raw gates)", name
    status, msg = _gdn_status(g=None)
    assert status != 0 and msg == "g is NULL (required by precomputed gates)"


@needs_gdn
@pytest.mark.parametrize("field, value, match", [
    ("per_channel_decay", 2, "per_channel_decay=2 is not supported (0 = GDN, 1 = KDA)"),
    ("qk_flags", 4, "qk_flags=4 is not supported (bits: 1 = L2 norm, 2 = scale q)"),
    ("gate_mode", 2, "gate_mode=2 is not supported (0 = precomputed g, beta; 1 = raw)"),
])
def test_native_gdn_rejects_unknown_options(field, value, match):
    status, msg = _gdn_status(**{field: value})
    assert status != 0 and msg == match


@needs_gdn
def test_native_gdn_rejects_unsupported_gate_dtypes():
    raw = dict(gate_mode=gdn_kernels.GATES_RAW, a=1 << 20, b=1 << 20, A_log=1 << 20, dt_bias=1 << 20)
    status, msg = _gdn_status(**raw, gate_dtype=7)
    assert status != 0 and msg == "gate_dtype=7 is not supported (supported: fp32, fp16, bf16)"
    status, msg = _gdn_status(**raw, gate_param_dtype=9)
    assert status != 0 and msg == "gate_param_dtype=9 is not supported (supported: fp32, fp16, bf16)"


# ---- GDN read copies: the native table against config.GDN_KERNEL_READ_*, errors naming the value, and the op's
#      refusal of combinations without a kernel (no GPU needed) ----

@needs_gdn
def test_native_gdn_read_copy_table_matches_python_lists():
    """The (state dtype, act dtype, read format, mode, KDA) combinations the library accepts are exactly those of
    config.GDN_KERNEL_READ_*; the others are refused naming the format."""
    dummy = 1 << 20
    codes = {dtype_name(d): c for d, c in DTYPE_CODES.items()}
    for state in ("fp32", "fp16", "bf16"):
        for act in ("fp32", "fp16", "bf16"):
            for fmt, code in READ_FORMAT_CODES.items():
                for mode in (gdn_kernels.CONVENTIONAL, gdn_kernels.REPLAY):
                    for kda in (0, 1):
                        want = fmt == "none" or (state == GDN_KERNEL_READ_COPY_STATE and act in
                                                 GDN_KERNEL_READ_COPY_ACTS and fmt in GDN_KERNEL_READ_FORMATS and
                                                 mode == gdn_kernels.REPLAY and not kda)
                        status, msg = _gdn_status(state_dtype=codes[state], act_dtype=codes[act], read_format=code,
                                                  mode=mode, per_channel_decay=kda, read_state=dummy,
                                                  read_scale=dummy)
                        where = f"state {state}, act {act}, read_format {fmt}, mode {mode}, kda {kda}"
                        assert (status == 0) == want, f"{where}: {msg}"
                        if not want:
                            assert f"read_format={code} ({fmt})" in msg, msg
    assert "read_format=9 (unknown)" in _gdn_status(read_format=9, read_state=dummy)[1]


@needs_gdn
@pytest.mark.parametrize("overrides, words", [
    (dict(read_format=4), "read_format=4 (nvfp4) is not supported by the GDN decode kernel"),
    (dict(read_format=1, read_state=None), "read_state is NULL (required by read_format=1, fp16)"),
    (dict(read_format=3, read_scale=None), "read_scale is NULL (required by read_format=3, fp8)"),
    (dict(read_format=2, read_state=(1 << 20) + 8), "read_state is not 16-byte aligned"),
    (dict(read_format=3, read_scale=(1 << 20) + 2), "read_scale is not 4-byte aligned"),
    (dict(read_format=1, mode=gdn_kernels.CONVENTIONAL), "needs mode=1 (replay), got mode=0"),
    (dict(read_format=1, per_channel_decay=1), "read_format=1 (fp16) with per_channel_decay=1 (KDA)"),
    (dict(read_format=3, state_dtype=2), "read_format=3 (fp8) with state_dtype=2 is not supported"),
    (dict(read_format=2, act_dtype=0), "read_format=2 (bf16) with act_dtype=0 (fp32) is not supported"),
], ids=["nvfp4", "no_read_state", "fp8_no_scale", "misaligned_copy", "misaligned_scale", "conventional", "kda",
        "bf16_checkpoint", "fp32_activations"])
def test_native_gdn_read_copy_errors_name_the_value(overrides, words):
    dummy = 1 << 20
    args = dict(read_state=dummy, read_scale=dummy)
    args.update(overrides)
    status, msg = _gdn_status(**args)
    assert status == 1 and words in msg, msg


@pytest.mark.parametrize("kda, state, act, fmt, match", [
    (False, "fp32", "bf16", "nvfp4", "read_format=nvfp4: the GDN decode kernel reads the copy formats fp16, bf16, fp8"),
    (True, "fp32", "bf16", "fp8", r"read_format=fp8 with per_channel_decay \(KDA\)"),
    (False, "fp16", "fp16", "fp8", "read_format=fp8 with state_dtype=fp16"),
    (False, "fp32", "fp32", "fp16", "read_format=fp16 with act_dtype=fp32"),
], ids=["nvfp4", "kda", "fp16_checkpoint", "fp32_activations"])
def test_gdn_op_refuses_read_copies_without_a_kernel(kda, state, act, fmt, match):
    """The check the CUDA path runs first (no GPU needed): the combination and the value are named."""
    shape = GdnLayerShape(2, 4, 128, 128, per_channel_decay=kda)
    with pytest.raises(NotImplementedError, match=match):
        check_kernel_read_copy(shape, ReplayConfig(4, state, act, fmt))


@pytest.mark.parametrize("act", GDN_KERNEL_READ_COPY_ACTS)
@pytest.mark.parametrize("fmt", ("none",) + GDN_KERNEL_READ_FORMATS)
def test_gdn_op_accepts_the_kernel_read_copies(act, fmt):
    check_kernel_read_copy(GdnLayerShape(2, 4, 128, 128), ReplayConfig(4, GDN_KERNEL_READ_COPY_STATE, act, fmt))
