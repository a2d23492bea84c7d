"""GPU tests of the Mamba-2 speculative kernels (ReplaySSM verify, the snapshot path, both commits) against the
PyTorch references (ops/mamba2/spec_reference.py, ops/slots.py) and the fp64 sequential recurrence.

Tolerances (norm-relative, one table, as tests/test_mamba2_kernels.py): kernel and reference differ only in
summation order and in which side of a rounding boundary a stored value (checkpoint at flush, snapshot, y) lands,
so the error is bounded by about two ulps of the coarsest dtype the step stores; fp32 gets 2e-5 for summation order
over <= 64 replayed terms. Against the fp64 recurrence, fp32 gets 5e-5 (fp32 arithmetic over <= L replayed terms,
as the CPU reference tests). Ring records are exact copies of the inputs (x, B: bitwise; processed dt: 1e-6, the
softplus of the kernel and of torch differ in the last bit).
"""

import pytest
import torch

from conftest import poisoned
from mamba2_cases import layer_params, rel_err, slot_map
from mamba2_spec_cases import bits, spec_pool, window_inputs
from oracle import fold_ring
from spec_harness import check_snapshot_step, worst_against_truth
from trtllm_replayssm import _lib
from trtllm_replayssm.config import CURSOR_HISTORY, Mamba2LayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.mamba2 import replay_verify, snapshot_verify
from trtllm_replayssm.ops.mamba2.reference import mamba2_step
from trtllm_replayssm.ops.mamba2.spec_reference import replay_verify_reference, snapshot_verify_reference
from trtllm_replayssm.ops.slots import commit_reference, spec_commit


def _has_spec_kernels():
    return _lib.available() and _lib.has_symbol(_lib.load(), "rssm_mamba2_verify")


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_spec_kernels(), reason="kernel library built without the speculative kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: 2e-5, F16: 2e-3, BF16: 1.6e-2}
TOL_FP64 = 5e-5
EPS_ORDER = [F32, F16, BF16]
DEV = torch.device("cuda")
STEPS = 40


def tol(state_dtype, act_dtype):
    return TOL[max(state_dtype, act_dtype, key=EPS_ORDER.index)]


def _id(v):
    if isinstance(v, tuple) and all(isinstance(d, torch.dtype) for d in v):
        return f"state_{dtype_name(v[0])}-act_{dtype_name(v[1])}"
    return None


# Every T in {2, 4, 8} with L in {2T, 2T+1, 24, 64}, the (state, activation) dtype pairs fp32/bf16 in turn; then
# odd windows (masked tokens of the compiled width), fp16, head_dim 80 and 128, dstate 64 and 256.
_PAIRS = [(F32, F32), (F32, BF16), (BF16, BF16), (BF16, F32)]
CASES = [(_PAIRS[k % 4], 64, 128, T, L) for k, (T, L) in
         enumerate((T, L) for T in (2, 4, 8) for L in (2 * T, 2 * T + 1, 24, 64))]
CASES += [((F32, BF16), 80, 128, 3, 7), ((BF16, BF16), 64, 256, 5, 10), ((F32, F32), 64, 64, 7, 64),
          ((F16, BF16), 128, 128, 6, 24), ((F16, F16), 80, 256, 4, 64), ((F32, F16), 128, 64, 8, 16)]


