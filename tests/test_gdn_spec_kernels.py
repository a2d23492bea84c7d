"""GPU tests of the Gated DeltaNet speculative kernels (ReplaySSM verify and the snapshot path, with the family
independent commits) against the PyTorch references (ops/gdn/spec_reference.py, ops/slots.py) and the fp64
sequential recurrence.

Tolerances (norm-relative, one table, as tests/test_gdn_kernels.py): kernel and reference differ only in summation
order (e^c (S0 k) against S0 (e^c k), history and window terms summed in another order, the fold as one rank-h
update instead of h sequential steps) and in which side of a rounding boundary a stored value (checkpoint at
flush, u record, snapshot, y) lands, so the error is bounded by about two ulps of the coarsest dtype the step
stores; fp32 gets 2e-5 for summation order over <= 64 replayed terms. Against the fp64 recurrence, fp32 gets 5e-5
(fp32 arithmetic over <= L replayed terms, as the CPU reference tests). Ring k and g records are exact copies of
the inputs (bitwise).

With 16-bit activations at K = 128 the kernel takes S0 k_i and S0 q_i on tensor cores, rounding an fp32 state to
tf32 (unit roundoff 2^-11; a 16-bit state and the 16-bit k_i, q_i are exact in tf32): one more rounding, of at
most the activation dtype's size, before u and y are rounded to that dtype. The tolerances below stay as they are;
tests/test_gdn_verify_tf32.py holds that path to the bound derived from the tf32 rounding (2 u_tf32 + 2 u_act).
"""

import pytest
import torch

from conftest import poisoned
from gdn_cases import fold_ring, gate_params
from gdn_spec_cases import raw_window_inputs, spec_pool, window_inputs
from mamba2_cases import rel_err, slot_map
from mamba2_spec_cases import bits
from spec_harness import check_snapshot_step, worst_against_truth
from trtllm_replayssm import _lib
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.gdn import replay_verify, snapshot_verify
from trtllm_replayssm.ops.gdn.reference import gdn_gating, gdn_step, prepare_qk
from trtllm_replayssm.ops.gdn.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import commit_reference, spec_commit
from trtllm_replayssm.pool import GdnStatePool


def _has_spec_kernels():
    lib_ok = _lib.available() and _lib.has_symbol(_lib.load(), "rssm_gdn_verify")
    return lib_ok and _lib.has_symbol(_lib.load(), "rssm_spec_commit")


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_spec_kernels(), reason="kernel library built without the GDN verify kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: 2e-5, F16: 2e-3, BF16: 1.6e-2}
TOL_FP64 = 5e-5
EPS_ORDER = [F32, F16, BF16]
DEV = torch.device("cuda")
STEPS = 40
PREPARED = dict(use_qk_l2norm=False, scale=1.0)  # the inputs are prepared already: the op passes them through


def tol(state_dtype, act_dtype):
    return TOL[max(state_dtype, act_dtype, key=EPS_ORDER.index)]


def _id(v):
    if isinstance(v, tuple) and len(v) == 2 and all(isinstance(d, torch.dtype) for d in v):
        return f"state_{dtype_name(v[0])}-act_{dtype_name(v[1])}"
    if isinstance(v, tuple) and len(v) == 4:
        return "H{}-HV{}-K{}-V{}".format(*v)
    return None


# Every T in {2, 4, 8} with L in {2T, 2T+1, 24, 64}, the (state, activation) dtype pairs in turn, on the model's
# head shape (K = V = 128); then odd windows (masked tokens of the compiled width), fp16, and K, V in 64 / 256.
_PAIRS = [(F32, F32), (F32, BF16), (BF16, BF16), (BF16, F32)]
BASE = (2, 4, 128, 128)  # H, HV, K, V
CASES = [(_PAIRS[n % 4], BASE, T, L) for n, (T, L) in
         enumerate((T, L) for T in (2, 4, 8) for L in (2 * T, 2 * T + 1, 24, 64))]
