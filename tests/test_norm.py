"""The gated RMSNorm on CPU: the PyTorch reference against transformers' modules (bit for bit, both orders) and
against its fp64 evaluation, the op's validation, the native validation of rssm_gated_rmsnorm (no launch, no
GPU), and the ctypes binding against params.h."""

import ctypes

import pytest
import torch

from norm_cases import (BAD_INPUT, BAD_INPUT_IDS, BF16, F16, F32, assert_within, check_rejects_and_touches_nothing,
                        inputs, nemotron_norm, qwen_norm, tolerance)
from test_validation import PARAMS_H, _header_fields
from trtllm_replayssm import _lib
from trtllm_replayssm.config import DTYPE_CODES, GATED_RMSNORM_GROUP_MULTIPLE, GATED_RMSNORM_MAX_GROUP_SIZE
from trtllm_replayssm.ops import norm_kernels as kernels
from trtllm_replayssm.ops.norm import gated_rmsnorm, gated_rmsnorm_reference

CPU = torch.device("cpu")
# (activation dtype, weight dtype): each activation dtype with a weight in it and in fp32.
DTYPES = [(a, w) for a in (F32, F16, BF16) for w in dict.fromkeys((a, F32))]
DTYPE_IDS = [f"act_{str(a)[6:]}-w_{str(w)[6:]}" for a, w in DTYPES]


