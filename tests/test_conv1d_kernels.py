"""GPU tests of the causal conv1d kernels (update, speculative verify, commit) against the PyTorch references.

Updates run one of two kernels (plugins/include/replayssm/conv1d/conv1d.cuh): the register kernel when the channel
count is a multiple of 8, windows are packed and every base and row stride is 16-byte aligned, the staged-tile
kernel otherwise. The update tests alternate aligned steps (register kernel when C % 8 == 0) with unaligned ones
(staged), a test checks which kernel each layout gets, and one that the two give the same bits.

Tolerances (one table): windows and states are copies and one rounding of x to the state dtype, done the same
way by kernel and reference, so they must be bit-identical. Outputs differ only in fp32 summation order (fma
against multiply-then-sum over k <= 4 terms, fast exp in SiLU): a few fp32 ulps of terms of magnitude ~3, covered
by atol 1e-5, which can move the final rounding to the activation dtype by one ulp (rtol: one ulp of a value in
[1, 2) — 2^-7 bf16, 2^-10 fp16; fp32 gets 1e-5 for the summation order alone).
"""

import pytest
import torch

from conftest import poisoned
from mamba2_cases import slot_map
from trtllm_replayssm import _lib
from trtllm_replayssm.config import dtype_name
from trtllm_replayssm.ops.conv1d import (conv1d_commit, conv1d_commit_reference, conv1d_update,
                                         conv1d_update_reference, conv1d_verify, conv1d_verify_reference)


def _has_conv1d_kernels():
    return _lib.available() and _lib.has_symbol(_lib.load(), "rssm_conv1d")


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_conv1d_kernels(), reason="kernel library built without the conv1d kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: dict(rtol=1e-5, atol=1e-5), F16: dict(rtol=2 ** -10, atol=1e-5), BF16: dict(rtol=2 ** -7, atol=1e-5)}
DEV = torch.device("cuda")
SLOTS, BATCH = 9, 6

# (state dtype, x / y dtype, weight / bias dtype): every state dtype against every activation dtype, weights in
# fp32 and in the activation dtype.
DTYPES = [(s, a, w) for s in (F32, F16, BF16) for a in (F32, F16, BF16) for w in dict.fromkeys((F32, a))]


def _id(v):
    if isinstance(v, tuple) and all(isinstance(d, torch.dtype) for d in v):
        return "state_{}-act_{}-w_{}".format(*map(dtype_name, v))
    return None


def _layer(C, k, wdtype, with_bias=True):
    weight = (torch.randn(C, k, device=DEV) * 0.6).to(wdtype)
    bias = (torch.randn(C, device=DEV) * 0.2).to(wdtype) if with_bias else None
    return weight, bias


def _rows(shape, dtype, extra=0, offset=0, poison=False):
    """(view, backing buffer): a tensor of `shape` whose rows sit `extra` elements apart beyond their size and
    start `offset` elements past the buffer's start (a slice of a wider projection output: with offset 1 no row
    is 16-byte aligned). poison: the whole buffer is NaN."""
    *lead, C = shape
    full = (*lead, C + extra + offset)
    big = poisoned(full, dtype, DEV) if poison else torch.randn(full, device=DEV).to(dtype)
    return big[..., offset:offset + C], big


def _check_y(out, ref, live, dtype, what, out_buffer=None):
    assert not torch.isnan(out[live]).any(), f"{what}: output not fully written"
    assert torch.isnan(out[~live]).all(), f"{what}: padding row written"
    if out_buffer is not None:
        outside = torch.ones_like(out_buffer, dtype=torch.bool)
        start = out.storage_offset() - out_buffer.storage_offset()  # out is out_buffer[..., start:start + C]
        outside[..., start:start + out.shape[-1]] = False
        assert torch.isnan(out_buffer[outside]).all(), f"{what}: written outside out's view"
    torch.testing.assert_close(out[live], ref[live], **TOL[dtype], msg=lambda m: f"{what}: y off the reference\n{m}")


def _check_untouched(pool, before, slots, what):
    used = set(slots[slots >= 0].tolist())
    for s in range(pool.shape[0]):
        if s not in used:
            assert torch.equal(pool[s], before[s]), f"{what}: unused slot {s} changed"


# ---- update (standard decode) ----

