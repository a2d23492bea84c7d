"""GPU tests of the Gated DeltaNet and KDA decode kernels against the PyTorch reference and the fp64 recurrence,
with prepared inputs and with raw inputs (q, k normalised and gates computed in the kernel).

Tolerances (norm-relative, one table): the kernel and the reference differ only in summation order (e^E (S0 k)
against S0 (e^E k), ring terms summed in another order) and in which side of a rounding boundary a stored value
(checkpoint at flush, u record, y) lands, so the error is bounded by about two ulps of the coarsest dtype the
step stores (fp32 gets 2e-5 for summation order over <= 64 terms). Against the fp64 recurrence, fp32 gets 5e-5
(fp32 arithmetic over <= L replayed terms, as the CPU reference test). With raw inputs the kernel's prepared
q, k (another summation order for the norm) and g (fp32 exp / log1p) may land on the other side of a rounding
boundary of the activation dtype, so the ring's k records and g are compared with the same tolerance, not
bit for bit; KDA sums its flush terms newest first, which stays within the same bound.
"""

import pytest
import torch

from conftest import poisoned
from gdn_cases import clone_pool, fold_ring, gate_params, random_pool, raw_step_inputs, step_inputs
from mamba2_cases import rel_err, ring_route_twin, slot_map
from trtllm_replayssm import _lib
from trtllm_replayssm.config import CURSOR_HISTORY, CURSOR_ORIGIN, GdnLayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.gdn import gdn_conventional_decode, gdn_replay_decode
from trtllm_replayssm.ops.gdn.reference import gdn_gating, gdn_step, prepare_qk
from trtllm_replayssm.ops.gdn.replay_reference import (gdn_conventional_decode_reference,
                                                       gdn_replay_decode_reference)
from trtllm_replayssm.pool import GdnStatePool


def _has_gdn_kernels():
    return _lib.available() and _lib.has_symbol(_lib.load(), "rssm_gdn_decode")


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_gdn_kernels(), reason="kernel library built without the GDN kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: 2e-5, F16: 2e-3, BF16: 1.6e-2}
TOL_FP64 = 5e-5
EPS_ORDER = [F32, F16, BF16]
DEV = torch.device("cuda")
PREPARED = dict(use_qk_l2norm=False, scale=1.0)  # the inputs are prepared already: the op passes them through


def tol(state_dtype, act_dtype):
    return TOL[max(state_dtype, act_dtype, key=EPS_ORDER.index)]


DTYPE_PAIRS = [(s, a) for s in (F32, F16, BF16) for a in (F32, F16, BF16)]
BASE = (2, 4, 128, 128)  # H, HV, K, V


def _id(v):
    if isinstance(v, tuple) and len(v) == 2 and all(isinstance(d, torch.dtype) for d in v):
        return f"state_{dtype_name(v[0])}-act_{dtype_name(v[1])}"
    if isinstance(v, tuple) and len(v) == 4:
        return "H{}-HV{}-K{}-V{}".format(*v)
    return None


CASES = (
    [(pair, BASE, 16) for pair in DTYPE_PAIRS]
    + [((F32, BF16), (1, 2, 64, 64), 1), ((BF16, BF16), (1, 2, 64, 64), 64), ((F32, BF16), (2, 8, 128, 256), 4),
       ((F16, F16), (2, 8, 256, 128), 16), ((F32, F32), BASE, 64), ((F32, F16), (1, 4, 256, 64), 4),
       ((BF16, F32), (2, 4, 64, 256), 16)]
)


def _wide(t, extra):
    """The same values as `t` [b, n, ...] in a view whose batch stride is larger (a slice of a projection)."""
    big = torch.randn(t.shape[0], t.shape[1] + extra, *t.shape[2:], device=t.device).to(t.dtype)
    big[:, :t.shape[1]] = t
    return big[:, :t.shape[1]]


def _inputs(shape, batch, act_dtype):
    return step_inputs(shape, batch, act_dtype, DEV)


def _alternating_inputs(shape, batch, act_dtype, raw, A_log, dt_bias):
    """(q, k, v, gate keyword arguments, op options) of one step: raw gate projections with A_log / dt_bias and the
    op's own q, k preparation, or prepared q, k and precomputed g, beta passed through."""
    if raw:
        q, k, v, a, b = raw_step_inputs(shape, batch, act_dtype, DEV)
        return q, k, v, dict(a=a, b=b, A_log=A_log, dt_bias=dt_bias), {}
    q, k, v, g, beta = _inputs(shape, batch, act_dtype)
    return q, k, v, dict(g=g, beta=beta), PREPARED


def _raw_reference_inputs(q, k, v, a, b, A_log, dt_bias):
    """What the op hands the reference on the CPU for raw inputs: prepared q, k rounded to v's dtype, fp32 gates."""
    qp, kp = prepare_qk(q, k)
    g, beta = gdn_gating(a, b, A_log, dt_bias)
    return qp.to(v.dtype), kp.to(v.dtype), g, beta


