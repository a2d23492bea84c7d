"""GPU tests of the Gated DeltaNet ReplaySSM decode kernel with a read copy (fp16 / bf16 / fp8 per row) against the
PyTorch reference (ops/gdn/replay_reference.py) and the reference quantiser (trtllm_replayssm/quant.py).

What must hold, and how exactly:
- The copy never feeds the recurrence: only y = S0 q of a non-flush row reads it, while S0 k (the correction u,
  which enters the ring and the next flush) reads the checkpoint. After N steps the checkpoint, rings and cursors
  are bit-identical to the kernel run without a copy, whatever the read format.
- A flush writes the copy the reference quantiser makes from the flushed fp32 values, which are the stored fp32
  checkpoint: quantize_state(checkpoint) equals the copy bit for bit (fp8: codes and row scales).
- Outputs: kernel and reference read the same copy (the reference pool's copy is synchronised to the kernel's
  after each step, so that a flush's rounding-boundary differences in S do not reach later steps); the copy widens
  to fp32 exactly, so y differs by summation order and output rounding only: the tolerance table of
  tests/test_gdn_kernels.py applies unchanged.
"""

import pytest
import torch

from conftest import poisoned
from gdn_cases import clone_pool, random_pool, step_inputs
from mamba2_cases import rel_err, slot_map, worst
from read_copy_checks import buffer_bytes, check_slots_after_step, read_copy_tol, sync_copies
from test_gdn_kernels import PREPARED, _has_gdn_kernels, tol
from trtllm_replayssm.config import CURSOR_HISTORY, GdnLayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.gdn import gdn_replay_decode
from trtllm_replayssm.ops.gdn.replay_reference import gdn_replay_decode_reference
from trtllm_replayssm.quant import quantize_state

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_gdn_kernels(), reason="kernel library built without the GDN kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DEV = torch.device("cuda")
FORMATS = ["fp16", "bf16", "fp8"]  # the kernel's copies of an fp32 checkpoint (capi/gdn_dispatch.cu)
RING = ("checkpoint", "ring_u", "ring_k", "ring_g", "cursor")


def _id(v):
    if isinstance(v, torch.dtype):
        return dtype_name(v)
    if isinstance(v, tuple) and len(v) == 4:
        return "H{}-HV{}-K{}-V{}".format(*v)
    return None


def copy_pool(shape, num_slots, cfg, desync=True):
    """A random pool (gdn_cases.random_pool) whose read copies hold the quantised checkpoints, as reset_slot
    leaves them."""
    pool = random_pool(shape, num_slots, cfg, DEV, desync=desync)
    for s in range(num_slots):
        pool.write_read_copy(s, pool.checkpoint[s])
    return pool


def check_copy_matches_quantiser(pool, s, fmt, where):
    """The copy of slot s equals quantize_state of its stored fp32 checkpoint, bit for bit."""
    for name, part in quantize_state(pool.checkpoint[s].float(), fmt).items():
        assert torch.equal(buffer_bytes(pool.buffers[name][s]), buffer_bytes(part)), f"{where}: {name} of slot {s}"


def run_against_reference(fmt, act_dtype, dims, L, batch, num_slots, steps):
    """`steps` steps from desynchronised cursors and origins (rows at different ring positions), shuffled slots, a
    padding row, poisoned outputs: y follows the reference reading the same copy; flush rows write the
    quantiser's copy; cursors and k, g records are exact; non-flush rows leave checkpoint and copy bit-identical;
    unused slots are untouched; nothing outside out's view is written."""
    shape = GdnLayerShape(*dims)
    HV, V = shape.num_v_heads, shape.head_v_dim
    pool = copy_pool(shape, num_slots, ReplayConfig(L, F32, act_dtype, fmt))
    ref = clone_pool(pool)
    for step in range(steps):
        slots = slot_map(batch, num_slots, n_pad=min(1, batch - 1), device=DEV)
        out_big = poisoned((batch, HV + 2 * (step % 2), V), act_dtype, DEV)
        out = out_big[:, :HV]
        before = clone_pool(pool)
        q, k, v, g, beta = step_inputs(shape, batch, act_dtype, DEV)
        gdn_replay_decode(pool, q, k, v, g=g, beta=beta, slot_idx=slots, out=out, **PREPARED)
        y_ref = gdn_replay_decode_reference(ref, q, k, v, g, beta, slots)
        torch.cuda.synchronize()
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
        assert torch.isnan(out_big[:, HV:]).all(), f"step {step}: written outside out's view"
        assert rel_err(out[live], y_ref[live]) < tol(F32, act_dtype), f"step {step}: y off the reference"
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ from the reference"
        assert torch.equal(pool.ring_k, ref.ring_k), f"step {step}: ring k records differ"
        assert torch.equal(pool.ring_g, ref.ring_g), f"step {step}: ring g records differ"
        assert rel_err(pool.ring_u, ref.ring_u) < tol(F32, act_dtype), f"step {step}: ring u records differ"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(F32, act_dtype), f"step {step}: checkpoint differs"
        check_slots_after_step(pool, before, slots, L, lambda s: check_copy_matches_quantiser(pool, s, fmt, f"step {step}"),
                               f"step {step}")
        sync_copies(ref, pool)