# C % 8 == 0 (256, 136: a partial last block of either kernel, 1000, 4120): even steps take the register kernel;
# 37, 129: the staged kernel on every step.
UPDATE_CASES = ([(d, 4, 256, True, True) for d in DTYPES]
                + [(d, k, 136, k == 2, k == 3) for d in DTYPES for k in (2, 3)]
                + [((BF16, BF16, BF16), 2, 1000, True, False), ((F32, BF16, F32), 3, 4120, False, True),
                   ((F16, F16, F32), 4, 37, True, True), ((BF16, F32, F32), 3, 129, False, False)])


@pytest.mark.parametrize("dtypes, k, C, activation, with_bias", UPDATE_CASES,
                         ids=[f"{_id(d)}-k{k}-C{C}-{'silu' if a else 'linear'}-{'bias' if b else 'nobias'}"
                              for d, k, C, a, b in UPDATE_CASES])
def test_update_matches_reference_over_20_steps(dtypes, k, C, activation, with_bias):
    """20 steps, fresh inputs, shuffled slots with a padding row, a pool larger than the batch: y follows the
    reference, the state is bit-identical to the reference's, padding rows and unused slots are untouched. Even
    steps use packed, aligned rows (the register kernel when C % 8 == 0); odd steps read x from (and write y into)
    views with a wider, unaligned row stride (the staged kernel)."""
    sdt, adt, wdt = dtypes
    weight, bias = _layer(C, k, wdt, with_bias)
    state = torch.randn(SLOTS, C, k - 1, device=DEV).to(sdt)
    ref = state.clone()
    for step in range(20):
        slots = slot_map(BATCH, SLOTS, n_pad=1, device=DEV)
        odd = step % 2
        x, _ = _rows((BATCH, C), adt, extra=5 * odd, offset=odd)
        out, out_buffer = _rows((BATCH, C), adt, extra=3 * odd, offset=odd, poison=True)
        before = state.clone()
        conv1d_update(state, x, weight, bias, activation, slot_idx=slots, out=out)
        y_ref = conv1d_update_reference(ref, x, weight, bias, activation, slot_idx=slots)
        _check_y(out, y_ref, slots >= 0, adt, f"step {step}", out_buffer)
        assert torch.equal(state, ref), f"step {step}: state differs from the reference"
        _check_untouched(state, before, slots, f"step {step}")


def test_update_on_strided_state_matches_reference():
    """The state as the first k-1 positions of a wider buffer (channel stride k+1, not the width): the staged
    kernel's element-wise path (C % 8 == 0 but the windows are not packed); the positions behind the state stay
    untouched."""
    k, C = 4, 200
    weight, bias = _layer(C, k, F32)
    buf = torch.randn(SLOTS, C, k + 1, device=DEV).to(BF16)
    ref = buf.clone()
    for step in range(20):
        slots = slot_map(BATCH, SLOTS, n_pad=2, device=DEV)
        x = torch.randn(BATCH, C, device=DEV).to(BF16)
        out = poisoned((BATCH, C), BF16, DEV)
        conv1d_update(buf[:, :, :k - 1], x, weight, bias, slot_idx=slots, out=out)
        y_ref = conv1d_update_reference(ref[:, :, :k - 1], x, weight, bias, slot_idx=slots)
        _check_y(out, y_ref, slots >= 0, BF16, f"step {step}")
        assert torch.equal(buf, ref), f"step {step}: state buffer differs from the reference"


def _update_kernels(call):
    """Which update kernels `call` launches: a subset of {"registers", "staged"}, from the profiler's trace."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    if not names:
        pytest.skip("the profiler recorded no CUDA kernels (CUPTI unavailable)")
    return ({"registers"} if any("update_in_registers_kernel" in n for n in names) else set()) | \
        ({"staged"} if any("conv_kernel" in n for n in names) else set())


def _offset(shape, dtype, offset):
    """A contiguous tensor of `shape` starting `offset` elements past a fresh (aligned) buffer's start."""
    n = 1
    for d in shape:
        n *= d
    return torch.randn(n + offset, device=DEV).to(dtype)[offset:].view(shape)