def _check_replay_against_reference(dtypes, dims, L, kda=False, raw=False, gate_dtype=F32, latency_rows=0):
    """3L+3 steps from desynchronised cursors and origins, shuffled slots, a padding row, fresh inputs each step
    (on odd steps v, the gates and out are views with a wider batch stride): y, checkpoint, ring and cursors
    follow the reference; checkpoints of non-flush rows stay bit-identical; padded rows and unused slots are
    untouched; every non-padded output is written and nothing outside `out`'s view is. raw: q, k of any norm
    and the gates a, b, A_log, dt_bias go to the kernel as they are. latency_rows: the latency route's limit at
    that many rows' checkpoints, every third step that many rows (every row flushes, folding its records), the
    others six rows (the ring routes); 0: the ring routes only."""
    state_dtype, act_dtype = dtypes
    shape = GdnLayerShape(*dims, per_channel_decay=kda)
    HV, V = shape.num_v_heads, shape.head_v_dim
    cfg = ReplayConfig(L, state_dtype, act_dtype, latency_route_bytes=latency_rows * HV * V * shape.head_k_dim * 4)
    pool = random_pool(shape, 9, cfg, DEV)
    ref = clone_pool(pool)
    A_log, dt_bias = gate_params(shape, DEV)
    folded = 0
    for step in range(3 * L + 3):
        latency = latency_rows > 0 and step % 3 == 0
        batch = latency_rows if latency else 6
        assert pool.flushes_every_row(batch) == latency
        slots = slot_map(batch, 9, n_pad=1, device=DEV)
        out_big = poisoned((batch, HV + 2 * (step % 2), V), act_dtype, DEV)
        out = out_big[:, :HV]
        before = clone_pool(pool)
        if raw:
            q, k, v, a, b = raw_step_inputs(shape, batch, act_dtype, DEV, gate_dtype)
            if step % 2:
                v, a, b = _wide(v, 3), _wide(a, 5), _wide(b, 1)
            gdn_replay_decode(pool, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots, out=out)
            q, k, g, beta = _raw_reference_inputs(q, k, v, a, b, A_log, dt_bias)
        else:
            q, k, v, g, beta = _inputs(shape, batch, act_dtype)
            if step % 2:
                v, g, beta = _wide(v, 3), _wide(g, 5), _wide(beta, 1)
            gdn_replay_decode(pool, q, k, v, g=g, beta=beta, slot_idx=slots, out=out, **PREPARED)
        y_ref = gdn_replay_decode_reference(ref, q, k, v, g, beta, slots)
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
        assert torch.isnan(out_big[:, HV:]).all(), f"step {step}: written outside out's view"
        assert rel_err(out[live], y_ref[live]) < tol(*dtypes), f"step {step}: y off the reference"
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ from the reference"
        used = set(slots[live].tolist())
        hist_before = before.history()
        for s in range(9):
            if s not in used:
                for name, t in pool.buffers.items():
                    assert torch.equal(t[s], before.buffers[name][s]), f"step {step}: unused slot {s} {name}"
            elif latency:
                folded += int(hist_before[s]) > 0
            elif int(hist_before[s]) < L - 1:
                assert torch.equal(pool.checkpoint[s], before.checkpoint[s]), \
                    f"step {step}: checkpoint of non-flush slot {s} changed"
        if raw:
            assert rel_err(pool.ring_k, ref.ring_k) < tol(*dtypes), f"step {step}: ring k records differ"
            assert rel_err(pool.ring_g, ref.ring_g) < tol(*dtypes), f"step {step}: ring g records differ"
        else:
            assert torch.equal(pool.ring_k, ref.ring_k), f"step {step}: ring k records differ"
            assert torch.equal(pool.ring_g, ref.ring_g), f"step {step}: ring g records differ"
        assert rel_err(pool.ring_u, ref.ring_u) < tol(*dtypes), f"step {step}: ring u records differ"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(*dtypes), f"step {step}: checkpoint differs"
    assert latency_rows == 0 or L == 1 or folded > 0, "no latency step met a row with records to fold"


@pytest.mark.parametrize("dtypes, dims, L", CASES, ids=_id)
def test_replay_kernel_matches_reference(dtypes, dims, L):
    _check_replay_against_reference(dtypes, dims, L)


# The latency route's shapes: V K / 1024 tiles per head in blocks of four (4 tiles: one block; 16; 32: eight
# blocks, every replica one owner), fp32 checkpoint.
LATENCY_CASES = [((F32, BF16), BASE, 16), ((F32, F32), (1, 2, 64, 64), 4), ((F32, F16), (2, 8, 128, 256), 8),
                 ((F32, BF16), (1, 4, 256, 64), 32), ((F32, BF16), (2, 4, 64, 256), 64),
                 ((F32, BF16), (2, 8, 256, 128), 16), ((F32, BF16), (1, 2, 128, 64), 8)]


@pytest.mark.parametrize("raw", [False, True], ids=["prepared", "raw"])
@pytest.mark.parametrize("dtypes, dims, L", LATENCY_CASES, ids=_id)
def test_latency_route_kernel_matches_reference(dtypes, dims, L, raw):
    """The same checks with steps of three rows on the latency route (every row flushes in the conventional
    kernel's mapping, folding the records its ring holds; raw inputs prepared there) between steps of six on the
    ring routes: the kernels leave and pick up each other's cursors."""
    _check_replay_against_reference(dtypes, dims, L, raw=raw, latency_rows=3)


@pytest.mark.parametrize("dims, L", [(BASE, 16), ((2, 8, 128, 256), 32), ((1, 4, 256, 128), 64),
                                     ((1, 2, 64, 64), 8)], ids=_id)
def test_latency_route_fold_equals_the_combined_kernels_flush_bitwise(dims, L):
    """Every row at history L-1, one step on the latency route and one on the combined kernel (limit 0) from the
    same pool, prepared inputs: the fold performs the flush's fp32 operations in the same order and the current
    token's correction the same reductions, so every buffer is bit-identical (checkpoint, cursors back at 0, rings
    untouched by both) and so is y."""
    shape = GdnLayerShape(*dims)
    lat = random_pool(shape, 7, ReplayConfig(L, F32, BF16), DEV, desync=False)
    lat.set_cursor(slice(None), L - 1, torch.randint(0, L, (7,), device=DEV, dtype=torch.int32))
    ring = ring_route_twin(lat)
    assert lat.flushes_every_row(6) and not ring.flushes_every_row(6)
    slots = slot_map(6, 7, n_pad=1, device=DEV)
    q, k, v, g, beta = _inputs(shape, 6, BF16)
    outs = []
    for pool in (lat, ring):
        out = poisoned(tuple(v.shape), BF16, DEV)
        gdn_replay_decode(pool, q, k, v, g=g, beta=beta, slot_idx=slots, out=out, **PREPARED)
        outs.append(out)
    torch.cuda.synchronize()
    for name, t in lat.buffers.items():
        assert torch.equal(t, ring.buffers[name]), f"{name} differs from the combined kernel's flush"
    live = slots >= 0
    assert torch.isnan(outs[0][~live]).all() and torch.equal(outs[0][live], outs[1][live])