@pytest.mark.parametrize("adt, wdt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("group_size, groups", [(64, 4), (8, 3), (1000, 1)])
def test_reference_equals_nemotron_h_module(adt, wdt, group_size, groups):
    """Gate first: the reference is transformers' NemotronHRMSNormGated bit for bit, dtype included (fp32 when
    the weight is fp32), on fresh inputs with a strided gate; the op returns it cast to y's dtype."""
    D = group_size * groups
    norm = nemotron_norm(D, group_size, 1e-5, wdt, CPU)
    for step in range(3):
        y, gate = inputs(7, D, adt, CPU, gate_extra=24)
        expected = norm(y, gate)
        got = gated_rmsnorm_reference(y, gate, norm.weight, norm.variance_epsilon, group_size, False)
        assert got.dtype == expected.dtype and torch.equal(got, expected), f"step {step}: differs from the module"
        out = gated_rmsnorm(y, gate, norm.weight, norm.variance_epsilon, group_size, False)
        assert torch.equal(out, expected.to(adt)), f"step {step}: the op differs from the module cast to y's dtype"


@pytest.mark.parametrize("adt, wdt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("head_dim", [128, 64, 40])
def test_reference_equals_qwen3_5_module(adt, wdt, head_dim):
    """Norm first: the reference is transformers' Qwen3.5 gated RMSNorm bit for bit (weight w, not 1 + w; the
    product in y's dtype when the weight has it), over rows of one value head each, as GdnMixer calls it."""
    norm = qwen_norm(head_dim, 1e-6, wdt, CPU)
    for step in range(3):
        y, gate = inputs(4 * 6, head_dim, adt, CPU)
        expected = norm(y, gate)
        got = gated_rmsnorm_reference(y, gate, norm.weight, norm.variance_epsilon, head_dim, True)
        assert got.dtype == expected.dtype == adt and torch.equal(got, expected), f"step {step}: differs"
        out = gated_rmsnorm(y.reshape(4, 6 * head_dim), gate.reshape(4, 6 * head_dim), norm.weight.repeat(6),
                            norm.variance_epsilon, head_dim, True)
        assert torch.equal(out.reshape(-1, head_dim), expected), f"step {step}: the op over whole rows differs"


@pytest.mark.parametrize("adt, wdt", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate_first", "norm_first"])
def test_reference_within_one_ulp_per_rounding_of_fp64(adt, wdt, norm_before_gate):
    """The fp32 reference against its fp64 evaluation (the same roundings to y's dtype): within the tolerance
    the kernel tests use (norm_cases), which this checks is neither loose nor tight: some elements do differ."""
    group_size, D = 256, 1024
    weight = (torch.randn(D) * 0.5 + 1).to(wdt)
    y, gate = inputs(64, D, adt, CPU, gate_extra=8)
    ref64 = gated_rmsnorm_reference(y, gate, weight, 1e-5, group_size, norm_before_gate, torch.float64).to(adt)
    got = gated_rmsnorm_reference(y, gate, weight, 1e-5, group_size, norm_before_gate).to(adt)
    assert_within(got, ref64, tolerance(y, gate, weight, 1e-5, group_size, norm_before_gate, ref64), "fp32 vs fp64")
    if adt == F32:
        assert not torch.equal(got, ref64), "fp32 and fp64 agree bit for bit: the comparison proves nothing"


def test_oracle_differs_from_a_wrong_order_beyond_the_tolerance():
    """The tolerance catches a swapped order (gate first evaluated as norm first): it is not loose."""
    y, gate = inputs(16, 256, BF16, CPU)
    weight = torch.randn(256) * 0.5 + 1
    right = gated_rmsnorm_reference(y, gate, weight, 1e-5, 256, False, torch.float64).to(BF16)
    wrong = gated_rmsnorm_reference(y, gate, weight, 1e-5, 256, True).to(BF16)
    with pytest.raises(AssertionError, match="off by"):
        assert_within(wrong, right, tolerance(y, gate, weight, 1e-5, 256, False, right), "wrong order")


@pytest.mark.parametrize("call, words", BAD_INPUT, ids=BAD_INPUT_IDS)
def test_op_rejects_bad_input_and_touches_nothing(call, words):
    check_rejects_and_touches_nothing(call, words, CPU)


def test_empty_rows_return_an_empty_output():
    weight = torch.randn(64)
    out = gated_rmsnorm(torch.randn(0, 64).to(BF16), torch.randn(0, 64).to(BF16), weight, 1e-5, 16, True)
    assert out.shape == (0, 64) and out.dtype == BF16


def test_leading_dimensions_and_strided_out():
    """y, gate [b, S, D] with the gate a slice of wider rows, out a slice of a wider buffer: the same values as
    the 2-d call, and nothing written beside out's view."""
    weight = torch.randn(96).to(BF16)
    y, gate = inputs(12, 96, BF16, CPU, gate_extra=40, offset=3)
    buf = torch.full((3, 4, 100), float("nan")).to(BF16)
    out = gated_rmsnorm(y.reshape(3, 4, 96), gate.reshape(3, 4, 96), weight, 1e-6, 32, False, out=buf[..., 2:98])
    assert torch.equal(out.reshape(12, 96), gated_rmsnorm(y, gate, weight, 1e-6, 32, False))
    assert torch.isnan(buf[..., :2]).all() and torch.isnan(buf[..., 98:]).all(), "written outside out's view"


# ---- the C ABI: binding, dispatch table, error messages (validation only: no launch, no GPU) ----

def test_binding_fields_follow_params_h():
    assert [(n, t) for n, t in kernels.GatedRmsNormParams._fields_] == \
        _header_fields(PARAMS_H / "norm/params.h", "rssm_gated_rmsnorm_params")


needs_norm = pytest.mark.skipif(not kernels.available(),
                                reason="kernel library not built, or built without the gated RMSNorm")


def _status(**overrides):
    """The library's validation of a well-formed launch (bf16 activations, fp32 weight, 6 rows of 4 groups of
    64, packed rows, the gate a slice of rows of 300) with overrides; fake aligned addresses, never read."""
    p = kernels.GatedRmsNormParams(rows=6, num_groups=4, group_size=64, act_dtype=2, weight_dtype=0,
                                   norm_before_gate=0, eps=1e-5, y_row_stride=256, gate_row_stride=300,
                                   out_row_stride=256)
    for name in ("y", "gate", "weight", "out"):
        setattr(p, name, 1 << 20)
    for k, v in overrides.items():
        setattr(p, k, v)
    lib = _lib.load()
    status = lib.rssm_gated_rmsnorm_validate(ctypes.byref(p), ctypes.sizeof(p))
    return status, lib.rssm_last_error().decode()


@needs_norm
def test_native_abi_struct_size_matches_binding():
    assert kernels.abi_size_matches()


@needs_norm
def test_native_dispatch_table_matches_python_lists():
    for gs in range(0, GATED_RMSNORM_MAX_GROUP_SIZE + 17):
        ok = _status(group_size=gs, num_groups=1, y_row_stride=gs, out_row_stride=gs)[0] == 0
        assert ok == (gs > 0 and gs % GATED_RMSNORM_GROUP_MULTIPLE == 0 and gs <= GATED_RMSNORM_MAX_GROUP_SIZE), gs
    codes = set(DTYPE_CODES.values())
    for code in range(-1, 5):
        assert (_status(act_dtype=code)[0] == 0) == (code in codes), f"act_dtype={code}"
        assert (_status(weight_dtype=code)[0] == 0) == (code in (0, 2)), f"weight_dtype={code} with bf16 y"


@needs_norm
@pytest.mark.parametrize("overrides, words", [
    (dict(act_dtype=5), "act_dtype=5"),
    (dict(weight_dtype=1), "weight_dtype=1"),
    (dict(norm_before_gate=2), "norm_before_gate=2"),
    (dict(group_size=12), "group_size=12"),
    (dict(num_groups=0), "num_groups=0"),
    (dict(rows=-1), "rows=-1"),
    (dict(rows=1 << 30, num_groups=4), "exceeds 2147483647 groups"),
    (dict(eps=0.0), "eps=0 must be positive"),
    (dict(eps=float("nan")), "eps=nan"),
    (dict(eps=float("inf")), "eps=inf"),
    (dict(y=None), "y is NULL"),
    (dict(gate=None), "gate is NULL"),
    (dict(weight=(1 << 20) + 2), "weight (0x100002) is not aligned to its 4-byte elements"),
    (dict(out=(1 << 20) + 1), "out (0x100001) is not aligned"),
    (dict(y_row_stride=-1), "y_row_stride=-1"),
    (dict(gate_row_stride=-2), "gate_row_stride=-2"),
    (dict(out_row_stride=255), "out_row_stride=255"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_native_errors_name_the_offending_value(overrides, words):
    status, msg = _status(**overrides)
    assert status == 1 and words in msg, msg


@needs_norm
def test_native_accepts_unaligned_rows_and_one_row():
    """Alignment beyond the element is not required (element-wise fallback); one row may have any out stride."""
    assert _status(y=(1 << 20) + 2, gate_row_stride=301, out=(1 << 20) + 6, weight_dtype=2,
                   weight=(1 << 20) + 2) == (0, "")
    assert _status(rows=1, out_row_stride=0) == (0, "")


@needs_norm
def test_native_rejects_mismatched_struct_size():
    p = kernels.GatedRmsNormParams()
    assert _lib.load().rssm_gated_rmsnorm_validate(ctypes.byref(p), ctypes.sizeof(p) - 8) == 3


@pytest.mark.skipif(not _lib.available(), reason="kernel library not built")
def test_binding_asks_to_rebuild_a_library_without_the_norm(monkeypatch):
    monkeypatch.setattr(_lib, "has_symbol", lambda lib, name: False)
    with pytest.raises(_lib.KernelError, match="rssm_gated_rmsnorm_validate.*rebuild"):
        kernels.validate(kernels.GatedRmsNormParams())
    assert not kernels.available()
