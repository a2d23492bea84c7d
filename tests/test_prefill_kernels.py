"""GPU tests of the prefill entry points (plugins/capi/prefill.cu) against the same route run as decode ops.

What must hold, and how exactly:
- The kernels run the family's conventional decode kernel once per token with the token's masked slot indices,
  so the prefill equals *_prefill_reference on the GPU (the decode op called per token on the same batch) bit
  for bit: outputs, and every buffer of every slot (checkpoints, cursors, rings, read copies). The read copy is
  the one quant.py makes from the checkpoint (the refresh uses the flush's quantiser, which matches it bit for bit).
- Padding rows and tokens past a row's length keep the poison in `out`; unused slots keep every byte.
- Against the CPU specification (the decode references) the outputs and checkpoints differ by the decode kernel's
  summation order only: tests/test_mamba2_kernels.py's tolerance principle, checked here with rel_err bounds of
  the kernels' fp32 arithmetic (1e-5) and of one activation rounding (bf16: 1e-2).
- Capturable: a CUDA graph of a prefill replays to the same bits.
"""

import pytest
import torch

import gdn_cases
import mamba2_cases
from conftest import poisoned
from mamba2_cases import rel_err
from prefill_cases import (assert_bits_equal, assert_pools_identical, gdn_prompt, layout, live, mamba2_prompt,
                           random_pool)
from trtllm_replayssm import _lib
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn.reference import gdn_gating
from trtllm_replayssm.ops.prefill import (conv1d_prefill, conv1d_prefill_reference, gdn_prefill, gdn_prefill_reference,
                                          mamba2_prefill, mamba2_prefill_reference)


def _has_prefill():
    return _lib.available() and _lib.has_symbol(_lib.load(), "rssm_mamba2_prefill")


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_prefill(), reason="kernel library built without the prefill entry points")]

DEV = torch.device("cuda")
M2_SHAPES = [Mamba2LayerShape(4, 64, 64, 2), Mamba2LayerShape(8, 80, 128, 2)]
# (state, act, read copy): the pairs the Mamba-2 replay decode reads, and none.
M2_CONFIGS = [("fp32", "fp32", "none"), ("fp32", "bf16", "none"), ("bf16", "bf16", "none"), ("fp32", "bf16", "fp16"),
              ("fp32", "bf16", "bf16"), ("fp32", "bf16", "fp8"), ("fp16", "fp16", "fp8"), ("bf16", "bf16", "fp8"),
              ("fp32", "bf16", "nvfp4")]
GDN_SHAPES = [GdnLayerShape(2, 4, 64, 64), GdnLayerShape(1, 2, 128, 64)]
GDN_CONFIGS = [("fp32", "fp32", "none"), ("fp32", "bf16", "none"), ("bf16", "bf16", "none"), ("fp32", "bf16", "bf16"),
               ("fp32", "bf16", "fp8")]
LAYOUTS = ["mixed", "one_token", "single_row"]


def _ids(c):
    return "-".join(c) if isinstance(c, tuple) else None


def _check_rows_untouched(y, lengths, slot_idx):
    for b, s in enumerate(slot_idx.tolist()):
        n = int(lengths[b]) if s >= 0 else 0
        assert torch.isnan(y[b, n:].float()).all(), f"row {b}: tokens from {n} must keep the poison"
        assert not torch.isnan(y[b, :n].float()).any(), f"row {b}: prompt tokens must be written"


@pytest.mark.parametrize("lay", LAYOUTS)
@pytest.mark.parametrize("cfg", M2_CONFIGS, ids=_ids)
@pytest.mark.parametrize("shape", M2_SHAPES, ids=lambda s: f"P{s.head_dim}N{s.dstate}")
def test_mamba2_prefill_kernel_equals_decode_per_token(shape, cfg, lay):
    b, S, slots, lengths, slot_idx = layout(lay, DEV)
    pool = random_pool(mamba2_cases, shape, slots, ReplayConfig(8, *cfg), DEV)
    expected = pool.clone()
    A, D, dt_bias = mamba2_cases.layer_params(shape, DEV)
    x, dt, B, C, z = mamba2_prompt(shape, b, S, pool.cfg.act_dtype, DEV)
    y = poisoned(x.shape, x.dtype, DEV)
    y_exp = y.clone()
    mamba2_prefill(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx, out=y)
    mamba2_prefill_reference(expected, x, dt, B, C, A, D, z, dt_bias, True, lengths, slot_idx, -1, y_exp)
    assert_bits_equal(y, y_exp, "y")
    assert_pools_identical(pool, expected, "pool")
    _check_rows_untouched(y, lengths, slot_idx)