@pytest.mark.parametrize("dims", [BASE, (1, 2, 64, 64), (2, 8, 128, 256)], ids=_id)
def test_latency_route_at_history_zero_equals_the_conventional_kernel_bitwise(dims):
    """A step on the latency route (the default for these small steps) with every cursor at history 0 is the
    conventional kernel's step bit for bit on prepared inputs (y and checkpoint), and writes no cursor or ring
    record; with raw inputs (prepared in the kernel) it follows the conventional op within rounding."""
    shape = GdnLayerShape(*dims)
    pool = random_pool(shape, 7, ReplayConfig(8, F32, BF16), DEV, desync=False)
    assert pool.flushes_every_row(6) and pool.history().eq(0).all()
    before = clone_pool(pool)
    state = pool.checkpoint.clone()
    A_log, dt_bias = gate_params(shape, DEV)
    for step in range(4):
        slots = slot_map(6, 7, n_pad=1, device=DEV)
        live = slots >= 0
        q, k, v, gates, opts = _alternating_inputs(shape, 6, BF16, step % 2, A_log, dt_bias)
        y1 = poisoned((6, shape.num_v_heads, shape.head_v_dim), BF16, DEV)
        gdn_replay_decode(pool, q, k, v, **gates, slot_idx=slots, out=y1, **opts)
        y2 = gdn_conventional_decode(state, shape, q, k, v, **gates, slot_idx=slots, **opts)
        assert torch.isnan(y1[~live]).all() and not torch.isnan(y1[live]).any(), f"step {step}"
        if step % 2:
            assert rel_err(y1[live], y2[live]) < tol(F32, BF16), f"step {step}: y (raw inputs)"
            assert rel_err(pool.checkpoint, state) < tol(F32, BF16), f"step {step}: state (raw inputs)"
            state.copy_(pool.checkpoint)  # the next step starts both from the same state again
        else:
            assert torch.equal(y1[live], y2[live]), f"step {step}: y"
            assert torch.equal(pool.checkpoint, state), f"step {step}: state"
    for name in ("ring_u", "ring_k", "ring_g", "cursor"):
        assert torch.equal(pool.buffers[name], before.buffers[name]), f"{name} written on the latency route"


# KDA: every dtype pair at K = V = 128, L = 16; then K = V in {64, 128} with L in {1, 4, 16, 64}.
KDA_CASES = (
    [(pair, BASE, 16) for pair in DTYPE_PAIRS]
    + [((F32, BF16), (1, 2, 64, 64), 1), ((F32, F32), (2, 4, 64, 64), 4), ((BF16, BF16), (1, 2, 64, 64), 64),
       ((F16, F16), (2, 8, 128, 128), 4), ((F32, F32), BASE, 64), ((F32, BF16), (2, 4, 64, 64), 16)]
)


@pytest.mark.parametrize("dtypes, dims, L", KDA_CASES, ids=_id)
def test_kda_replay_kernel_matches_reference(dtypes, dims, L):
    _check_replay_against_reference(dtypes, dims, L, kda=True)


@pytest.mark.parametrize("kda", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=_id)
def test_replay_kernel_with_raw_inputs_matches_reference(dtypes, kda):
    """Raw q, k (normalised and scaled in the kernel) and raw gates (g, beta computed in the kernel)."""
    _check_replay_against_reference(dtypes, BASE, 8, kda=kda, raw=True)