# Every format at the base shape; then K, V in {64, 128, 256}, both activation dtypes, L from 1 (every step
# flushes) to 64, and the Qwen3.5-122B GDN layer (16 key heads, 64 value heads, K = V = 128).
CASES = ([(f, BF16, (2, 4, 128, 128), 8) for f in FORMATS]
         + [("fp16", F16, (1, 2, 64, 64), 4), ("fp8", F16, (2, 8, 128, 256), 16), ("bf16", F16, (2, 4, 256, 64), 3),
            ("fp8", BF16, (1, 4, 64, 64), 1), ("fp8", BF16, (2, 4, 256, 128), 5), ("fp16", BF16, (2, 4, 128, 128), 64),
            ("fp8", BF16, (16, 64, 128, 128), 4)])


@pytest.mark.parametrize("fmt, act_dtype, dims, L", CASES, ids=_id)
def test_gdn_read_copy_kernel_matches_reference(fmt, act_dtype, dims, L):
    run_against_reference(fmt, act_dtype, dims, L, batch=6, num_slots=9, steps=3 * L + 3)


@pytest.mark.parametrize("fmt", ["fp16", "fp8"])
@pytest.mark.parametrize("batch", [1, 2, 37, 300])
def test_gdn_read_copy_kernel_matches_reference_across_launch_shapes(fmt, batch):
    """Batches from 1 (heads split into tiles, one unit per block) to 300 (whole heads, several units per block
    through the 3-stage pipeline, units halved where checkpoint and copy tiles do not fit): row scales and staged
    copy tiles follow their units."""
    run_against_reference(fmt, BF16, (2, 8, 128, 128), 4, batch=batch, num_slots=batch + 3, steps=2 * 4 + 2)


@pytest.mark.parametrize("act_dtype", [F16, BF16], ids=_id)
def test_gdn_checkpoint_identical_whatever_the_read_format(act_dtype):
    """The copy never feeds the recurrence: 3L+5 steps (several flushes per slot) leave checkpoint, rings and
    cursors bit-identical to the kernel run without a copy."""
    L = 4
    shape = GdnLayerShape(4, 16, 128, 128)
    base = random_pool(shape, 8, ReplayConfig(L, F32, act_dtype, latency_route_bytes=0), DEV)
    pools = {}
    for f in ["none"] + FORMATS:
        pools[f] = copy_pool(shape, 8, ReplayConfig(L, F32, act_dtype, f, latency_route_bytes=0))
        for name in RING:
            pools[f].buffers[name].copy_(base.buffers[name])
        for s in range(8):
            pools[f].write_read_copy(s, pools[f].checkpoint[s])
    ys = {f: [] for f in pools}
    for _ in range(3 * L + 5):
        slots = slot_map(7, 8, n_pad=1, device=DEV)
        q, k, v, g, beta = step_inputs(shape, 7, act_dtype, DEV)
        for f, p in pools.items():
            ys[f].append(gdn_replay_decode(p, q, k, v, g=g, beta=beta, slot_idx=slots, **PREPARED)[slots >= 0])
    torch.cuda.synchronize()
    for f in FORMATS:
        for name in RING:
            assert torch.equal(pools[f].buffers[name], pools["none"].buffers[name]), f"{f}: {name}"
        # y differs by the copy's rounding (and the output's) only (non-flush rows): bounded, and not identical (the copy is read).
        err = worst(*(rel_err(a, b) for a, b in zip(ys[f], ys["none"])))
        assert 0 < err < read_copy_tol(f, act_dtype), f"{f}: y off the no-copy run by {err}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dims", [(2, 4, 128, 128), (1, 2, 64, 256), (2, 4, 256, 64)], ids=_id)