# (id, C, dtypes, layout change, kernel): each staged case breaks one requirement of the register kernel.
DISPATCH_CASES = [
    ("packed-aligned", 256, (BF16, BF16, F32), {}, "registers"),
    ("fp32-packed-aligned", 8, (F32, F32, F32), {}, "registers"),
    ("x-row-stride-16B", 256, (BF16, BF16, BF16), {"x": dict(extra=8)}, "registers"),
    ("x-offset-1", 256, (BF16, BF16, F32), {"x": dict(offset=1)}, "staged"),
    ("x-row-stride-6B", 256, (BF16, BF16, F32), {"x": dict(extra=3)}, "staged"),
    ("y-row-stride-6B", 256, (BF16, BF16, F32), {"y": dict(extra=3)}, "staged"),
    ("C-not-multiple-of-8", 260, (BF16, BF16, F32), {}, "staged"),
    ("state-strided", 256, (BF16, BF16, F32), {"state_extra": 2}, "staged"),
    ("state-offset-1", 256, (BF16, BF16, F32), {"state_offset": 1}, "staged"),
    ("weight-offset-1", 256, (BF16, BF16, F32), {"weight_offset": 1}, "staged"),
    ("bias-offset-1", 256, (BF16, BF16, BF16), {"bias_offset": 1}, "staged"),
]


@pytest.mark.parametrize("C, dtypes, layout, kernel", [c[1:] for c in DISPATCH_CASES],
                         ids=[c[0] for c in DISPATCH_CASES])
def test_update_takes_register_kernel_only_when_aligned(C, dtypes, layout, kernel):
    """The dispatch gives an update the register kernel exactly when C % 8 == 0, the windows are packed and
    every base and row stride is 16-byte aligned; the result follows the reference either way."""
    sdt, adt, wdt = dtypes
    k = 4
    state_buf = _offset((SLOTS, C, k - 1 + layout.get("state_extra", 0)), sdt, layout.get("state_offset", 0))
    state = state_buf[:, :, :k - 1]
    ref = state.clone()
    weight = _offset((C, k), wdt, layout.get("weight_offset", 0))
    bias = _offset((C,), wdt, layout.get("bias_offset", 0))
    slots = slot_map(BATCH, SLOTS, n_pad=1, device=DEV)
    x, _ = _rows((BATCH, C), adt, **layout.get("x", {}))
    out, out_buffer = _rows((BATCH, C), adt, poison=True, **layout.get("y", {}))
    ran = _update_kernels(lambda: conv1d_update(state, x, weight, bias, slot_idx=slots, out=out))
    assert ran == {kernel}, f"launched {sorted(ran)}, expected the {kernel} kernel"
    y_ref = conv1d_update_reference(ref, x, weight, bias, slot_idx=slots)
    _check_y(out, y_ref, slots >= 0, adt, kernel, out_buffer)
    assert torch.equal(state, ref), "state differs from the reference"


BIT_CASES = [(d, k) for d in DTYPES for k in (2, 3, 4)]


def _bits(t):
    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


@pytest.mark.parametrize("dtypes, k", BIT_CASES, ids=[f"{_id(d)}-k{k}" for d, k in BIT_CASES])
def test_register_and_staged_updates_are_bit_identical(dtypes, k):
    """The same inputs through both update kernels, 30 steps on two copies of a pool: once with packed, aligned
    rows (register kernel), once with the same values in slices one element past alignment (staged kernel). y and
    the state are bit-identical at every step; padding rows of both outputs stay poisoned; 1032 channels leave the
    last block of either kernel partly idle."""
    sdt, adt, wdt = dtypes
    C = 1032
    activation, with_bias = k != 3, k != 2
    weight, bias = _layer(C, k, wdt, with_bias)
    fast_state = torch.randn(SLOTS, C, k - 1, device=DEV).to(sdt)
    staged_state = fast_state.clone()
    for step in range(30):
        slots = slot_map(BATCH, SLOTS, n_pad=2, device=DEV)
        x = torch.randn(BATCH, C, device=DEV).to(adt)
        x_unaligned, _ = _rows((BATCH, C), adt, offset=1)
        x_unaligned.copy_(x)
        y = poisoned((BATCH, C), adt, DEV)
        y_unaligned, _ = _rows((BATCH, C), adt, offset=1, poison=True)
        conv1d_update(fast_state, x, weight, bias, activation, slot_idx=slots, out=y)
        conv1d_update(staged_state, x_unaligned, weight, bias, activation, slot_idx=slots, out=y_unaligned)
        live = slots >= 0
        assert not torch.isnan(y[live]).any(), f"step {step}: register kernel left outputs unwritten"
        assert torch.isnan(y[~live]).all() and torch.isnan(y_unaligned[~live]).all(), \
            f"step {step}: padding row written"
        assert torch.equal(_bits(y[live]), _bits(y_unaligned[live])), f"step {step}: y differs between the kernels"
        assert torch.equal(_bits(fast_state), _bits(staged_state)), f"step {step}: state differs between the kernels"