@pytest.mark.parametrize("lay", LAYOUTS[:2])
@pytest.mark.parametrize("cfg", GDN_CONFIGS, ids=_ids)
@pytest.mark.parametrize("shape", GDN_SHAPES, ids=lambda s: f"K{s.head_k_dim}V{s.head_v_dim}")
def test_gdn_prefill_kernel_equals_decode_per_token(shape, cfg, lay):
    b, S, slots, lengths, slot_idx = layout(lay, DEV)
    pool = random_pool(gdn_cases, shape, slots, ReplayConfig(8, *cfg), DEV)
    expected = pool.clone()
    A_log, dt_bias = gdn_cases.gate_params(shape, DEV)
    q, k, v, a, bb = gdn_prompt(shape, b, S, pool.cfg.act_dtype, DEV)
    y = poisoned(v.shape, v.dtype, DEV)
    y_exp = y.clone()
    gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx, out=y)
    gdn_prefill_reference(expected, q, k, v, None, None, a, bb, A_log, dt_bias, True, None, lengths, slot_idx, -1,
                          y_exp)
    assert_bits_equal(y, y_exp, "y")
    assert_pools_identical(pool, expected, "pool")
    _check_rows_untouched(y, lengths, slot_idx)


def test_kda_and_precomputed_gates_prefill_kernel_equals_decode_per_token():
    shape = GdnLayerShape(1, 2, 64, 64, per_channel_decay=True)
    b, S, slots, lengths, slot_idx = layout("mixed", DEV)
    pool = random_pool(gdn_cases, shape, slots, ReplayConfig(8, "fp32", "bf16"), DEV)
    expected = pool.clone()
    A_log, dt_bias = gdn_cases.gate_params(shape, DEV)
    q, k, v, a, bb = gdn_prompt(shape, b, S, pool.cfg.act_dtype, DEV)
    g, beta = gdn_gating(a, bb, A_log, dt_bias)
    y = gdn_prefill(pool, q, k, v, g=g, beta=beta, lengths=lengths, slot_idx=slot_idx)
    y_exp = gdn_prefill_reference(expected, q, k, v, g, beta, None, None, None, None, True, None, lengths, slot_idx,
                                  -1, torch.zeros_like(v))
    assert_bits_equal(y, y_exp, "y")
    assert_pools_identical(pool, expected, "pool")


@pytest.mark.parametrize("dtype, k, window", [(torch.bfloat16, 4, 0), (torch.float16, 4, 0), (torch.float16, 3, 0),
                                              (torch.float32, 2, 0), (torch.bfloat16, 4, 3)])
def test_conv1d_prefill_kernel_equals_updates_per_token(dtype, k, window):
    """window > 0: the state is the history view of speculative windows [slots, C, k-1+T] (a channel stride of
    k-1+T, as the network keeps it); the positions behind the history must keep their bytes."""
    b, S, slots, lengths, slot_idx = layout("mixed", DEV)
    C = 200  # not a multiple of the kernel's channel tile
    windows = torch.randn(slots, C, k - 1 + window, device=DEV).to(dtype)
    state = windows[..., :k - 1]
    before = windows.clone()
    x = torch.randn(b, S, C, device=DEV).to(dtype)
    weight, bias = torch.randn(C, k, device=DEV), torch.randn(C, device=DEV)
    y = poisoned(x.shape, dtype, DEV)
    y_exp, windows_exp = y.clone(), windows.clone()
    conv1d_prefill(state, x, weight, bias, lengths=lengths, slot_idx=slot_idx, out=y)
    conv1d_prefill_reference(windows_exp[..., :k - 1], x, weight, bias, True, lengths, slot_idx, -1, y_exp)
    assert_bits_equal(y, y_exp, "y")
    assert_bits_equal(windows, windows_exp, "state")
    _check_rows_untouched(y, lengths, slot_idx)
    used = {s for _, s, _ in live(lengths, slot_idx)}
    for s in range(slots):
        kept = windows[s] if s not in used else windows[s, :, k - 1:]
        assert torch.equal(kept, (before[s] if s not in used else before[s, :, k - 1:])), f"slot {s}"