@pytest.mark.parametrize("kda", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("dims, L", [((1, 2, 64, 64), 4), ((2, 8, 256, 128), 16), ((2, 4, 64, 256), 1)], ids=_id)
def test_replay_kernel_with_half_precision_gates_matches_reference(dims, L, kda):
    """a, b in bf16 (the projection's dtype), A_log, dt_bias in fp32, odd head dims."""
    _check_replay_against_reference((F32, BF16), dims, L, kda=kda, raw=True, gate_dtype=BF16)


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "default"])
@pytest.mark.parametrize("kda", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("L", [4, 16])
def test_replay_kernel_matches_fp64_recurrence(L, kda, latency_route_bytes):
    """fp32 state and activations, raw q, k and gates prepared by the kernel: outputs track the fp64 sequential
    recurrence over 3L+40 steps, and checkpoint + ring hold the recurrence's state at the end; through the ring
    routes, and through the default (GDN: the latency route for these small steps; KDA has none)."""
    shape = GdnLayerShape(2, 8, 128, 128, per_channel_decay=kda)
    pool = random_pool(shape, 8, ReplayConfig(L, F32, F32, latency_route_bytes=latency_route_bytes), DEV)
    states = fold_ring(pool)
    A_log, dt_bias = gate_params(shape, DEV)
    for step in range(3 * L + 40):
        slots = slot_map(6, 8, n_pad=1, device=DEV)
        q, k, v, a, b = raw_step_inputs(shape, 6, F32, DEV)
        y = gdn_replay_decode(pool, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots)
        qp, kp = prepare_qk(q, k)  # fp32, as the kernel prepares them (up to summation order)
        g, beta = gdn_gating(a, b, A_log, dt_bias)
        for row, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            y64, st = gdn_step(states[s:s + 1], *(t[row:row + 1].double().cpu() for t in (qp, kp, v, g, beta)))
            states[s] = st[0]
            assert rel_err(y[row].cpu(), y64[0]) < TOL_FP64, f"step {step} row {row}"
    assert rel_err(fold_ring(pool), states) < TOL_FP64, "pool state off the recurrence"


@pytest.mark.parametrize("kda", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=_id)
def test_replay_l1_equals_conventional_kernel_bitwise(dtypes, kda):
    """L=1: every step flushes an empty ring, so the replay kernel must equal the conventional kernel exactly
    (prepared inputs on even steps, raw inputs on odd steps)."""
    state_dtype, act_dtype = dtypes
    shape = GdnLayerShape(*BASE, per_channel_decay=kda)
    A_log, dt_bias = gate_params(shape, DEV)
    pool = random_pool(shape, 5, ReplayConfig(1, state_dtype, act_dtype, latency_route_bytes=0), DEV, desync=False)
    state = pool.checkpoint.clone()
    for step in range(4):
        slots = slot_map(4, 5, n_pad=1, device=DEV)
        q, k, v, gates, opts = _alternating_inputs(shape, 4, act_dtype, step % 2, A_log, dt_bias)
        y1 = gdn_replay_decode(pool, q, k, v, **gates, slot_idx=slots, **opts)
        y2 = gdn_conventional_decode(state, shape, q, k, v, **gates, slot_idx=slots, **opts)
        live = slots >= 0
        assert torch.equal(y1[live], y2[live]), f"step {step}: y"
        assert torch.equal(pool.checkpoint, state), f"step {step}: state"


CONV_CASES = [(pair, BASE) for pair in DTYPE_PAIRS] + [
    ((F32, BF16), (1, 2, 64, 64)), ((BF16, F16), (2, 8, 128, 256)), ((F16, BF16), (2, 8, 256, 128)),
    ((F32, F32), (4, 4, 256, 256))]


@pytest.mark.parametrize("kda", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("dtypes, dims", CONV_CASES, ids=_id)
def test_conventional_kernel_matches_reference(dtypes, dims, kda):
    """Four steps on 5 of 7 slots (2 padding rows, shuffled): y and state follow the reference, padded rows and
    unused slots untouched, every live output written (prepared inputs on even steps, raw on odd steps)."""
    state_dtype, act_dtype = dtypes
    shape = GdnLayerShape(*dims, per_channel_decay=kda)
    A_log, dt_bias = gate_params(shape, DEV)
    HV, V, K = shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
    state = (torch.randn(7, HV, V, K, device=DEV) * 0.5).to(state_dtype)
    ref_state = state.clone()
    for step in range(4):
        slots = slot_map(5, 7, n_pad=2, device=DEV)
        before = state.clone()
        out = poisoned((5, HV, V), act_dtype, DEV)
        if step % 2:
            q, k, v, a, b = raw_step_inputs(shape, 5, act_dtype, DEV)
            v, a, b = _wide(v, 1), _wide(a, 2), _wide(b, 3)
            gdn_conventional_decode(state, shape, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots,
                                    out=out)
            q, k, g, beta = _raw_reference_inputs(q, k, v, a, b, A_log, dt_bias)
        else:
            q, k, v, g, beta = _inputs(shape, 5, act_dtype)
            gdn_conventional_decode(state, shape, q, k, v, g=g, beta=beta, slot_idx=slots, out=out, **PREPARED)
        y_ref = gdn_conventional_decode_reference(ref_state, q, k, v, g, beta, slots)
        live = slots >= 0
        assert not torch.isnan(out[live]).any() and torch.isnan(out[~live]).all(), f"step {step}: out rows"
        assert rel_err(out[live], y_ref[live]) < tol(*dtypes), f"step {step}: y"
        assert rel_err(state, ref_state) < tol(*dtypes), f"step {step}: state"
        unused = [s for s in range(7) if s not in set(slots[live].tolist())]
        assert torch.equal(state[unused], before[unused]), f"step {step}: unused slots changed"


@pytest.mark.parametrize("state_dtype", [F32, BF16], ids=["f32", "bf16"])
def test_conventional_step_over_several_waves(state_dtype):
    """The conventional step at a serving shape (Qwen3.5-122B heads, 40 rows: several waves of its one-warp blocks
    on any current GPU), rows on shuffled slots, padding or out of range: three steps follow the reference, every
    live output is written and no other row's is, and slots no live row names are untouched."""
    shape = GdnLayerShape(16, 64, 128, 128)
    HV, V, K = shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
    batch, num_slots = 40, 48
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    assert batch * HV * V // 8 > 4 * 32 * sms  # one-warp blocks of 8 rows (Tiling), at most 32 resident per SM
    state = (torch.randn(num_slots, HV, V, K, device=DEV) * 0.5).to(state_dtype)
    ref_state = state.clone()
    for step in range(3):
        slots = slot_map(batch, num_slots, n_pad=3, device=DEV)
        slots[7] = num_slots + 5  # out of range: skipped like padding
        before = state.clone()
        out = poisoned((batch, HV, V), BF16, DEV)
        q, k, v, g, beta = _inputs(shape, batch, BF16)
        gdn_conventional_decode(state, shape, q, k, v, g=g, beta=beta, slot_idx=slots, out=out, **PREPARED)
        live = (slots >= 0) & (slots < num_slots)
        ref_slots = torch.where(live, slots, torch.full_like(slots, -1))
        y_ref = gdn_conventional_decode_reference(ref_state, q, k, v, g, beta, ref_slots)
        assert not torch.isnan(out[live]).any() and torch.isnan(out[~live]).all(), f"step {step}: out rows"
        assert rel_err(out[live], y_ref[live]) < tol(state_dtype, BF16), f"step {step}: y"
        assert rel_err(state, ref_state) < tol(state_dtype, BF16), f"step {step}: state"
        unused = [s for s in range(num_slots) if s not in set(slots[live].tolist())]
        assert torch.equal(state[unused], before[unused]), f"step {step}: unused slots changed"


@pytest.mark.parametrize("dtypes, dims", CONV_CASES + [((F32, BF16), (16, 64, 128, 128))], ids=_id)
def test_conventional_step_without_slot_indices_equals_the_indexed_step(dtypes, dims):
    """No slot_idx (row b steps slot b; the kernel's instance without the index load, state loads first): three
    steps of 5 rows on a 7-slot pool are bitwise the indexed step given slot_idx = 0..4 and follow the reference;
    slots 5 and 6 stay untouched and every output row is written."""
    state_dtype, act_dtype = dtypes
    shape = GdnLayerShape(*dims)
    HV, V, K = shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
    state = (torch.randn(7, HV, V, K, device=DEV) * 0.5).to(state_dtype)
    indexed, ref_state = state.clone(), state.clone()
    rows = torch.arange(5, device=DEV, dtype=torch.int32)
    for step in range(3):
        before = state.clone()
        q, k, v, g, beta = _inputs(shape, 5, act_dtype)
        out, out_indexed = (poisoned((5, HV, V), act_dtype, DEV) for _ in range(2))
        gdn_conventional_decode(state, shape, q, k, v, g=g, beta=beta, out=out, **PREPARED)
        gdn_conventional_decode(indexed, shape, q, k, v, g=g, beta=beta, slot_idx=rows, out=out_indexed, **PREPARED)
        y_ref = gdn_conventional_decode_reference(ref_state, q, k, v, g, beta, rows)
        assert not torch.isnan(out).any(), f"step {step}: out rows"
        assert torch.equal(out, out_indexed) and torch.equal(state, indexed), f"step {step}: not the indexed step"
        assert rel_err(out, y_ref) < tol(*dtypes), f"step {step}: y"
        assert rel_err(state, ref_state) < tol(*dtypes), f"step {step}: state"
        assert torch.equal(state[5:], before[5:]), f"step {step}: slots past the batch changed"


@pytest.mark.parametrize("route", ["replay", "latency", "conventional"])
def test_padding_and_out_of_range_rows_touch_nothing(route):
    """Rows with the pad id or a slot index outside [0, num_slots) are skipped: no output, no pool write; live
    rows step (the ring routes move their cursor, the latency route and the conventional step their state)."""
    replay = route != "conventional"
    shape = GdnLayerShape(*BASE)
    pool = random_pool(shape, 6, ReplayConfig(4, F32, BF16, latency_route_bytes=None if route == "latency" else 0),
                       DEV)
    assert pool.flushes_every_row(6) == (route == "latency")
    slots = torch.tensor([3, -1, 6, 0, 40, -5], dtype=torch.int32, device=DEV)
    q, k, v, g, beta = _inputs(shape, 6, BF16)
    before = clone_pool(pool)
    out = poisoned(tuple(v.shape), BF16, DEV)
    if replay:
        gdn_replay_decode(pool, q, k, v, g=g, beta=beta, slot_idx=slots, out=out, **PREPARED)
    else:
        gdn_conventional_decode(pool.checkpoint, shape, q, k, v, g=g, beta=beta, slot_idx=slots, out=out,
                                **PREPARED)
    assert not torch.isnan(out[[0, 3]]).any(), "live rows not written"
    assert torch.isnan(out[[1, 2, 4, 5]]).all(), "skipped rows written"
    for name, t in pool.buffers.items():
        assert torch.equal(t[[1, 2, 4, 5]], before.buffers[name][[1, 2, 4, 5]]), f"{name} of an unused slot changed"
    name = "cursor" if route == "replay" else "checkpoint"
    assert not torch.equal(pool.buffers[name][[0, 3]], before.buffers[name][[0, 3]]), "live rows did not step"


@pytest.mark.parametrize("replay", [True, False], ids=["replay", "conventional"])
def test_empty_batch_launches_nothing(replay):
    shape = GdnLayerShape(*BASE)
    pool = random_pool(shape, 3, ReplayConfig(4, F32, BF16), DEV)
    before = clone_pool(pool)
    q, k, v, g, beta = _inputs(shape, 0, BF16)
    if replay:
        y = gdn_replay_decode(pool, q, k, v, g=g, beta=beta, **PREPARED)
    else:
        y = gdn_conventional_decode(pool.checkpoint, shape, q, k, v, g=g, beta=beta, **PREPARED)
    torch.cuda.synchronize()
    assert y.shape == (0, 4, 128)
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), name


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "latency_route"])
def test_replay_step_captured_in_cuda_graph(latency_route_bytes):
    """One replay step (gating and q/k preparation included) captured once and replayed 2L+3 times with new
    inputs and no host sync: equal bit for bit to the same steps run eagerly, and within tolerance of the
    reference; the cursor lives and advances on the device (ring routes, and the latency route the default takes
    for this small step)."""
    L = 6
    shape = GdnLayerShape(*BASE)
    pool = random_pool(shape, 6, ReplayConfig(L, F32, BF16, latency_route_bytes=latency_route_bytes), DEV)
    eager, ref = clone_pool(pool), clone_pool(pool)
    A_log, dt_bias = gate_params(shape, DEV)
    slots = slot_map(5, 6, n_pad=1, device=DEV)
    static = list(raw_step_inputs(shape, 5, BF16, DEV))
    out = torch.empty_like(static[2])

    def step(p, o=None):
        q, k, v, a, b = static
        return gdn_replay_decode(p, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots, out=o)

    step(clone_pool(pool), out)  # warm-up on a throwaway pool: library loaded, kernels resolved
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(pool, out)
    live = slots >= 0
    for i in range(2 * L + 3):
        for dst, src in zip(static, raw_step_inputs(shape, 5, BF16, DEV)):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        y_eager = step(eager)
        q, k, v, a, b = static
        qp, kp = prepare_qk(q, k)
        g, beta = gdn_gating(a, b, A_log, dt_bias)
        y_ref = gdn_replay_decode_reference(ref, qp.to(BF16), kp.to(BF16), v, g, beta, slots)
        assert torch.equal(out[live], y_eager[live]), f"replay {i}: graph and eager outputs differ"
        for name, t in pool.buffers.items():
            assert torch.equal(t, eager.buffers[name]), f"replay {i}: graph and eager {name} differ"
        assert rel_err(out[live], y_ref[live]) < tol(F32, BF16), f"replay {i}"
        assert torch.equal(pool.cursor, ref.cursor), f"replay {i}: cursor"


