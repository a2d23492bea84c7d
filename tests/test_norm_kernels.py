"""GPU tests of the fused gated RMSNorm kernel against transformers' two modules run on the same CUDA tensors and
against the fp64 reference, on fresh random inputs, poisoned outputs and strided gates.

Tolerance (norm_cases.tolerance): one ulp of the output dtype at each rounding to it that the modules make,
carried through the multiplies after it, plus 64 fp32 ulps of the output for the fp32 arithmetic. The kernel rounds
where the modules round and uses their fp32 operations (silu with an accurate exp and an IEEE division, rsqrtf);
only the order of the mean's sum differs, a relative 1e-6 at most, which can move a rounding to bf16 / fp16 onto
the neighbouring value (about one element in 10^4) and with fp32 activations is the whole difference.
"""

import pytest
import torch

from conftest import poisoned
from norm_cases import (BAD_INPUT, BAD_INPUT_IDS, BF16, F16, F32, assert_within, check_rejects_and_touches_nothing,
                        inputs, nemotron_norm, qwen_norm, tolerance)
from trtllm_replayssm.config import dtype_name
from trtllm_replayssm.ops import norm_kernels
from trtllm_replayssm.ops.norm import gated_rmsnorm, gated_rmsnorm_reference

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not norm_kernels.available(),
                                 reason="kernel library not built, or built without the gated RMSNorm")]

DEV = torch.device("cuda")
DTYPES = [(a, w) for a in (F32, F16, BF16) for w in dict.fromkeys((a, F32))]


def _dt_id(a, w):
    return f"act_{dtype_name(a)}-w_{dtype_name(w)}"


def _run_and_check(norm, y, gate, group_size, norm_before_gate, what):
    """The kernel into a poisoned out, against the module (cast to y's dtype) and the fp64 reference; a second
    run is bit-identical."""
    eps = norm.variance_epsilon
    out = gated_rmsnorm(y, gate, norm.weight, eps, group_size, norm_before_gate, out=poisoned(y.shape, y.dtype, DEV))
    module = norm(y, gate).to(y.dtype)
    assert_within(out, module, tolerance(y, gate, norm.weight, eps, group_size, norm_before_gate, module),
                  f"{what}: kernel vs transformers' module")
    ref64 = gated_rmsnorm_reference(y, gate, norm.weight, eps, group_size, norm_before_gate, torch.float64)
    ref64 = ref64.to(y.dtype)
    assert_within(out, ref64, tolerance(y, gate, norm.weight, eps, group_size, norm_before_gate, ref64),
                  f"{what}: kernel vs fp64 reference")
    again = gated_rmsnorm(y, gate, norm.weight, eps, group_size, norm_before_gate)
    assert torch.equal(again, out), f"{what}: a second run differs"


# (rows, group size, groups): Nemotron-3 Super's decode at batch 256 (8 groups of 1024), odd and extreme group
# sizes (8: one or two chunks; 136: 17 chunks; 1000: 125; 2056: 257, two chunks per thread; 8192: the largest).
NEMOTRON_SHAPES = [(256, 1024, 8), (37, 8, 5), (19, 136, 3), (5, 1000, 2), (9, 2056, 2), (3, 8192, 2)]


@pytest.mark.parametrize("adt, wdt", DTYPES, ids=[_dt_id(*d) for d in DTYPES])
@pytest.mark.parametrize("rows, group_size, groups", NEMOTRON_SHAPES,
                         ids=[f"rows{r}-gs{g}-G{n}" for r, g, n in NEMOTRON_SHAPES])
def test_gate_first_matches_nemotron_h_module(adt, wdt, rows, group_size, groups):
    """Nemotron-H's order, the gate a strided slice of the input projection's output (row stride D + 2064, as
    gate | xBC | dt)."""
    D = group_size * groups
    norm = nemotron_norm(D, group_size, 1e-5, wdt, DEV)
    for step in range(2):
        y, gate = inputs(rows, D, adt, DEV, gate_extra=2064)
        _run_and_check(norm, y, gate, group_size, False, f"step {step}")


QWEN_SHAPES = [(256 * 32, 128), (3 * 16, 256), (7, 64), (11, 40)]


