"""The prefill entry points' validation in the library (no launch, no GPU: the params are filled from CPU tensors,
whose addresses validation never dereferences): well-formed params pass, and each bad field is refused with a
message naming it, the token-0 step going through the family's decode validation."""

import ctypes

import pytest
import torch

import gdn_cases
import mamba2_cases
from prefill_cases import gdn_prompt, layout, mamba2_prompt
from trtllm_replayssm import _lib
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops import prefill_kernels as pk
from trtllm_replayssm.pool import GdnStatePool, Mamba2StatePool

pytestmark = pytest.mark.skipif(not (_lib.available() and _lib.has_symbol(_lib.load(), pk.MAMBA2)),
                                reason="kernel library not built, or built without the prefill entry points")

M2 = Mamba2LayerShape(4, 64, 64, 2)
GDN = GdnLayerShape(2, 4, 64, 64)


def _status(name, p):
    lib = _lib.load()
    status = getattr(lib, f"{name}_validate")(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


def _mamba2(cfg=ReplayConfig(8, "fp32", "bf16")):
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    pool = Mamba2StatePool(M2, slots, cfg)
    A, D, dt_bias = mamba2_cases.layer_params(M2, "cpu")
    x, dt, B, C, z = mamba2_prompt(M2, b, S, cfg.act_dtype, "cpu")
    return pk.mamba2_params(pool, x, dt, B, C, A, D, z, dt_bias, True, lengths, slot_idx, -1, torch.empty_like(x))


def _gdn(cfg=ReplayConfig(8, "fp32", "bf16"), shape=GDN):
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    pool = GdnStatePool(shape, slots, cfg)
    A_log, dt_bias = gdn_cases.gate_params(shape, "cpu")
    q, k, v, a, bb = gdn_prompt(shape, b, S, cfg.act_dtype, "cpu")
    return pk.gdn_params(pool, q, k, v, None, None, a, bb, A_log, dt_bias, True, None, lengths, slot_idx, -1,
                         torch.empty_like(v))


def _conv1d(dtype=torch.bfloat16):
    b, S, slots, lengths, slot_idx = layout("mixed", "cpu")
    state, x = torch.zeros(slots, 64, 3, dtype=dtype), torch.randn(b, S, 64).to(dtype)
    return pk.conv1d_params(state, x, torch.randn(64, 4), None, True, 4, lengths, slot_idx, -1, torch.empty_like(x))


def test_abi_struct_sizes_match_binding_and_workspace_holds_every_token():
    assert pk.abi_sizes_match()
    assert _lib.load().rssm_prefill_workspace_size(5, 7) == 5 * 7 * 4
    assert _lib.load().rssm_prefill_workspace_size(0, 7) == 0


@pytest.mark.parametrize("cfg", [ReplayConfig(8, "fp32", "bf16"), ReplayConfig(8, "fp32", "bf16", "nvfp4"),
                                 ReplayConfig(8, "bf16", "bf16", "fp8"), ReplayConfig(8, "fp32", "fp32", "fp16")],
                         ids=["none", "fp32-nvfp4", "bf16-fp8", "fp32-fp16"])
def test_well_formed_mamba2_params_pass(cfg):
    assert _status(pk.MAMBA2, _mamba2(cfg)) == (0, "")


def test_well_formed_gdn_and_conv1d_params_pass():
    assert _status(pk.GDN, _gdn()) == (0, "")
    assert _status(pk.GDN, _gdn(ReplayConfig(8, "fp32", "bf16", "fp8"))) == (0, "")
    assert _status(pk.GDN, _gdn(shape=GdnLayerShape(1, 2, 64, 64, per_channel_decay=True))) == (0, "")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert _status(pk.CONV1D, _conv1d(dtype)) == (0, "")


@pytest.mark.parametrize("field, value, message", [
    ("step.mode", 1, "step.mode=1 must be 0: a prefill runs the conventional step"),
    ("step.latency_route_bytes", 1 << 20, "step.latency_route_bytes=1048576 must be 0"),
    ("num_tokens", 0, "num_tokens=0 is out of range (1..65535)"),
    ("lengths", None, "lengths is NULL (required by prefill)"),
    ("workspace", None, "workspace is NULL (required by prefill)"),
    ("step.slot_idx", None, "step.slot_idx is NULL (required by prefill)"),
    ("x_token_stride", 3, "x_token_stride=3 elements of 2 bytes is not a multiple of 16 bytes"),
    ("B_token_stride", -128, "B_token_stride=-128 is negative"),
    ("step.head_dim", 96, "head_dim=96 is not supported"),
    ("step.read_format", 4, "read_format=4 (nvfp4) with state_dtype=2 is not supported by prefill"),
])
def test_mamba2_rejects_bad_field(field, value, message):
    p = _mamba2(ReplayConfig(8, "bf16", "bf16", "fp8")) if field == "step.read_format" else _mamba2()
    target, name = (p.step, field[5:]) if field.startswith("step.") else (p, field)
    setattr(target, name, value)
    status, msg = _status(pk.MAMBA2, p)
    assert status == 1 and msg.startswith(message), msg


def test_a_pool_without_ring_needs_no_cursor():
    p = _mamba2()
    p.step.cursor = None
    assert _status(pk.MAMBA2, p) == (0, "")


def test_mamba2_read_copy_buffers_are_required():
    p = _mamba2(ReplayConfig(8, "fp32", "bf16", "fp8"))
    p.step.read_scale = None
    assert _status(pk.MAMBA2, p) == (1, "read_scale is NULL (required by read_format=3)")
    p = _mamba2(ReplayConfig(8, "fp32", "bf16", "nvfp4"))
    p.step.read_block_scale = None
    assert _status(pk.MAMBA2, p) == (1, "read_block_scale is NULL or not 16-byte aligned (required by nvfp4)")


def test_gdn_and_conv1d_reject_bad_fields():
    p = _gdn()
    p.step.mode = 1
    assert _status(pk.GDN, p)[1].startswith("step.mode=1 must be 0")
    p = _gdn()
    p.a_token_stride = -4
    assert _status(pk.GDN, p) == (1, "a_token_stride=-4 is negative")
    p = _gdn()
    p.v_token_stride = 4
    assert _status(pk.GDN, p) == (1, "v_token_stride=4 elements of 2 bytes is not a multiple of 16 bytes")
    p = _gdn(ReplayConfig(8, "fp32", "bf16", "fp8"))
    p.step.per_channel_decay = 1
    p.step.a_head_stride = 64  # a KDA step: one decay per key channel
    status, msg = _status(pk.GDN, p)
    assert status == 1 and "per_channel_decay=1 is not supported" in msg, msg
    p = _conv1d()
    p.step.mode = 1
    assert _status(pk.CONV1D, p) == (1, "step.mode=1 must be 0: a prefill runs the update step")
    p = _conv1d()
    p.step.kernel_size = 5
    assert _status(pk.CONV1D, p)[1].startswith("kernel_size=5 is not supported")
    p = _conv1d()
    p.lengths = None
    assert _status(pk.CONV1D, p) == (1, "lengths is NULL (required by prefill)")
