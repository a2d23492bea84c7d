"""GPU tests of the Mamba-2 ReplaySSM verify kernel with a read copy (fp16 / bf16 / fp8 per row, fp32 checkpoint)
against the PyTorch reference (ops/mamba2/spec_reference.py) and the reference quantiser (trtllm_replayssm/quant.py).

What must hold, and how exactly:
- The copy never feeds the recurrence: only the outputs read it (y_s = abar_s (S0_read·C_s) + window terms); the
  fold of a flushing row reads the checkpoint. After verify + commit steps the checkpoint, rings and cursors are
  bit-identical to the kernel run without a copy, whatever the read format.
- A flush writes the copy the reference quantiser makes from the folded fp32 values, which are the stored fp32
  checkpoint: quantize_state(checkpoint) equals the copy bit for bit (fp8: codes and row scales). Rows that do not
  flush leave checkpoint and copy bit-identical.
- Outputs: kernel and reference read the same copy (the reference pool's copy is synchronised to the kernel's
  after each step, so that a fold's rounding-boundary differences in S0, which may move a code of the copy, do not
  reach later steps). fp16 / bf16 copies widen to fp32 exactly; an fp8 code times its row scale is the reference's
  dequantised value up to one fp32 rounding, and the kernel applies the scale after the dot product. So y differs
  from the reference by summation order, that rounding and the output rounding only: the tolerance table of
  tests/test_mamba2_spec_kernels.py applies unchanged (tol(fp32 checkpoint, activation dtype): 2e-3 fp16,
  1.6e-2 bf16, about two ulps of the stored output).
"""

import pytest
import torch

from conftest import poisoned
from mamba2_cases import layer_params, rel_err, slot_map, worst
from mamba2_spec_cases import spec_pool, window_inputs
from read_copy_checks import (buffer_bytes, check_copy_matches_quantiser, check_slots_after_step, spread_histories,
                              read_copy_tol, sync_copies, verify_folds, with_quantised_copies)
from test_mamba2_spec_kernels import _has_spec_kernels, tol
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.mamba2 import replay_verify
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference
from trtllm_replayssm.ops.slots import commit_reference, spec_commit

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_spec_kernels(), reason="kernel library built without the speculative kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DEV = torch.device("cuda")
FORMATS = ["fp16", "bf16", "fp8"]  # the verify kernel's copies of an fp32 checkpoint (capi/mamba2_verify_dispatch.cu)
RECURRENCE = ("checkpoint", "ring_x", "ring_B", "ring_dt", "cursor")


def _id(v):
    if isinstance(v, torch.dtype):
        return dtype_name(v)
    return None


def copy_pool(shape, num_slots, cfg, T):
    """spec_pool (histories 0 .. L-T, any origin) whose read copies hold the quantised checkpoints."""
    return with_quantised_copies(spec_pool(shape, num_slots, cfg, T, DEV))


def run_against_reference(fmt, act_dtype, P, N, T, L, batch, num_slots, steps):
    """`steps` verify + commit steps from histories spread over 0 .. L-T (rows at every ring position), shuffled
    slots, a padding row, poisoned outputs: y follows the reference reading the same copy; cursors and ring
    records are exact; flush rows (h + 2T > L) write the quantiser's copy of the stored checkpoint; other rows leave
    checkpoint and copy bit-identical; unused slots are untouched. Returns the number of flush rows seen."""
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    pool = copy_pool(shape, num_slots, ReplayConfig(L, F32, act_dtype, fmt), T)
    spread_histories(pool, T)
    ref = pool.clone()
    A, D, dt_bias = layer_params(shape, DEV)
    flushes = 0
    for step in range(steps):
        slots = slot_map(batch, num_slots, n_pad=min(1, batch - 1), device=DEV)
        x, dt, B, C, z = window_inputs(shape, batch, T, act_dtype, DEV, with_z=step % 3 != 2)
        before = pool.clone()
        out = poisoned(x.shape, act_dtype, DEV)
        replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        y_ref = replay_verify_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
        torch.cuda.synchronize()
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
        assert rel_err(out[live], y_ref[live]) < tol(F32, act_dtype), f"step {step}: y off the reference"
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ after verify"
        assert torch.equal(pool.ring_x, ref.ring_x) and torch.equal(pool.ring_B, ref.ring_B), \
            f"step {step}: ring records differ"
        assert rel_err(pool.ring_dt, ref.ring_dt) < 1e-6, f"step {step}: ring dt differs"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(F32, act_dtype), f"step {step}: checkpoint differs"
        check_slots_after_step(pool, before, slots, L,
                               lambda s: check_copy_matches_quantiser(pool, s, fmt, f"step {step}"), f"step {step}",
                               flushes=verify_folds(T, L))
        hist_before = before.history()
        flushes += sum(verify_folds(T, L)(int(hist_before[s])) for s in set(slots[live].tolist()))
        sync_copies(ref, pool)
        accepted = torch.randint(1, T + 1, (batch,), dtype=torch.int32, device=DEV)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        commit_reference(ref, accepted, slot_idx=slots)
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ after commit"
    return flushes


# Every format with both activation dtypes over the windows T = 2, 4, 8 and rings L = 16, 24 (base shape P = 64,
# N = 128); then head_dim 80 and 128, dstate 64 and 256.
CASES = [(fmt, (F16, BF16)[k % 2], 64, 128, T, L)
         for k, (fmt, (T, L)) in enumerate((f, w) for f in FORMATS
                                           for w in ((2, 16), (4, 16), (8, 16), (2, 24), (4, 24), (8, 24)))]