def test_gdn_flush_writes_the_quantiser_copy(fmt, dims):
    """Every row flushes (history L-1), over a stale copy: the copy equals quantize_state of the stored checkpoint
    bit for bit; y and the checkpoint equal the no-copy kernel's bit for bit (a flush reads the checkpoint, never
    the copy); padding rows keep their stale copy."""
    L = 4
    shape = GdnLayerShape(*dims)
    pool = copy_pool(shape, 6, ReplayConfig(L, F32, BF16, fmt), desync=False)
    for name, t in pool.buffers.items():  # stale copies: a flush must overwrite every element
        if name.startswith("read_"):
            t.view(torch.uint8).fill_(0x7E)
    stale = clone_pool(pool)
    plain = random_pool(shape, 6, ReplayConfig(L, F32, BF16, latency_route_bytes=0), DEV, desync=False)
    for name in RING:
        plain.buffers[name].copy_(pool.buffers[name])
    pool.cursor[..., CURSOR_HISTORY] = L - 1
    plain.cursor[..., CURSOR_HISTORY] = L - 1
    slots = slot_map(5, 6, n_pad=1, device=DEV)
    q, k, v, g, beta = step_inputs(shape, 5, BF16, DEV)
    y = gdn_replay_decode(pool, q, k, v, g=g, beta=beta, slot_idx=slots, **PREPARED)
    y_plain = gdn_replay_decode(plain, q, k, v, g=g, beta=beta, slot_idx=slots, **PREPARED)
    torch.cuda.synchronize()
    live = slots >= 0
    assert torch.equal(y[live], y_plain[live])
    assert torch.equal(pool.checkpoint, plain.checkpoint)
    used = set(slots[live].tolist())
    for s in range(6):
        if s in used:
            check_copy_matches_quantiser(pool, s, fmt, "flush")
        else:
            for name in pool.buffers:
                if name.startswith("read_"):
                    assert torch.equal(buffer_bytes(pool.buffers[name][s]), buffer_bytes(stale.buffers[name][s])), f"slot {s}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_gdn_output_reads_the_copy_and_u_the_checkpoint(fmt):
    """A copy deliberately unlike the checkpoint (quantised from 3 S0 + 1): non-flush rows' y follows the
    reference reading that copy, while the u records (from S0 k) equal the no-copy kernel's bit for bit."""
    L = 8
    shape = GdnLayerShape(2, 4, 128, 128)
    pool = random_pool(shape, 6, ReplayConfig(L, F32, BF16, fmt), DEV, desync=False)
    for s in range(6):
        pool.write_read_copy(s, pool.checkpoint[s] * 3 + 1)
    pool.set_cursor(slice(None), torch.arange(6, device=DEV, dtype=torch.int32) % (L - 1))  # no row flushes
    ref = clone_pool(pool)
    plain = random_pool(shape, 6, ReplayConfig(L, F32, BF16, latency_route_bytes=0), DEV, desync=False)
    for name in RING:
        plain.buffers[name].copy_(pool.buffers[name])
    slots = slot_map(5, 6, n_pad=1, device=DEV)
    q, k, v, g, beta = step_inputs(shape, 5, BF16, DEV)
    y = gdn_replay_decode(pool, q, k, v, g=g, beta=beta, slot_idx=slots, **PREPARED)
    y_plain = gdn_replay_decode(plain, q, k, v, g=g, beta=beta, slot_idx=slots, **PREPARED)
    y_ref = gdn_replay_decode_reference(ref, q, k, v, g, beta, slots)
    torch.cuda.synchronize()
    live = slots >= 0
    assert rel_err(y[live], y_ref[live]) < tol(F32, BF16)
    assert rel_err(y[live], y_plain[live]) > 0.1  # the copy, not the checkpoint, was read
    for name in RING:
        assert torch.equal(pool.buffers[name], plain.buffers[name]), name


@pytest.mark.parametrize("cfg, kda, match", [
    (dict(read_format="nvfp4"), False, "read_format=nvfp4: the GDN decode kernel reads the copy formats"),
    (dict(read_format="fp16"), True, r"read_format=fp16 with per_channel_decay \(KDA\)"),
    (dict(read_format="fp8", state_dtype=F16), False, "read_format=fp8 with state_dtype=fp16"),
    (dict(read_format="bf16", act_dtype=F32), False, "read_format=bf16 with act_dtype=fp32"),
], ids=["nvfp4", "kda", "fp16_checkpoint", "fp32_activations"])
def test_gdn_read_copy_refusals_touch_nothing(cfg, kda, match):
    """Combinations without a kernel are refused before anything is written, naming the value."""
    cfg = {**dict(buffer_len=4, state_dtype=F32, act_dtype=BF16), **cfg}
    shape = GdnLayerShape(2, 4, 128, 128, per_channel_decay=kda)
    pool = random_pool(shape, 4, ReplayConfig(**cfg), DEV)
    q, k, v, g, beta = step_inputs(shape, 3, cfg["act_dtype"], DEV)
    before = clone_pool(pool)
    with pytest.raises(NotImplementedError, match=match):
        gdn_replay_decode(pool, q, k, v, g=g, beta=beta, **PREPARED)
    for name, t in pool.buffers.items():
        assert torch.equal(buffer_bytes(t), buffer_bytes(before.buffers[name])), f"{name} changed on a refused call"