# ---- Refusals: clear errors before anything is written ----

def _refusal_case(**cfg):
    shape = GdnLayerShape(*BASE, per_channel_decay=cfg.pop("kda", False))
    pool = GdnStatePool(shape, 4, ReplayConfig(4, F32, BF16, **cfg), device=DEV)
    pool.checkpoint.normal_()
    q, k, v, g, beta = _inputs(GdnLayerShape(*BASE), 3, BF16)
    if shape.per_channel_decay:
        g = g[..., None].expand(3, 4, 128).contiguous()
    return pool, dict(q=q, k=k, v=v, g=g, beta=beta)


def _strided_last(t):
    """Same shape, stride 2 in the last dimension."""
    return torch.stack([t, t], dim=-1)[..., 0]


@pytest.mark.parametrize("cfg, mutate, error, match", [
    # fp16 / bf16 / fp8 copies run (tests/test_gdn_read_copy_kernels.py); nvfp4 and KDA copies have no kernel.
    (dict(read_format="nvfp4"), None, NotImplementedError, "read_format=nvfp4: the GDN decode kernel reads"),
    (dict(kda=True, read_format="fp16"), None, NotImplementedError, r"read_format=fp16 with per_channel_decay \(KDA\)"),
    ({}, lambda d: d.update(v=_strided_last(d["v"])), ValueError, "v must be contiguous in its last dimension"),
    ({}, lambda d: d.update(g=_strided_last(d["g"])), ValueError, "g must be contiguous in its last dimension"),
    ({}, lambda d: d.update(out=_strided_last(torch.empty_like(d["v"]))), ValueError,
     "out must be contiguous in its last dimension"),
    ({}, lambda d: d.update(v=torch.randn(3 * 4 * 128 + 1, device=DEV).to(BF16)[1:].view(3, 4, 128)), ValueError,
     "v rows must be 16-byte aligned"),
    ({}, lambda d: d.update(g=d["g"].cpu()), ValueError, r"g is on cpu, expected cuda:\d"),
    ({}, lambda d: d.update(slot_idx=torch.tensor([0, 1, 2], dtype=torch.int32)), ValueError,
     r"slot_idx is on cpu, expected cuda:\d"),
    ({}, lambda d: d.update({n: d[n].cpu() for n in d}), ValueError, r"v is on cpu but the pool is on cuda:\d"),
], ids=["read_copy_nvfp4", "kda_read_copy", "v_strided", "g_strided", "out_strided", "v_misaligned",
        "g_on_cpu", "slot_idx_on_cpu", "pool_on_other_device"])