@pytest.mark.parametrize("dtypes, P, N, T, L", CASES, ids=lambda v: _id(v))
def test_replay_verify_and_commit_follow_reference(dtypes, P, N, T, L):
    """40 steps from desynchronised cursors and origins, random accepted counts, shuffled slots, a padding row:
    y, checkpoint, ring and cursors follow the reference after every verify and every commit; checkpoints of
    non-flush rows stay bit-identical; padded rows and unused slots are untouched; every live output is written."""
    state_dtype, act_dtype = dtypes
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    pool = spec_pool(shape, 9, ReplayConfig(L, state_dtype, act_dtype), T, DEV)
    ref = pool.clone()
    A, D, dt_bias = layer_params(shape, DEV)
    batch, flushes = 8, 0
    for step in range(STEPS):
        slots = slot_map(batch, 9, n_pad=1, device=DEV)
        x, dt, B, C, z = window_inputs(shape, batch, T, act_dtype, DEV, with_z=step % 3 != 2)
        before = pool.clone()
        out = poisoned(x.shape, act_dtype, DEV)
        replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        y_ref = replay_verify_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
        torch.cuda.synchronize()
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
        assert rel_err(out[live], y_ref[live]) < tol(*dtypes), f"step {step}: y off the reference"
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ after verify"
        assert torch.equal(pool.ring_x, ref.ring_x) and torch.equal(pool.ring_B, ref.ring_B), \
            f"step {step}: ring records differ"
        assert rel_err(pool.ring_dt, ref.ring_dt) < 1e-6, f"step {step}: ring dt differs"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(*dtypes), f"step {step}: checkpoint differs"
        used = set(slots[live].tolist())
        hist_before = before.history()
        for s in range(9):
            if s not in used:
                for name, t in pool.buffers.items():
                    assert torch.equal(t[s], before.buffers[name][s]), f"step {step}: unused slot {s} {name}"
            elif int(hist_before[s]) + 2 * T <= L:
                assert torch.equal(pool.checkpoint[s], before.checkpoint[s]), \
                    f"step {step}: checkpoint of non-flush slot {s} changed"
            else:
                flushes += 1
        accepted = torch.randint(1, T + 1, (batch,), dtype=torch.int32, device=DEV)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        commit_reference(ref, accepted, slot_idx=slots)
        assert torch.equal(pool.cursor, ref.cursor), f"step {step}: cursors differ after commit"
    assert flushes >= 1, f"no flush in {STEPS} steps: the case does not exercise the fold"


def _run_against_recurrence(T, L, steps=STEPS, wrong_commit=False):
    """Kernel verify + kernel commit (fp32 state and activations) against the fp64 sequential truth and against
    the snapshot kernels run beside them. Returns (worst replay error vs truth, worst snapshot error vs truth,
    worst replay-vs-snapshot difference). wrong_commit: the replay pool commits one token too many where a < T."""
    shape = Mamba2LayerShape(nheads=16, head_dim=64, dstate=128, ngroups=4)
    pool = spec_pool(shape, 8, ReplayConfig(L, F32, F32), T, DEV)
    A, D, dt_bias = layer_params(shape, DEV)
    truth = fold_ring(pool, A)  # fp64 [slots, H, P, N] on the CPU: the state each slot's history has reached
    A64, D64, bias64 = A.double().cpu(), D.double().cpu(), dt_bias.double().cpu()

    def truth_step(st, rows, b, i):
        x, dt, B, C, z = (t[b:b + 1, i] for t in rows)
        return mamba2_step(st, x, dt, A64, B, C, D64, z, bias64)

    return worst_against_truth(
        pool, truth, T, steps, lambda b: window_inputs(shape, b, T, F32, DEV),
        lambda p, inp, slots: replay_verify(p, *inp[:4], A, D=D, z=inp[4], dt_bias=dt_bias, slot_idx=slots),
        lambda st, snaps, inp, slots: snapshot_verify(st, snaps, *inp[:4], A, D=D, z=inp[4], dt_bias=dt_bias,
                                                      slot_idx=slots),
        truth_step, DEV, wrong_commit)


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