# ---- speculative verify + commit ----

SPEC_CASES = ([((BF16, BF16, BF16), k, T, 256) for k in (2, 3, 4) for T in (1, 2, 4, 8)]
              + [(d, 4, 4, 136) for d in DTYPES]
              + [((F32, F32, F32), 4, 16, 1000), ((F16, F16, F16), 3, 8, 37), ((F32, BF16, F32), 2, 5, 4120)])


@pytest.mark.parametrize("dtypes, k, T, C", SPEC_CASES,
                         ids=[f"{_id(d)}-k{k}-T{T}-C{C}" for d, k, T, C in SPEC_CASES])
def test_verify_and_commit_match_reference_over_40_steps(dtypes, k, T, C):
    """40 steps of verify (fresh drafts, poisoned outputs) then commit (random accepted counts in 1..T), shuffled
    slots with a padding row: y follows the reference; windows are bit-identical to the reference's after each
    verify and each commit; unused slots are untouched by both."""
    sdt, adt, wdt = dtypes
    weight, bias = _layer(C, k, wdt)
    windows = torch.randn(SLOTS, C, k - 1 + T, device=DEV).to(sdt)
    ref = windows.clone()
    for step in range(40):
        slots = slot_map(BATCH, SLOTS, n_pad=1, device=DEV)
        odd = step % 2
        x, _ = _rows((BATCH, T, C), adt, extra=7 * odd, offset=odd)
        out, out_buffer = _rows((BATCH, T, C), adt, extra=2 * odd, offset=odd, poison=True)
        before = windows.clone()
        conv1d_verify(windows, x, weight, bias, slot_idx=slots, out=out)
        y_ref = conv1d_verify_reference(ref, x, weight, bias, slot_idx=slots)
        _check_y(out, y_ref, slots >= 0, adt, f"step {step}", out_buffer)
        assert torch.equal(windows, ref), f"step {step}: windows differ from the reference after verify"
        _check_untouched(windows, before, slots, f"step {step} verify")
        accepted = torch.randint(1, T + 1, (BATCH,), device=DEV, dtype=torch.int32)
        before = windows.clone()
        conv1d_commit(windows, accepted, k, slot_idx=slots)
        conv1d_commit_reference(ref, accepted, k, slot_idx=slots)
        assert torch.equal(windows, ref), f"step {step}: windows differ from the reference after commit"
        _check_untouched(windows, before, slots, f"step {step} commit")


@pytest.mark.parametrize("k", [2, 3, 4])
def test_verify_one_token_then_commit_one_equals_update(k):
    """T = 1 with every token accepted is a standard decode step: y and history bit-identical to the update
    kernel's over 20 steps."""
    C = 264
    weight, bias = _layer(C, k, BF16)
    state = torch.randn(SLOTS, C, k - 1, device=DEV).to(BF16)
    windows = torch.cat([state, torch.randn(SLOTS, C, 1, device=DEV).to(BF16)], dim=-1)
    for step in range(20):
        slots = slot_map(BATCH, SLOTS, n_pad=1, device=DEV)
        x = torch.randn(BATCH, C, device=DEV).to(BF16)
        y_upd = conv1d_update(state, x, weight, bias, slot_idx=slots, out=poisoned((BATCH, C), BF16, DEV))
        y_ver = conv1d_verify(windows, x[:, None], weight, bias, slot_idx=slots,
                              out=poisoned((BATCH, 1, C), BF16, DEV))
        conv1d_commit(windows, torch.ones(BATCH, dtype=torch.int32, device=DEV), k, slot_idx=slots)
        assert torch.equal(y_ver[:, 0].nan_to_num(), y_upd.nan_to_num()), f"step {step}: y differs"
        assert torch.equal(windows[:, :, :k - 1], state), f"step {step}: history differs from the state"