def test_replay_refuses_what_the_kernels_cannot_do(cfg, mutate, error, match):
    pool, d = _refusal_case(**cfg)
    if mutate:
        mutate(d)
    before = clone_pool(pool)
    with pytest.raises(error, match=match):
        gdn_replay_decode(pool, d.pop("q"), d.pop("k"), d.pop("v"), **d, **PREPARED)
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), f"{name} changed on a refused call"


@pytest.mark.parametrize("kda, A_log_shape, match", [
    (False, (4, 1), r"A_log has shape \(4, 1\), expected one of \[\(4,\)\]"),
    (True, (4,), r"A_log has shape \(4,\), expected one of \[\(4, 1\), \(4, 128\)\]"),
], ids=["gdn_per_channel_A_log", "kda_ambiguous_A_log"])
def test_raw_gates_refuse_parameters_of_another_shape(kda, A_log_shape, match):
    shape = GdnLayerShape(*BASE, per_channel_decay=kda)
    pool = random_pool(shape, 4, ReplayConfig(4, F32, BF16), DEV)
    q, k, v, a, b = raw_step_inputs(shape, 3, BF16, DEV)
    _, dt_bias = gate_params(shape, DEV)
    before = clone_pool(pool)
    with pytest.raises(ValueError, match=match):
        gdn_replay_decode(pool, q, k, v, a=a, b=b, A_log=torch.zeros(A_log_shape, device=DEV), dt_bias=dt_bias)
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), f"{name} changed on a refused call"


def test_conventional_refuses_state_on_another_device():
    q, k, v, g, beta = _inputs(GdnLayerShape(*BASE), 3, BF16)
    with pytest.raises(ValueError, match=r"state is on cpu, expected cuda:\d"):
        gdn_conventional_decode(torch.zeros(3, 4, 128, 128), GdnLayerShape(*BASE), q, k, v, g=g, beta=beta)


# ---- The split route (gdn/output_only.cuh) against the combined kernel ----
#
# RSSM_ROUTES=split forces the output-only mapping where it exists (fp32 checkpoint, bf16 / fp16 activations,
# K = 128, scalar decay, L 2..32), RSSM_ROUTES=combined the combined kernel. The output-only kernel forms every
# value that enters the recurrence (the prepared q, k, the gates, the ring dots and weights, S'k and so u, a
# flushing row's S' and S) with the combined kernel's fp32 operations in the same order (output_only.cuh's
# header): every pool buffer, the checkpoint included, is bit-identical after every step. A non-flush row's y
# sums its window terms in another order (once per row, in the prologue), so y is within two roundings of the
# activation dtype of the combined kernel's (an fp32 sum in another order, then one rounding each).

