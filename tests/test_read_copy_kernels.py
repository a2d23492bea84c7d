"""GPU tests of the Mamba-2 ReplaySSM decode kernel with a read copy (fp16 / bf16 / fp8 per row / nvfp4) against
the PyTorch reference and the reference quantiser (trtllm_replayssm/quant.py).

What must hold, and how exactly:
- The copy never feeds the recurrence: after N steps the checkpoint, rings and cursors are bit-identical to the
  kernel run without a copy, whatever the read format.
- A flush writes the copy the reference quantiser makes from the flushed fp32 values. With an fp32 checkpoint
  those values are the stored checkpoint, so quantize_state(checkpoint) must equal the copy bit for bit (nvfp4
  too: codes, e4m3 block scales and fp32 group scales, from quant.py's fp32 operations in the same order). With
  an fp16 / bf16 checkpoint the kernel quantises the fp32 registers before the checkpoint is rounded, so the copy is
  within one e4m3 code step (and the row scale within the checkpoint's rounding) of quantising the stored
  checkpoint: that is the bound checked.
- Outputs: kernel and reference read the same copy (the reference pool's copy is synchronised to the kernel's
  after each check, so that a flush's rounding-boundary differences in S do not reach later steps); the copy
  widens to fp32 exactly, so y differs by summation order and output rounding only: the tolerance table of
  tests/test_mamba2_kernels.py applies unchanged. (nvfp4: the kernel applies the block and group scales to
  partial sums rather than to each element, one more fp32 rounding per block: far inside that table.)
"""

import pytest
import torch

from mamba2_cases import clone_pool, layer_params, random_pool, rel_err, slot_map, step_inputs
from read_copy_checks import buffer_bytes, check_slots_after_step, sync_copies
from test_mamba2_kernels import TOL, tol
from trtllm_replayssm.config import CURSOR_HISTORY, Mamba2LayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.mamba2 import replay_decode
from trtllm_replayssm.ops.mamba2.replay_reference import replay_decode_reference
from trtllm_replayssm.quant import quantize_state

pytestmark = pytest.mark.gpu

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
# (checkpoint dtype, read format) pairs the kernel supports (plugins/capi/mamba2_dispatch.cu, kReadCopies).
PAIRS = [(F32, "fp16"), (F32, "bf16"), (F32, "fp8"), (F16, "fp8"), (BF16, "fp8"), (F32, "nvfp4")]
assert set(TOL) == {F32, F16, BF16}


def _id(v):
    if isinstance(v, torch.dtype):
        return dtype_name(v)
    return None


def copy_pool(shape, num_slots, cfg, dev, desync=True):
    """A random pool (random_pool) whose read copies hold the quantised checkpoints, as reset_slot leaves them."""
    pool = random_pool(shape, num_slots, cfg, dev, desync=desync)
    for s in range(num_slots):
        pool.write_read_copy(s, pool.checkpoint[s])
    return pool


def _e4m3_steps(a, b):
    """Largest distance in e4m3 codes between two float8_e4m3fn tensors (codes ordered by value)."""
    def ordinal(t):
        u = t.view(torch.uint8).to(torch.int32)
        mag = u & 0x7F
        return torch.where(u & 0x80 != 0, -mag, mag)
    return int((ordinal(a) - ordinal(b)).abs().max()) if a.numel() else 0


def check_copy_matches_quantiser(pool, s, fmt, exact, where):
    """The copy of slot s against quantize_state of its stored checkpoint (exact, or within one code step)."""
    want = quantize_state(pool.checkpoint[s].float(), fmt)
    if exact:
        for name, part in want.items():
            assert torch.equal(buffer_bytes(pool.buffers[name][s]), buffer_bytes(part)), f"{where}: {name} of slot {s}"
        return
    got = pool.buffers["read_state"][s]
    assert _e4m3_steps(got, want["read_state"]) <= 1, f"{where}: read_state of slot {s} off by > 1 code"
    eps = torch.finfo(pool.checkpoint.dtype).eps
    assert rel_err(pool.buffers["read_scale"][s], want["read_scale"]) <= eps, f"{where}: read_scale of slot {s}"