@pytest.mark.parametrize("dtypes", [(F32, F32), (F32, BF16), (BF16, BF16), (F16, F32)], ids=lambda v: _id(v))
@pytest.mark.parametrize("P, N, T", [(64, 128, 8), (80, 64, 3), (128, 256, 4)])
def test_snapshot_verify_and_commit_follow_reference(dtypes, P, N, T):
    """The snapshot kernel writes the state after every token of live slots (and nothing else), leaves the
    state alone, and outputs follow the reference; its commit copies exactly the accepted snapshot."""
    state_dtype, act_dtype = dtypes
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=4)
    state = torch.randn(7, 8, P, N, device=DEV).to(state_dtype)
    snaps = poisoned((7, T, 8, P, N), state_dtype, DEV)
    ref_state, ref_snaps = state.clone(), snaps.clone()
    A, D, dt_bias = layer_params(shape, DEV, with_D=P != 80, with_bias=N != 64)
    for step in range(4):
        slots = slot_map(5, 7, n_pad=2, device=DEV)
        x, dt, B, C, z = window_inputs(shape, 5, T, act_dtype, DEV, with_z=step != 1)
        before_state, before_snaps = state.clone(), snaps.clone()
        out = poisoned(x.shape, act_dtype, DEV)
        snapshot_verify(state, snaps, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        y_ref = snapshot_verify_reference(ref_state, ref_snaps, x, dt, B, C, A, D, z, dt_bias, True, slots)
        check_snapshot_step(step, state, snaps, ref_state, ref_snaps, before_state, before_snaps, slots, out, y_ref,
                            tol(*dtypes))


@pytest.mark.parametrize("T, L", [(2, 4), (4, 11), (8, 64)])
def test_commit_kernel_matches_reference_and_skips_padding(T, L):
    shape = Mamba2LayerShape(nheads=12, head_dim=64, dstate=64, ngroups=3)
    pool = spec_pool(shape, 10, ReplayConfig(L, F32, BF16), T, DEV)
    ref = pool.clone()
    for _ in range(5):
        # Histories 0 .. L-2T, as a verify leaves them: any count 1..T then stays within the ring.
        pool.set_cursor(slice(None), torch.randint(0, L - 2 * T + 1, (10,), dtype=torch.int32, device=DEV))
        ref.cursor.copy_(pool.cursor)
        slots = slot_map(7, 10, n_pad=2, device=DEV)
        accepted = torch.randint(1, T + 1, (7,), dtype=torch.int32, device=DEV)
        before = pool.clone()
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        commit_reference(ref, accepted, slot_idx=slots)
        assert torch.equal(pool.cursor, ref.cursor)
        unused = [s for s in range(10) if s not in set(slots.tolist())]
        assert torch.equal(pool.cursor[unused], before.cursor[unused]), "a padding row or unused slot moved"


def test_commit_kernel_clamps_out_of_range_counts():
    """Counts outside 1..T are clamped to 0..T and the history to L - T: a bad count never overflows the ring."""
    T, L = 4, 10
    shape = Mamba2LayerShape(nheads=4, head_dim=64, dstate=64, ngroups=1)
    pool = spec_pool(shape, 6, ReplayConfig(L, F32, F32), T, DEV)
    accepted = torch.tensor([0, -7, T + 5, 1000, 3, 2], dtype=torch.int32, device=DEV)
    h = pool.history().clone()
    spec_commit(pool, accepted, window=T)
    expect = torch.minimum(h + accepted.cpu().clamp(0, T), torch.tensor(L - T))
    assert torch.equal(pool.history(), expect.to(torch.int32))
    assert bool((pool.cursor[..., CURSOR_HISTORY] == pool.cursor[:, :1, :1, CURSOR_HISTORY]).all())


def test_verify_and_commit_captured_in_cuda_graph():
    """One speculative step (verify + commit) captured once and replayed 3L times with new inputs and new accepted
    counts written into the captured tensors between replays (no host sync) follows the reference."""
    T, L = 4, 12
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=128, ngroups=2)
    pool = spec_pool(shape, 6, ReplayConfig(L, F32, BF16), T, DEV)
    ref = pool.clone()
    A, D, dt_bias = layer_params(shape, DEV)
    slots = slot_map(5, 6, n_pad=1, device=DEV)
    static = list(window_inputs(shape, 5, T, BF16, DEV))
    accepted = torch.ones(5, dtype=torch.int32, device=DEV)
    out = torch.empty_like(static[0])

    def step(p):
        replay_verify(p, *static[:4], A, D=D, z=static[4], dt_bias=dt_bias, slot_idx=slots, out=out)
        spec_commit(p, accepted, slot_idx=slots, window=T)

    step(pool.clone())  # warm-up on a throwaway pool (capture needs the library loaded)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(pool)
    for replay in range(3 * L):
        for dst, src in zip(static, window_inputs(shape, 5, T, BF16, DEV)):
            dst.copy_(src)
        accepted.copy_(torch.randint(1, T + 1, (5,), dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        y_ref = replay_verify_reference(ref, *static[:4], A, D, static[4], dt_bias, True, slots)
        commit_reference(ref, accepted, slot_idx=slots)
        live = slots >= 0
        assert rel_err(out[live], y_ref[live]) < tol(F32, BF16), f"replay {replay}"
        assert torch.equal(pool.cursor, ref.cursor), f"replay {replay}: cursors"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(F32, BF16), f"replay {replay}: checkpoint"


@pytest.mark.parametrize("mutate, match", [
    (dict(L=7), "buffer_len=7 must be >= 2T=8"),
    (dict(T=9, L=24), r"T=9 tokens per row .* out of range \(2..8\)"),
    (dict(T=1), r"T=1 tokens per row"),
    (dict(x_P=32), r"x has shape \(3, 4, 8, 32\)"),
    (dict(B_T=3), r"B has shape \(3, 3, 2, 64\)"),
])
def test_verify_rejects_bad_input_on_gpu_and_touches_nothing(mutate, match):
    T, L = mutate.get("T", 4), mutate.get("L", 12)
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=64, ngroups=2)
    pool = spec_pool(shape, 4, ReplayConfig(L, F32, BF16), min(T, L // 2), DEV)
    A, D, dt_bias = layer_params(shape, DEV)
    x, dt, B, C, z = window_inputs(shape, 3, T, BF16, DEV)
    if "x_P" in mutate:
        x = x[..., :mutate["x_P"]]
    if "B_T" in mutate:
        B = B[:, :mutate["B_T"]]
    before = pool.clone()
    out = poisoned((3, T, 8, 64), BF16, DEV)
    with pytest.raises(ValueError, match=match):
        replay_verify(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, out=out)
    torch.cuda.synchronize()
    for name, t in pool.buffers.items():
        assert torch.equal(t, before.buffers[name]), f"{name} changed on a rejected call"
    assert torch.isnan(out).all(), "out written on a rejected call"


def test_whole_speculative_step_with_conv1d_in_one_cuda_graph():
    """A whole Mamba-2 speculative step captured once: conv1d verify of the T tokens' xBC inputs, the SSM verify
    on its output (split into x, B, C as the mixer does), then both commits by the accepted counts. Replayed 3L
    times with new inputs and new accepted counts written into the captured tensors between replays (no host
    sync). The references run the same sequence; the SSM reference consumes the kernels' conv output, so each
    stage is compared with its own tolerance (conv output: two bf16 ulps; windows and cursors: exact)."""
    from trtllm_replayssm.ops.conv1d import (conv1d_commit, conv1d_commit_reference, conv1d_verify,
                                             conv1d_verify_reference)

    T, L, k, batch = 4, 12, 4, 5
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=64, ngroups=2)
    H, P, N, G = shape.nheads, shape.head_dim, shape.dstate, shape.ngroups
    chans = H * P + 2 * G * N
    pool = spec_pool(shape, 6, ReplayConfig(L, F32, BF16), T, DEV)
    ref = pool.clone()
    windows = torch.randn(6, chans, k - 1 + T, device=DEV).to(BF16)
    ref_windows = windows.clone()
    weight, bias = torch.randn(chans, k, device=DEV) * 0.5, torch.randn(chans, device=DEV) * 0.1
    A, D, dt_bias = layer_params(shape, DEV)
    slots = slot_map(batch, 6, n_pad=1, device=DEV)
    xbc = torch.randn(batch, T, chans, device=DEV).to(BF16)
    _, dt, _, _, z = window_inputs(shape, batch, T, BF16, DEV)
    accepted = torch.ones(batch, dtype=torch.int32, device=DEV)
    conv_out = torch.empty_like(xbc)
    out = torch.empty(batch, T, H, P, device=DEV, dtype=BF16)

    def split(y):
        x = y[..., :H * P].reshape(batch, T, H, P).contiguous()
        B = y[..., H * P:H * P + G * N].reshape(batch, T, G, N).contiguous()
        C = y[..., H * P + G * N:].reshape(batch, T, G, N).contiguous()
        return x, B, C

    def step(p, w):
        conv1d_verify(w, xbc, weight, bias, True, slot_idx=slots, out=conv_out)
        x, B, C = split(conv_out)
        replay_verify(p, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        spec_commit(p, accepted, slot_idx=slots, window=T)
        conv1d_commit(w, accepted, k, slot_idx=slots)

    step(pool.clone(), windows.clone())  # warm-up on throwaway state (capture needs the library loaded)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(pool, windows)
    live = slots >= 0
    for replay in range(3 * L):
        xbc.copy_(torch.randn(batch, T, chans, device=DEV).to(BF16))
        dt.copy_((torch.randn(batch, T, H, device=DEV) * 0.5).to(BF16))
        z.copy_(torch.randn(batch, T, H, P, device=DEV).to(BF16))
        accepted.copy_(torch.randint(1, T + 1, (batch,), dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        conv_ref = conv1d_verify_reference(ref_windows, xbc, weight, bias, True, slots)
        assert rel_err(conv_out[live], conv_ref[live]) < 1.6e-2, f"replay {replay}: conv output"
        x, B, C = split(conv_out)
        y_ref = replay_verify_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
        commit_reference(ref, accepted, slot_idx=slots)
        conv1d_commit_reference(ref_windows, accepted, k, slot_idx=slots)
        assert rel_err(out[live], y_ref[live]) < tol(F32, BF16), f"replay {replay}: y"
        assert torch.equal(pool.cursor, ref.cursor), f"replay {replay}: cursors"
        assert torch.equal(bits(windows), bits(ref_windows)), f"replay {replay}: conv windows"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(F32, BF16), f"replay {replay}: checkpoint"