def test_commit_leaves_rows_with_counts_outside_1_to_T_untouched():
    """Counts 0, T+1 and negative are rejected on the device: those rows keep their windows bit for bit; the
    others commit."""
    k, T, C = 4, 4, 96
    windows = torch.randn(SLOTS, C, k - 1 + T, device=DEV).to(BF16)
    ref = windows.clone()
    slots = torch.tensor([3, 0, 7, 5, 1, 8], dtype=torch.int32, device=DEV)
    accepted = torch.tensor([0, T + 1, -2, 2, T, 1], dtype=torch.int32, device=DEV)
    before = windows.clone()
    conv1d_commit(windows, accepted, k, slot_idx=slots)
    conv1d_commit_reference(ref, accepted, k, slot_idx=slots)
    assert torch.equal(windows, ref), "windows differ from the reference"
    for s in (3, 0, 7):
        assert torch.equal(windows[s], before[s]), f"slot {s} with an out-of-range count changed"
    for s in (5, 1, 8):
        assert not torch.equal(windows[s, :, :k - 1], before[s, :, :k - 1]), f"slot {s} was not committed"


def test_steps_replay_in_a_cuda_graph():
    """update, verify and commit captured once in a CUDA graph and replayed on new inputs written into the
    captured buffers: the same results as eager launches."""
    k, T, C = 4, 4, 512
    weight, bias = _layer(C, k, BF16)
    state = torch.randn(SLOTS, C, k - 1, device=DEV).to(BF16)
    windows = torch.randn(SLOTS, C, k - 1 + T, device=DEV).to(BF16)
    slots = slot_map(BATCH, SLOTS, n_pad=1, device=DEV)
    x1, xT = torch.empty(BATCH, C, device=DEV, dtype=BF16), torch.empty(BATCH, T, C, device=DEV, dtype=BF16)
    accepted = torch.empty(BATCH, dtype=torch.int32, device=DEV)
    y1, yT = torch.empty_like(x1), torch.empty_like(xT)

    def step():
        conv1d_update(state, x1, weight, bias, slot_idx=slots, out=y1)
        conv1d_verify(windows, xT, weight, bias, slot_idx=slots, out=yT)
        conv1d_commit(windows, accepted, k, slot_idx=slots)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    x1.normal_()
    xT.normal_()
    accepted.fill_(1)
    with torch.cuda.stream(side):
        step()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    ref_state, ref_windows = state.clone(), windows.clone()
    for i in range(5):
        for t in (x1, xT):
            t.copy_(torch.randn_like(t, dtype=F32))
        accepted.copy_(torch.randint(1, T + 1, (BATCH,), dtype=torch.int32))
        for t in (y1, yT):
            t.fill_(float("nan"))
        graph.replay()
        r1 = conv1d_update_reference(ref_state, x1, weight, bias, slot_idx=slots)
        rT = conv1d_verify_reference(ref_windows, xT, weight, bias, slot_idx=slots)
        conv1d_commit_reference(ref_windows, accepted, k, slot_idx=slots)
        live = slots >= 0
        _check_y(y1, r1, live, BF16, f"replay {i} update")
        _check_y(yT, rT, live, BF16, f"replay {i} verify")
        assert torch.equal(state, ref_state) and torch.equal(windows, ref_windows), f"replay {i}: pool differs"


# ---- validation on CUDA tensors (the CPU paths: tests/test_conv1d_ops.py) ----

@pytest.mark.parametrize("call, match", [
    (lambda st, w, x, wt: conv1d_update(st, x.cpu(), wt), "state is on cuda:0, expected cpu"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt.cpu()), "weight is on cpu"),
    (lambda st, w, x, wt: conv1d_update(st, x, wt, slot_idx=torch.arange(3, dtype=torch.int32)), "slot_idx is on cpu"),
    (lambda st, w, x, wt: conv1d_verify(w, x[:, None].expand(3, 2, 64).contiguous(), wt), r"expected k-1\+T = 5"),
    (lambda st, w, x, wt: conv1d_commit(w, torch.ones(3, dtype=torch.int32), 4), "windows is on cuda:0, expected cpu"),
    (lambda st, w, x, wt: conv1d_commit(w, torch.ones(3, device=DEV, dtype=torch.int64), 4), "accepted must be"),
], ids=lambda v: v.split(" ")[0] if isinstance(v, str) else None)
def test_rejects_bad_input_before_launch_and_touches_nothing(call, match):
    state = torch.randn(4, 64, 3, device=DEV).to(BF16)
    windows = torch.randn(4, 64, 7, device=DEV).to(BF16)
    before = state.clone(), windows.clone()
    x, wt = torch.randn(3, 64, device=DEV).to(BF16), torch.randn(64, 4, device=DEV)
    with pytest.raises(ValueError, match=match):
        call(state, windows, x, wt)
    torch.cuda.synchronize()
    assert torch.equal(state, before[0]) and torch.equal(windows, before[1]), "a rejected call wrote the pool"