def test_mamba2_prefill_kernel_matches_cpu_specification():
    shape = M2_SHAPES[0]
    b, S, slots, lengths, slot_idx = layout("mixed", DEV)
    pool = random_pool(mamba2_cases, shape, slots, ReplayConfig(8, "fp32", "fp32"), DEV)
    cpu = pool.clone("cpu")
    A, D, dt_bias = mamba2_cases.layer_params(shape, DEV)
    inputs = mamba2_prompt(shape, b, S, torch.float32, DEV)
    y = mamba2_prefill(pool, *inputs[:4], A, D=D, z=inputs[4], dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    cpu_in = [t.cpu() for t in inputs]
    y_cpu = mamba2_prefill(cpu, *cpu_in[:4], A.cpu(), D=D.cpu(), z=cpu_in[4], dt_bias=dt_bias.cpu(),
                           lengths=lengths.cpu(), slot_idx=slot_idx.cpu())
    for row, s, n in live(lengths, slot_idx):
        assert rel_err(y[row, :n].cpu(), y_cpu[row, :n]) < 1e-5, f"y row {row}"
        assert rel_err(pool.checkpoint[s].cpu(), cpu.checkpoint[s]) < 1e-5, f"checkpoint slot {s}"
    assert torch.equal(pool.cursor.cpu(), cpu.cursor)


def test_gdn_prefill_kernel_matches_cpu_specification():
    shape = GDN_SHAPES[0]
    b, S, slots, lengths, slot_idx = layout("mixed", DEV)
    pool = random_pool(gdn_cases, shape, slots, ReplayConfig(8, "fp32", "fp32"), DEV)
    cpu = pool.clone("cpu")
    A_log, dt_bias = gdn_cases.gate_params(shape, DEV)
    q, k, v, a, bb = gdn_prompt(shape, b, S, torch.float32, DEV)
    y = gdn_prefill(pool, q, k, v, a=a, b=bb, A_log=A_log, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    y_cpu = gdn_prefill(cpu, q.cpu(), k.cpu(), v.cpu(), a=a.cpu(), b=bb.cpu(), A_log=A_log.cpu(),
                        dt_bias=dt_bias.cpu(), lengths=lengths.cpu(), slot_idx=slot_idx.cpu())
    for row, s, n in live(lengths, slot_idx):
        assert rel_err(y[row, :n].cpu(), y_cpu[row, :n]) < 1e-5, f"y row {row}"
        assert rel_err(pool.checkpoint[s].cpu(), cpu.checkpoint[s]) < 1e-5, f"checkpoint slot {s}"


def test_mamba2_prefill_is_capturable_in_a_cuda_graph():
    shape = M2_SHAPES[0]
    b, S, slots, lengths, slot_idx = layout("mixed", DEV)
    pool = random_pool(mamba2_cases, shape, slots, ReplayConfig(8, "fp32", "bf16", "fp8"), DEV)
    eager = pool.clone()
    A, D, dt_bias = mamba2_cases.layer_params(shape, DEV)
    x, dt, B, C, z = mamba2_prompt(shape, b, S, torch.bfloat16, DEV)
    y = poisoned(x.shape, x.dtype, DEV)
    y_eager = y.clone()
    kwargs = dict(D=D, z=z, dt_bias=dt_bias, lengths=lengths, slot_idx=slot_idx)
    mamba2_prefill(eager, x, dt, B, C, A, out=y_eager, **kwargs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture (library load, allocator)
        mamba2_prefill(pool.clone(), x, dt, B, C, A, out=y.clone(), **kwargs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mamba2_prefill(pool, x, dt, B, C, A, out=y, **kwargs)
    graph.replay()
    torch.cuda.synchronize()
    assert_bits_equal(y, y_eager, "y")
    assert_pools_identical(pool, eager, "pool")


def test_cuda_lengths_out_of_range_run_all_tokens_or_none():
    """lengths stay on the device: above S runs all S tokens, 0 leaves the slot at the zero state (empty ring)."""
    shape = M2_SHAPES[0]
    b, S, slots = 2, 3, 4
    slot_idx = torch.tensor([2, 0], dtype=torch.int32, device=DEV)
    pool = random_pool(mamba2_cases, shape, slots, ReplayConfig(8, "fp32", "fp32"), DEV)
    expected = pool.clone()
    A, D, dt_bias = mamba2_cases.layer_params(shape, DEV)
    x, dt, B, C, z = mamba2_prompt(shape, b, S, torch.float32, DEV)
    mamba2_prefill(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slot_idx,
                   lengths=torch.tensor([9, 0], dtype=torch.int32, device=DEV))
    mamba2_prefill_reference(expected, x, dt, B, C, A, D, z, dt_bias, True,
                             torch.tensor([S, 0], dtype=torch.int32, device=DEV), slot_idx, -1, torch.zeros_like(x))
    assert_pools_identical(pool, expected, "pool")
    assert not pool.checkpoint[0].any() and pool.checkpoint[2].abs().sum() > 0