@pytest.mark.parametrize("adt, wdt", DTYPES, ids=[_dt_id(*d) for d in DTYPES])
@pytest.mark.parametrize("rows, head_dim", QWEN_SHAPES, ids=[f"rows{r}-V{v}" for r, v in QWEN_SHAPES])
def test_norm_first_matches_qwen3_5_module(adt, wdt, rows, head_dim):
    """Qwen3.5's order over rows of one value head (256 requests x 32 heads of 128 first), as GdnMixer calls it."""
    norm = qwen_norm(head_dim, 1e-6, wdt, DEV)
    for step in range(2):
        y, gate = inputs(rows, head_dim, adt, DEV)
        _run_and_check(norm, y, gate, head_dim, True, f"step {step}")


@pytest.mark.parametrize("norm_before_gate", [False, True], ids=["gate_first", "norm_first"])
@pytest.mark.parametrize("adt, wdt", [(BF16, BF16), (F16, F32), (F32, F32)], ids=lambda d: dtype_name(d))
def test_unaligned_rows_take_the_elementwise_path(adt, wdt, norm_before_gate):
    """y, gate, out and weight one element past 16-byte boundaries, odd row strides: the same bound, and nothing
    written beside out's view."""
    rows, group_size, groups = 23, 96, 3
    D = group_size * groups
    norm = nemotron_norm(D, group_size, 1e-5, wdt, DEV) if not norm_before_gate else qwen_norm(D, 1e-5, wdt, DEV)
    gs = group_size if not norm_before_gate else D
    weight = torch.empty(D + 1, dtype=wdt, device=DEV)[1:]
    weight.copy_(norm.weight.detach())
    norm.weight.data = weight
    y_buf = (torch.randn(rows, D + 3, device=DEV)).to(adt)
    y = y_buf[:, 1:1 + D]
    _, gate = inputs(rows, D, adt, DEV, gate_extra=5, offset=1)
    buf = poisoned((rows, D + 7), adt, DEV)
    out = gated_rmsnorm(y, gate, weight, norm.variance_epsilon, gs, norm_before_gate, out=buf[:, 1:1 + D])
    module = norm(y, gate).to(adt)
    assert_within(out, module, tolerance(y, gate, weight, norm.variance_epsilon, gs, norm_before_gate, module),
                  "unaligned")
    assert torch.isnan(buf[:, 0]).all() and torch.isnan(buf[:, 1 + D:]).all(), "written outside out's view"


def test_three_d_rows_match_the_two_d_call():
    """[b, S, D] with the gate sliced from [b, S, D + extra] (the prefill and verify layout): bit-identical to the
    same rows as a 2-d call."""
    norm = nemotron_norm(512, 128, 1e-5, BF16, DEV)
    y, gate = inputs(4 * 6, 512, BF16, DEV, gate_extra=300)
    gate3 = gate.reshape(4, 6, 512)
    assert gate3.data_ptr() == gate.data_ptr() and gate3.stride() == (6 * 812, 812, 1), "not a strided view"
    out3 = gated_rmsnorm(y.reshape(4, 6, 512), gate3, norm.weight, 1e-5, 128, False)
    out2 = gated_rmsnorm(y, gate, norm.weight, 1e-5, 128, False)
    assert torch.equal(out3.reshape(24, 512), out2)


def test_replays_in_a_cuda_graph():
    """Captured once, replayed on new inputs written into the captured buffers: equal to eager calls."""
    norm = nemotron_norm(1024, 256, 1e-5, BF16, DEV)
    y, gate = inputs(64, 1024, BF16, DEV, gate_extra=40)
    out = torch.empty_like(y)
    gated_rmsnorm(y, gate, norm.weight, 1e-5, 256, False, out=out)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gated_rmsnorm(y, gate, norm.weight, 1e-5, 256, False, out=out)
    for step in range(3):
        y_new, gate_new = inputs(64, 1024, BF16, DEV, gate_extra=40)
        y.copy_(y_new)
        gate.copy_(gate_new)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, gated_rmsnorm(y_new, gate_new, norm.weight, 1e-5, 256, False)), f"replay {step}"


@pytest.mark.parametrize("call, words", BAD_INPUT, ids=BAD_INPUT_IDS)
def test_rejects_bad_input_and_touches_nothing(call, words):
    check_rejects_and_touches_nothing(call, words, DEV)
    torch.cuda.synchronize()