CASES += [("fp8", BF16, 80, 64, 3, 16), ("fp16", BF16, 128, 256, 4, 24), ("bf16", F16, 64, 256, 8, 16),
          ("fp8", F16, 128, 64, 5, 24), ("fp8", BF16, 64, 256, 2, 16)]


@pytest.mark.parametrize("fmt, act_dtype, P, N, T, L", CASES, ids=_id)
def test_verify_read_copy_matches_reference(fmt, act_dtype, P, N, T, L):
    flushes = run_against_reference(fmt, act_dtype, P, N, T, L, batch=8, num_slots=9, steps=3 * L // T + 3)
    assert flushes >= 1, "no flush: the case does not exercise the copy's rewrite"


@pytest.mark.parametrize("fmt", ["fp16", "fp8"])
@pytest.mark.parametrize("batch", [1, 2, 37, 300])
def test_verify_read_copy_across_launch_shapes(fmt, batch):
    """Batches from 1 (heads split into tiles, one unit per block) to 300 (whole heads, several units per block
    through the pipeline): staged copy tiles and fp8 row scales follow their units."""
    run_against_reference(fmt, BF16, 64, 128, 4, 16, batch=batch, num_slots=batch + 3, steps=6)


@pytest.mark.parametrize("act_dtype", [F16, BF16], ids=_id)
@pytest.mark.parametrize("T, L", [(2, 16), (4, 24), (8, 16)])
def test_verify_checkpoint_identical_whatever_the_read_format(act_dtype, T, L):
    """The copy never feeds the recurrence: verify + commit steps with the same accepted counts (several flushes per
    slot) leave checkpoint, rings and cursors bit-identical to the kernel run without a copy."""
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=128, ngroups=2)
    base = spec_pool(shape, 8, ReplayConfig(L, F32, act_dtype), T, DEV)
    spread_histories(base, T)
    A, D, dt_bias = layer_params(shape, DEV)
    pools = {}
    for f in ["none"] + FORMATS:
        pools[f] = copy_pool(shape, 8, ReplayConfig(L, F32, act_dtype, f), T)
        for name in RECURRENCE:
            pools[f].buffers[name].copy_(base.buffers[name])
        for s in range(8):
            pools[f].write_read_copy(s, pools[f].checkpoint[s])
    ys = {f: [] for f in pools}
    for _ in range(3 * L // T + 3):
        slots = slot_map(7, 8, n_pad=1, device=DEV)
        x, dt, B, C, z = window_inputs(shape, 7, T, act_dtype, DEV)
        accepted = torch.randint(1, T + 1, (7,), dtype=torch.int32, device=DEV)
        for f, p in pools.items():
            y = replay_verify(p, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
            ys[f].append(y[slots >= 0])
            spec_commit(p, accepted, slot_idx=slots, window=T)
    torch.cuda.synchronize()
    for f in FORMATS:
        for name in RECURRENCE:
            assert torch.equal(buffer_bytes(pools[f].buffers[name]), buffer_bytes(pools["none"].buffers[name])), \
                f"{f}: {name}"
        # y differs by the copy's rounding (and the output's) only: bounded, and not identical (the copy is read).
        err = worst(*(rel_err(a, b) for a, b in zip(ys[f], ys["none"])))
        assert 0 < err < read_copy_tol(f, act_dtype), f"{f}: y off the no-copy run by {err}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("P, N, T", [(64, 128, 4), (80, 64, 2), (128, 256, 8)])
def test_verify_flush_writes_the_quantiser_copy(fmt, P, N, T):
    """Every live row folds (history L-T, so h + 2T > L), over copies of other states: the copy equals
    quantize_state of the stored checkpoint bit for bit; the checkpoint and cursors equal the no-copy kernel's bit
    for bit (the fold reads the checkpoint, never the copy); y follows the reference reading the old copy; padding
    rows and unused slots keep their copy and checkpoint."""
    L = 2 * T + 2
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    pool = copy_pool(shape, 6, ReplayConfig(L, F32, BF16, fmt), T)
    for s in range(6):  # copies of unrelated states: the fold must overwrite every element and scale
        pool.write_read_copy(s, torch.randn_like(pool.checkpoint[s]) * 3)
    pool.set_cursor(slice(None), L - T, torch.randint(0, L, (6,), device=DEV, dtype=torch.int32))
    plain = spec_pool(shape, 6, ReplayConfig(L, F32, BF16), T, DEV)
    for name in RECURRENCE:
        plain.buffers[name].copy_(pool.buffers[name])
    ref = pool.clone()
    before = pool.clone()
    A, D, dt_bias = layer_params(shape, DEV)
    slots = slot_map(5, 6, n_pad=1, device=DEV)
    x, dt, B, C, z = window_inputs(shape, 5, T, BF16, DEV)
    out = poisoned(x.shape, BF16, DEV)
    replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
    replay_verify(plain, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
    y_ref = replay_verify_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
    torch.cuda.synchronize()
    live = slots >= 0
    assert not torch.isnan(out[live]).any() and torch.isnan(out[~live]).all(), "y coverage"
    assert rel_err(out[live], y_ref[live]) < tol(F32, BF16), "y off the reference reading the old copy"
    for name in RECURRENCE:
        assert torch.equal(buffer_bytes(pool.buffers[name]), buffer_bytes(plain.buffers[name])), \
            f"{name} differs from no copy"
    assert (pool.history()[slots[live].long().cpu()] == 0).all(), "a folding row kept its history"
    used = set(slots[live].tolist())
    for s in range(6):
        if s in used:
            check_copy_matches_quantiser(pool, s, fmt, "fold")
        else:
            for name, t in pool.buffers.items():
                assert torch.equal(buffer_bytes(t[s]), buffer_bytes(before.buffers[name][s])), \
                    f"unused slot {s}: {name}"