CASES += [((F32, BF16), (1, 2, 64, 64), 3, 7), ((BF16, BF16), (2, 8, 256, 128), 5, 10),
          ((F32, F32), (2, 4, 64, 256), 7, 64), ((F16, BF16), (1, 4, 256, 64), 6, 24),
          ((F16, F16), (2, 4, 128, 256), 4, 40), ((F32, F16), (2, 2, 256, 256), 8, 16)]
# The tensor-core path with an fp32 state (the one that rounds it to tf32) at the tightest 16-bit tolerance, and
# with masked tokens of a compiled width.
CASES += [((F32, F16), BASE, 8, 24), ((F32, BF16), BASE, 5, 11)]


@pytest.mark.parametrize("dtypes, dims, T, L", CASES, ids=_id)
def test_replay_verify_and_commit_follow_reference(dtypes, dims, T, L):
    """40 steps from desynchronised cursors and origins, random accepted counts, shuffled slots, a padding row,
    fresh inputs each step: y, checkpoint, ring and cursors follow the reference after every verify and every
    commit; checkpoints of non-flush rows stay bit-identical; padded rows and unused slots are untouched; every
    live output is written."""
    state_dtype, act_dtype = dtypes
    shape = GdnLayerShape(*dims)
    pool = spec_pool(shape, 9, ReplayConfig(L, state_dtype, act_dtype), T, DEV)
    ref = pool.clone()
    batch, flushes = 6, 0
    for step in range(STEPS):
        slots = slot_map(batch, 9, n_pad=1, device=DEV)
        q, k, v, g, beta = window_inputs(shape, batch, T, act_dtype, DEV)
        before = pool.clone()
        out = poisoned(v.shape, act_dtype, DEV)
        replay_verify(pool, q, k, v, g, beta, slot_idx=slots, out=out, **PREPARED)
        y_ref = replay_verify_reference(ref, q, k, v, g, beta, slots)
        torch.cuda.synchronize()
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
        assert rel_err(out[live], y_ref[live]) < tol(*dtypes), f"step {step}: y off the reference"
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ after verify"
        assert torch.equal(pool.ring_k, ref.ring_k), f"step {step}: ring k records differ"
        assert torch.equal(pool.ring_g, ref.ring_g), f"step {step}: ring g records differ"
        assert rel_err(pool.ring_u, ref.ring_u) < tol(*dtypes), f"step {step}: ring u records differ"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(*dtypes), f"step {step}: checkpoint differs"
        used = set(slots[live].tolist())
        hist_before = before.history()
        for s in range(9):
            if s not in used:
                for name, t in pool.buffers.items():
                    assert torch.equal(t[s], before.buffers[name][s]), f"step {step}: unused slot {s} {name}"
            elif int(hist_before[s]) + 2 * T <= L or int(hist_before[s]) == 0:
                assert torch.equal(bits(pool.checkpoint[s]), bits(before.checkpoint[s])), \
                    f"step {step}: checkpoint of non-flush slot {s} changed"
            else:
                flushes += 1
        accepted = torch.randint(1, T + 1, (batch,), dtype=torch.int32, device=DEV)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        commit_reference(ref, accepted, slot_idx=slots)
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ after commit"
    assert flushes >= 3, f"only {flushes} flushes in {STEPS} steps: the case does not exercise the fold"


def _run_against_recurrence(T, L, steps=STEPS, wrong_commit=False):
    """Kernel verify + kernel commit (fp32 state and activations) against the fp64 sequential truth and against
    the snapshot kernels run beside them. Returns the worst errors: replay and snapshot against the truth, and
    replay against snapshot. wrong_commit: the replay pool commits one token too many where a < T."""
    shape = GdnLayerShape(2, 8, 128, 128)
    pool = spec_pool(shape, 8, ReplayConfig(L, F32, F32), T, DEV)
    truth = fold_ring(pool)  # fp64 [slots, HV, V, K] on the CPU: the state each slot's history has reached
    return worst_against_truth(
        pool, truth, T, steps, lambda b: window_inputs(shape, b, T, F32, DEV),
        lambda p, inputs, slots: replay_verify(p, *inputs, slot_idx=slots, **PREPARED),
        lambda st, snaps, inputs, slots: snapshot_verify(st, snaps, *inputs, slot_idx=slots, **PREPARED),
        lambda st, rows, b, i: gdn_step(st, *(t[b:b + 1, i] for t in rows)), DEV, wrong_commit)