SPLIT_INPUTS = ["prepared", "raw_qk", "raw_gates", "raw"]


def _split_step_inputs(shape, batch, act_dtype, inputs, A_log, dt_bias):
    """(q, k, v, keyword arguments of gdn_replay_decode) for one step: q, k prepared here (qk_flags 0) or raw
    (normalised and scaled in the kernel); gates precomputed or raw."""
    q, k, v, g, beta = _inputs(shape, batch, act_dtype)
    rq, rk, _, a, b = raw_step_inputs(shape, batch, act_dtype, DEV)
    kw = {}
    if inputs in ("raw_qk", "raw"):
        q, k = rq, rk
    else:
        kw.update(PREPARED)
    if inputs in ("raw_gates", "raw"):
        kw.update(a=a, b=b, A_log=A_log, dt_bias=dt_bias)
    else:
        kw.update(g=g, beta=beta)
    return q, k, v, kw


def _kernel_names(fn):
    """Names of the CUDA kernels fn() launches (torch.profiler), or None when the profiler records none."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return names or None


def _run_routes(monkeypatch, pools, q, k, v, kw, slots, profile_split=False):
    """One step on each (pool, route); returns the outputs (poisoned first) and, with profile_split, whether
    the split route's step launched the output-only kernel (None: the profiler recorded nothing)."""
    outs, ran = [], None
    for pool, routes in pools:
        monkeypatch.setenv("RSSM_ROUTES", routes)
        out = poisoned(tuple(v.shape), v.dtype, DEV)
        step = lambda: gdn_replay_decode(pool, q, k, v, **kw, slot_idx=slots, out=out)  # noqa: E731
        if profile_split and routes == "split":
            names = _kernel_names(step)
            ran = None if names is None else any("output_only_kernel" in n for n in names)
        else:
            step()
        outs.append(out)
    torch.cuda.synchronize()
    return outs, ran


@pytest.mark.parametrize("inputs", SPLIT_INPUTS)
@pytest.mark.parametrize("act_dtype", [BF16, F16], ids=dtype_name)
@pytest.mark.parametrize("V, hpg", [(64, 4), (128, 2), (128, 16)], ids=lambda v: str(v))
@pytest.mark.parametrize("L", [5, 8, 16, 32])
def test_gdn_split_route_matches_the_combined_kernel(monkeypatch, L, V, hpg, act_dtype, inputs):
    """The replay step in output_only.cuh's mapping against the combined kernel on identical pools over 2L+3
    steps: cursors desynchronised per key head (the value heads of a key head share its ring of k records and so,
    in every step the library makes, their cursor; rows mix flushing and reading key heads), a padding row,
    shuffled slots, q / k prepared or raw, gates precomputed or raw. Every pool buffer (checkpoint, rings,
    cursors) bit-identical after every step; y within two roundings of the activation dtype; padded rows'
    outputs untouched and live ones fully written; the split step launched the output-only kernel (profiler; or,
    without one, some y one rounding apart). hpg 16 at V 128: blocks of 8 heads, two chunks per key head (only
    chunk 0 writes the ring k record)."""
    H = 2
    shape = GdnLayerShape(H, H * hpg, 128, V)
    num_slots, batch = 9, 7
    split = random_pool(shape, num_slots, ReplayConfig(L, F32, act_dtype, latency_route_bytes=0), DEV)
    per_key = lambda: torch.randint(0, L, (num_slots, H, 1), device=DEV, dtype=torch.int32)  # noqa: E731
    split.cursor[..., CURSOR_HISTORY] = per_key().repeat_interleave(hpg, 1)
    split.cursor[..., CURSOR_ORIGIN] = per_key().repeat_interleave(hpg, 1)
    combined = clone_pool(split)
    A_log, dt_bias = gate_params(shape, DEV)
    ulp = 2.0 ** -7 if act_dtype == BF16 else 2.0 ** -10
    rounded_apart, ran_any = False, None
    for step in range(2 * L + 3):
        slots = slot_map(batch, num_slots, n_pad=1, device=DEV)
        q, k, v, kw = _split_step_inputs(shape, batch, act_dtype, inputs, A_log, dt_bias)
        (a_out, b_out), ran = _run_routes(monkeypatch, ((split, "split"), (combined, "combined")), q, k, v, kw, slots,
                                          profile_split=step in (0, 2 * L + 2))
        if ran is not None:
            assert ran, f"step {step}: RSSM_ROUTES=split did not launch the output-only kernel"
            ran_any = True
        live = slots >= 0
        assert torch.isnan(a_out[~live]).all(), f"step {step}: padded row written"
        assert not torch.isnan(a_out[live]).any(), f"step {step}: output not fully written"
        a, b = a_out[live].float(), b_out[live].float()
        torch.testing.assert_close(a, b, rtol=2 * ulp, atol=2 * ulp * float(b.abs().max()),
                                   msg=lambda m: f"step {step}: y of the split route: {m}")
        rounded_apart |= not torch.equal(a, b)
        for name, t in split.buffers.items():
            assert torch.equal(t, combined.buffers[name]), f"step {step}: {name} differs from the combined kernel"
    assert ran_any or rounded_apart, "no proof that the output-only kernel ran (no profiler, y bit-identical)"


@pytest.mark.parametrize("knob, value", [("RSSM_OO_HEADS", "1"), ("RSSM_OO_HEADS", "16"), ("RSSM_OO_PREFETCH", "1"),
                                         ("RSSM_OO_PREFETCH", "4"), ("RSSM_OO_TAIL_ROWS", "3"),
                                         ("RSSM_OO_TAIL_ROWS", "7")])