CASES = ([(s, f, BF16, 64, 128, 8) for s, f in PAIRS]
         + [(F32, "fp8", F32, 80, 128, 5), (F32, "bf16", F16, 128, 64, 16), (F32, "fp8", BF16, 64, 256, 4),
            (BF16, "fp8", BF16, 64, 64, 2), (F16, "fp8", F32, 80, 256, 1), (F32, "fp16", BF16, 64, 128, 64),
            # nvfp4: 20-row tiles (head_dim 80, dstate 256), 16-row warps (dstate 64), fp32 / fp16 outputs
            (F32, "nvfp4", F16, 80, 256, 3), (F32, "nvfp4", F32, 128, 64, 16), (F32, "nvfp4", BF16, 80, 128, 1)])


@pytest.mark.parametrize("state_dtype, fmt, act_dtype, P, N, L", CASES, ids=_id)
def test_read_copy_kernel_matches_reference(state_dtype, fmt, act_dtype, P, N, L):
    """3L+3 steps from desynchronised cursors and origins, padding rows, poisoned outputs: y follows the
    reference reading the same copy; flush rows write the quantiser's copy; cursors and rings are exact;
    non-flush rows leave checkpoint and copy bit-identical; unused slots are untouched."""
    run_against_reference(state_dtype, fmt, act_dtype, P, N, L, batch=6, num_slots=9, steps=3 * L + 3)


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
@pytest.mark.parametrize("batch", [1, 2, 37, 300])
def test_read_copy_kernel_matches_reference_across_launch_shapes(fmt, batch):
    """Batches from 1 (8 tiles per head, one unit per block) to 300 (whole heads, several units per block
    through the 3-stage pipeline): the copy's scales never depend on the launch's tiling, and staged copy
    tiles are reused across units correctly."""
    run_against_reference(F32, fmt, BF16, 64, 128, 4, batch=batch, num_slots=batch + 3, steps=2 * 4 + 2)


def run_against_reference(state_dtype, fmt, act_dtype, P, N, L, batch, num_slots, steps):
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    cfg = ReplayConfig(buffer_len=L, state_dtype=state_dtype, act_dtype=act_dtype, read_format=fmt,
                       latency_route_bytes=0)
    dev = torch.device("cuda")
    pool = copy_pool(shape, num_slots, cfg, dev)
    ref = clone_pool(pool)
    A, D, dt_bias = layer_params(shape, dev)
    for step in range(steps):
        slots = slot_map(batch, num_slots, n_pad=min(1, batch - 1), device=dev)
        x, dt, B, C, z = step_inputs(shape, batch, act_dtype, dev)
        before = clone_pool(pool)
        out = torch.full_like(x, float("nan"))
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        y_ref = replay_decode_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
        torch.cuda.synchronize()
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
        assert rel_err(out[live], y_ref[live]) < tol(state_dtype, act_dtype), f"step {step}: y off the reference"
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ from the reference"
        assert torch.equal(pool.ring_x, ref.ring_x) and torch.equal(pool.ring_B, ref.ring_B), \
            f"step {step}: ring records differ"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(state_dtype, act_dtype), f"step {step}: checkpoint"
        check_slots_after_step(pool, before, slots, L,
                               lambda s: check_copy_matches_quantiser(pool, s, fmt, state_dtype == F32, f"step {step}"),
                               f"step {step}")
        sync_copies(ref, pool)