@pytest.mark.parametrize("T, L", [(2, 4), (4, 12), (8, 24), (8, 64)])
def test_replay_verify_matches_fp64_recurrence_and_snapshot_path(T, L):
    """Every draft output of 40 steps of random accepted counts tracks the fp64 sequential recurrence (rollback
    by cursor move), and so does the snapshot path (rollback by restoring a stored state)."""
    worst = _run_against_recurrence(T, L)
    assert worst["replay"] < TOL_FP64, worst
    assert worst["snapshot"] < TOL_FP64, worst
    assert worst["paths"] < 2 * TOL_FP64, worst


def test_off_by_one_commit_fails_against_recurrence():
    """A commit that keeps one rejected draft (a + 1 where a < T) must break the comparison with the truth."""
    assert _run_against_recurrence(4, 12, steps=12)["replay"] < TOL_FP64
    assert _run_against_recurrence(4, 12, steps=12, wrong_commit=True)["replay"] > 1e-3


def test_raw_gates_and_qk_preparation_match_prepared_inputs():
    """The op with raw q, k, gate projections (L2 norm, scale and gating in PyTorch) equals, bit for bit, the op
    given the inputs it prepares; both pools end identical."""
    T, L = 4, 12
    shape = GdnLayerShape(*BASE)
    pool = spec_pool(shape, 6, ReplayConfig(L, F32, BF16), T, DEV)
    other = pool.clone()
    A_log, dt_bias = gate_params(shape, DEV)
    for step in range(6):
        slots = slot_map(5, 6, n_pad=1, device=DEV)
        q, k, v, a, b = raw_window_inputs(shape, 5, T, BF16, DEV)
        y1 = replay_verify(pool, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots)
        qp, kp = prepare_qk(q, k)
        g, beta = gdn_gating(a, b, A_log, dt_bias)
        y2 = replay_verify(other, qp.to(BF16), kp.to(BF16), v, g, beta, slot_idx=slots, **PREPARED)
        live = slots >= 0
        assert torch.equal(y1[live], y2[live]), f"step {step}: y"
        for name, t in pool.buffers.items():
            assert torch.equal(t, other.buffers[name]), f"step {step}: {name}"
        accepted = torch.randint(1, T + 1, (5,), dtype=torch.int32, device=DEV)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        spec_commit(other, accepted, slot_idx=slots, window=T)


SNAP_CASES = [((F32, F32), BASE, 8), ((F32, BF16), BASE, 2), ((BF16, BF16), (2, 8, 64, 128), 5),
              ((F16, F32), (1, 2, 256, 64), 4), ((BF16, F16), (2, 4, 128, 256), 3), ((F32, BF16), (4, 4, 64, 64), 8)]


@pytest.mark.parametrize("dtypes, dims, T", SNAP_CASES, ids=_id)
def test_snapshot_verify_and_commit_follow_reference(dtypes, dims, T):
    """The snapshot kernel writes the state after every token of live slots (and nothing else), leaves the state
    alone, and outputs follow the reference; its commit copies exactly the accepted snapshot."""
    state_dtype, act_dtype = dtypes
    shape = GdnLayerShape(*dims)
    HV, V, K = shape.num_v_heads, shape.head_v_dim, shape.head_k_dim
    state = (torch.randn(7, HV, V, K, device=DEV) * 0.5).to(state_dtype)
    snaps = poisoned((7, T, HV, V, K), state_dtype, DEV)
    ref_state, ref_snaps = state.clone(), snaps.clone()
    for step in range(4):
        slots = slot_map(5, 7, n_pad=2, device=DEV)
        q, k, v, g, beta = window_inputs(shape, 5, T, act_dtype, DEV)
        before_state, before_snaps = state.clone(), snaps.clone()
        out = poisoned(v.shape, act_dtype, DEV)
        snapshot_verify(state, snaps, q, k, v, g, beta, slot_idx=slots, out=out, **PREPARED)
        y_ref = snapshot_verify_reference(ref_state, ref_snaps, q, k, v, g, beta, slots)
        check_snapshot_step(step, state, snaps, ref_state, ref_snaps, before_state, before_snaps, slots, out, y_ref,
                            tol(*dtypes))