def test_gdn_split_route_at_other_launch_settings(monkeypatch, knob, value):
    """The same comparison at the output-only kernel's other A/B settings: one head per block, 16 (above the
    default cap; 16 value heads per key head), one and four batches of rows asked of L2 ahead (the default: none),
    the last 3 of the 7 rows in a tail launch of 4-head blocks (a programmatic dependent of the first launch), and
    all 7 rows in 4-head blocks (one launch)."""
    monkeypatch.setenv(knob, value)
    test_gdn_split_route_matches_the_combined_kernel(monkeypatch, 16, 128, 16, BF16, SPLIT_INPUTS[0])


@pytest.mark.parametrize("heads", ["4", "2"])
def test_gdn_split_route_tail_launch(monkeypatch, heads):
    """The tail launch (the last 3 of the 7 rows) behind 4-head blocks (2-head tail blocks: the default at
    b50-b131 on Qwen3.5-122B) and 2-head blocks (1-head tail blocks)."""
    monkeypatch.setenv("RSSM_OO_TAIL_ROWS", "3")
    monkeypatch.setenv("RSSM_OO_HEADS", heads)
    test_gdn_split_route_matches_the_combined_kernel(monkeypatch, 16, 128, 16, BF16, SPLIT_INPUTS[0])


def test_gdn_split_route_with_every_row_flushing(monkeypatch):
    """300 rows, every one flushing in the same step (every block of the output-only kernel rebuilds all its
    heads), then a step of reading rows; raw q, k and gates. Every pool buffer bit-identical to the combined
    kernel's, y within two bf16 roundings, every live row flushed."""
    L, batch, num_slots = 8, 300, 304
    shape = GdnLayerShape(2, 16, 128, 128)
    split = random_pool(shape, num_slots, ReplayConfig(L, F32, BF16, latency_route_bytes=0), DEV, desync=False)
    split.set_cursor(slice(None), L - 1, torch.randint(0, L, (num_slots,), device=DEV, dtype=torch.int32))
    combined = clone_pool(split)
    A_log, dt_bias = gate_params(shape, DEV)
    for step in range(2):
        slots = slot_map(batch, num_slots, n_pad=3, device=DEV)
        q, k, v, kw = _split_step_inputs(shape, batch, BF16, "raw", A_log, dt_bias)
        (a_out, b_out), ran = _run_routes(monkeypatch, ((split, "split"), (combined, "combined")), q, k, v, kw, slots,
                                          profile_split=True)
        assert ran is None or ran, f"step {step}: RSSM_ROUTES=split did not launch the output-only kernel"
        live = slots >= 0
        assert torch.isnan(a_out[~live]).all() and not torch.isnan(a_out[live]).any(), f"step {step}"
        a, b = a_out[live].float(), b_out[live].float()
        torch.testing.assert_close(a, b, rtol=2 ** -6, atol=2 ** -6 * float(b.abs().max()),
                                   msg=lambda m: f"step {step}: y of the split route: {m}")
        for name, t in split.buffers.items():
            assert torch.equal(t, combined.buffers[name]), f"step {step}: {name} differs from the combined kernel"
        if step == 0:
            assert (split.history()[slots[live].long().cpu()] == 0).all(), "every live row flushed"


@pytest.mark.parametrize("dtypes, dims, L", [((F32, BF16), (2, 8, 128, 128), 16), ((F32, F16), (1, 4, 128, 64), 5),
                                             ((F32, BF16), (2, 32, 128, 128), 32)], ids=_id)
@pytest.mark.parametrize("raw", [False, True], ids=["prepared", "raw"])
def test_gdn_split_route_matches_reference(monkeypatch, dtypes, dims, L, raw):
    """The split route forced (RSSM_ROUTES=split) through the reference test above: 3L+3 steps against the
    PyTorch reference, padding, unused slots and out's view checked."""
    monkeypatch.setenv("RSSM_ROUTES", "split")
    _check_replay_against_reference(dtypes, dims, L, raw=raw)


@pytest.mark.parametrize("L", [4, 16])
def test_gdn_split_route_matches_fp64_recurrence(monkeypatch, L):
    """fp32 checkpoint, bf16 activations, raw q, k and gates, the split route forced: outputs track the fp64
    sequential recurrence (fed the same bf16-rounded prepared q, k and v) over 3L+40 steps, and checkpoint + ring
    hold its state at the end. Tolerance: bf16's (y and the ring's u records are rounded to bf16, the
    recurrence keeps fp64)."""
    monkeypatch.setenv("RSSM_ROUTES", "split")
    shape = GdnLayerShape(2, 8, 128, 128)
    pool = random_pool(shape, 8, ReplayConfig(L, F32, BF16, latency_route_bytes=0), DEV)
    states = fold_ring(pool)
    A_log, dt_bias = gate_params(shape, DEV)
    for step in range(3 * L + 40):
        slots = slot_map(6, 8, n_pad=1, device=DEV)
        q, k, v, a, b = raw_step_inputs(shape, 6, BF16, DEV)
        y = gdn_replay_decode(pool, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots)
        qp, kp = (t.to(BF16) for t in prepare_qk(q, k))
        g, beta = gdn_gating(a, b, A_log, dt_bias)
        for row, s in enumerate(slots.tolist()):
            if s < 0:
                continue
            y64, st = gdn_step(states[s:s + 1], *(t[row:row + 1].double().cpu() for t in (qp, kp, v, g, beta)))
            states[s] = st[0]
            assert rel_err(y[row].cpu(), y64[0]) < TOL[BF16], f"step {step} row {row}"
    assert rel_err(fold_ring(pool), states) < TOL[BF16], "pool state off the recurrence"