@pytest.mark.parametrize("state_dtype", [F32, F16, BF16], ids=_id)
def test_checkpoint_identical_whatever_the_read_format(state_dtype):
    """The copy never feeds the recurrence: 3L+5 steps (several flushes per slot) leave checkpoint, rings and
    cursors bit-identical to the run without a copy."""
    L = 4
    shape = Mamba2LayerShape(nheads=16, head_dim=64, dstate=128, ngroups=4)
    dev = torch.device("cuda")
    fmts = ["none"] + [f for s, f in PAIRS if s == state_dtype]
    base = random_pool(shape, 8, ReplayConfig(L, state_dtype, BF16, latency_route_bytes=0), dev)
    pools = {}
    for f in fmts:
        pools[f] = copy_pool(shape, 8, ReplayConfig(L, state_dtype, BF16, f, latency_route_bytes=0), dev)
        for name in ("checkpoint", "ring_x", "ring_B", "ring_dt", "cursor"):
            pools[f].buffers[name].copy_(base.buffers[name])
        for s in range(8):
            pools[f].write_read_copy(s, pools[f].checkpoint[s])
    A, D, dt_bias = layer_params(shape, dev)
    for _ in range(3 * L + 5):
        slots = slot_map(7, 8, n_pad=1, device=dev)
        x, dt, B, C, z = step_inputs(shape, 7, BF16, dev)
        for p in pools.values():
            replay_decode(p, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
    torch.cuda.synchronize()
    for f in fmts[1:]:
        for name in ("checkpoint", "ring_x", "ring_B", "ring_dt", "cursor"):
            assert torch.equal(pools[f].buffers[name], pools["none"].buffers[name]), f"{f}: {name}"


@pytest.mark.parametrize("state_dtype, fmt", PAIRS, ids=lambda v: _id(v) if isinstance(v, torch.dtype) else v)
@pytest.mark.parametrize("P, N", [(64, 128), (80, 64), (128, 256)])
def test_flush_writes_the_quantiser_copy(state_dtype, fmt, P, N):
    """Every row flushes (history L-1): the copy equals quantize_state of the stored checkpoint (exactly for an
    fp32 checkpoint, within one code step otherwise); y equals the no-copy kernel's bit for bit (a flush reads
    the checkpoint, never the copy)."""
    L = 4
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    dev = torch.device("cuda")
    pool = copy_pool(shape, 6, ReplayConfig(L, state_dtype, BF16, fmt), dev, desync=False)
    for name, t in pool.buffers.items():  # stale copies: a flush must overwrite every element
        if name.startswith("read_"):
            t.view(torch.uint8).fill_(0x7E)
    plain = random_pool(shape, 6, ReplayConfig(L, state_dtype, BF16, latency_route_bytes=0), dev, desync=False)
    for name in ("checkpoint", "ring_x", "ring_B", "ring_dt"):
        plain.buffers[name].copy_(pool.buffers[name])
    pool.cursor[..., CURSOR_HISTORY] = L - 1
    plain.cursor[..., CURSOR_HISTORY] = L - 1
    A, D, dt_bias = layer_params(shape, dev)
    slots = slot_map(5, 6, n_pad=1, device=dev)
    x, dt, B, C, z = step_inputs(shape, 5, BF16, dev)
    y = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
    y_plain = replay_decode(plain, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
    torch.cuda.synchronize()
    live = slots >= 0
    assert torch.equal(y[live], y_plain[live])
    assert torch.equal(pool.checkpoint, plain.checkpoint)
    for s in slots[live].tolist():
        check_copy_matches_quantiser(pool, s, fmt, state_dtype == F32, "flush")


def test_nvfp4_copy_of_a_narrow_checkpoint_is_refused_by_the_kernel_op():
    """nvfp4 copies have a kernel with an fp32 checkpoint only; the op names the pair and the supported ones."""
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=128, ngroups=2)
    dev = torch.device("cuda")
    pool = copy_pool(shape, 2, ReplayConfig(4, BF16, BF16, "nvfp4"), dev)
    A, D, dt_bias = layer_params(shape, dev)
    x, dt, B, C, z = step_inputs(shape, 2, BF16, dev)
    with pytest.raises(NotImplementedError, match=r"read_format=nvfp4 with state_dtype=bf16.*\(fp32, nvfp4\)"):
        replay_decode(pool, x, dt, B, C, A)