@pytest.mark.parametrize("replay", [True, False], ids=["replay", "snapshot"])
def test_padding_and_out_of_range_rows_touch_nothing(replay):
    """Rows with the pad id or a slot index outside [0, num_slots) are skipped: no output, no pool write."""
    T, L = 4, 9
    shape = GdnLayerShape(*BASE)
    pool = spec_pool(shape, 6, ReplayConfig(L, F32, BF16), T, DEV)
    pool.set_cursor(slice(None), L - T)  # every live row flushes: the most a verify writes
    slots = torch.tensor([3, -1, 6, 0, 40, -5], dtype=torch.int32, device=DEV)
    q, k, v, g, beta = window_inputs(shape, 6, T, BF16, DEV)
    before = pool.clone()
    snaps = poisoned((6, T, *pool.checkpoint.shape[1:]), F32, DEV)
    out = poisoned(tuple(v.shape), BF16, DEV)
    if replay:
        replay_verify(pool, q, k, v, g, beta, slot_idx=slots, out=out, **PREPARED)
    else:
        snapshot_verify(pool.checkpoint, snaps, q, k, v, g, beta, slot_idx=slots, out=out, **PREPARED)
    torch.cuda.synchronize()
    assert not torch.isnan(out[[0, 3]]).any(), "live rows not written"
    assert torch.isnan(out[[1, 2, 4, 5]]).all(), "skipped rows written"
    for name, t in pool.buffers.items():
        assert torch.equal(t[[1, 2, 4, 5]], before.buffers[name][[1, 2, 4, 5]]), f"{name} of an unused slot changed"
    if replay:
        assert not torch.equal(pool.cursor[[0, 3]], before.cursor[[0, 3]]), "live rows did not flush"
    else:
        assert torch.isnan(snaps[[1, 2, 4, 5]]).all() and not torch.isnan(snaps[[0, 3]]).any(), "snapshot rows"


@pytest.mark.parametrize("replay", [True, False], ids=["replay", "snapshot"])
def test_empty_batch_launches_nothing(replay):
    shape = GdnLayerShape(*BASE)
    pool = spec_pool(shape, 3, ReplayConfig(8, F32, BF16), 4, DEV)
    before = pool.clone()
    q, k, v, g, beta = window_inputs(shape, 0, 4, BF16, DEV)
    if replay:
        y = replay_verify(pool, q, k, v, g, beta, **PREPARED)
    else:
        y = snapshot_verify(pool.checkpoint, torch.empty(3, 4, 4, 128, 128, device=DEV), q, k, v, g, beta, **PREPARED)
    torch.cuda.synchronize()
    assert y.shape == (0, 4, 4, 128)
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), name


def test_verify_and_commit_captured_in_cuda_graph():
    """One speculative step (gating and q/k preparation, verify, commit) captured once and replayed 3L times with
    new inputs and new accepted counts written into the captured tensors between replays (no host sync): equal
    bit for bit to the same steps run eagerly, and within tolerance of the reference."""
    T, L = 4, 12
    shape = GdnLayerShape(*BASE)
    pool = spec_pool(shape, 6, ReplayConfig(L, F32, BF16), T, DEV)
    eager, ref = pool.clone(), pool.clone()
    A_log, dt_bias = gate_params(shape, DEV)
    slots = slot_map(5, 6, n_pad=1, device=DEV)
    static = list(raw_window_inputs(shape, 5, T, BF16, DEV))
    accepted = torch.ones(5, dtype=torch.int32, device=DEV)
    out = torch.empty_like(static[2])

    def step(p, o=None):
        q, k, v, a, b = static
        y = replay_verify(p, q, k, v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, slot_idx=slots, out=o)
        spec_commit(p, accepted, slot_idx=slots, window=T)
        return y

    step(pool.clone(), out)  # warm-up on a throwaway pool (capture needs the library loaded)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(pool, out)
    live = slots >= 0
    for replay in range(3 * L):
        for dst, src in zip(static, raw_window_inputs(shape, 5, T, BF16, DEV)):
            dst.copy_(src)
        accepted.copy_(torch.randint(1, T + 1, (5,), dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        y_eager = step(eager)
        q, k, v, a, b = static
        qp, kp = prepare_qk(q, k)
        g, beta = gdn_gating(a, b, A_log, dt_bias)
        y_ref = replay_verify_reference(ref, qp.to(BF16), kp.to(BF16), v, g, beta, slots)
        commit_reference(ref, accepted, slot_idx=slots)
        assert torch.equal(out[live], y_eager[live]), f"replay {replay}: graph and eager outputs differ"
        for name, t in pool.buffers.items():
            assert torch.equal(t, eager.buffers[name]), f"replay {replay}: graph and eager {name} differ"
        assert rel_err(out[live], y_ref[live]) < tol(F32, BF16), f"replay {replay}"
        assert torch.equal(pool.cursor, ref.cursor), f"replay {replay}: cursors"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(F32, BF16), f"replay {replay}: checkpoint"


# ---- Refusals: clear errors before anything is written ----

def _strided_last(t):
    """Same shape, stride 2 in the last dimension."""
    return torch.stack([t, t], dim=-1)[..., 0]


@pytest.mark.parametrize("cfg, mutate, error, match", [
    (dict(L=7), None, ValueError, "buffer_len=7 must be >= 2T=8"),
    (dict(T=9, L=24), None, ValueError, r"T=9 tokens per row \(v.shape\[1\]\) is out of range \(2..8\)"),
    (dict(kda=True), None, NotImplementedError, "KDA verify kernels are not implemented yet; pass CPU tensors"),
    (dict(read_format="nvfp4"), None, NotImplementedError, "read_format=nvfp4: the GDN verify kernel reads the copy"),
    ({}, lambda d: d.update(v=_strided_last(d["v"])), ValueError, "v must be contiguous in its last dimension"),
    ({}, lambda d: d.update(g=_strided_last(d["g"])), ValueError, "g must be contiguous in its last dimension"),
    ({}, lambda d: d.update(v=torch.randn(3 * 4 * 4 * 128 + 1, device=DEV).to(BF16)[1:].view(3, 4, 4, 128)),
     ValueError, "v rows must be 16-byte aligned"),
    ({}, lambda d: d.update(k=d["k"][:, :3]), ValueError, r"k has shape \(3, 3, 2, 128\), expected \(3, 4, 2, 128\)"),
    ({}, lambda d: d.update(beta=d["beta"].cpu()), ValueError, r"beta is on cpu, expected cuda:\d"),
    ({}, lambda d: d.update(out=torch.empty(3, 4, 4, 128, device=DEV)), ValueError, "out must have v's shape"),
], ids=["L_below_2T", "T_9", "kda", "read_copy", "v_strided", "g_strided", "v_misaligned", "k_short_window",
        "beta_on_cpu", "out_dtype"])
def test_verify_refuses_bad_input_on_gpu_and_touches_nothing(cfg, mutate, error, match):
    T, L = cfg.pop("T", 4), cfg.pop("L", 12)
    shape = GdnLayerShape(*BASE, per_channel_decay=cfg.pop("kda", False))
    pool = GdnStatePool(shape, 4, ReplayConfig(L, F32, BF16, **cfg), device=DEV)
    pool.checkpoint.normal_()
    q, k, v, g, beta = window_inputs(GdnLayerShape(*BASE), 3, T, BF16, DEV)
    if shape.per_channel_decay:
        g = g[..., None].expand(3, T, 4, 128).contiguous()
    d = dict(q=q, k=k, v=v, g=g, beta=beta, out=poisoned((3, T, 4, 128), BF16, DEV))
    if mutate:
        mutate(d)
    before = pool.clone()
    with pytest.raises(error, match=match):
        replay_verify(pool, d.pop("q"), d.pop("k"), d.pop("v"), **d, **PREPARED)
    torch.cuda.synchronize()
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), f"{name} changed on a refused call"
