"""GPU tests of the Mamba-2 decode kernels against the PyTorch reference and the fp64 recurrence.

Tolerances (norm-relative, one table): the kernel and the reference differ only in summation order and in
which side of a rounding boundary a stored value (checkpoint at flush, y) lands, so the error is bounded by
about two ulps of the coarsest dtype the step stores (fp32 gets 2e-5 for summation order over <= 64 terms).
"""

import pytest
import torch

from mamba2_cases import clone_pool, layer_params, random_pool, rel_err, ring_route_twin, slot_map, step_inputs
from oracle import SequentialOracle
from trtllm_replayssm.config import CURSOR_HISTORY, CURSOR_ORIGIN, Mamba2LayerShape, ReplayConfig, dtype_name
from trtllm_replayssm.ops.mamba2 import conventional_decode, replay_decode
from trtllm_replayssm.ops.mamba2.replay_reference import (conventional_decode_reference,
                                                          replay_decode_reference)

pytestmark = pytest.mark.gpu

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
TOL = {F32: 2e-5, F16: 2e-3, BF16: 1.6e-2}
EPS_ORDER = [F32, F16, BF16]


def tol(state_dtype, act_dtype):
    return TOL[max(state_dtype, act_dtype, key=EPS_ORDER.index)]


DTYPE_PAIRS = [(s, a) for s in (F32, F16, BF16) for a in (F32, F16, BF16)]


def _id(v):
    if isinstance(v, tuple) and all(isinstance(d, torch.dtype) for d in v):
        return f"state_{dtype_name(v[0])}-act_{dtype_name(v[1])}"
    return None


CASES = (
    [(pair, 64, 128, 8) for pair in DTYPE_PAIRS]
    + [((F32, BF16), 80, 128, 5), ((BF16, BF16), 128, 64, 16), ((F32, F16), 64, 256, 4),
       ((F32, BF16), 64, 128, 1), ((F32, BF16), 64, 64, 2), ((F16, F32), 80, 256, 64)]
)


def _wide(t, extra):
    """The same values as `t` in a view whose batch stride is larger (as when x is a slice of a projection)."""
    big = torch.randn(t.shape[0], t.shape[1] + extra, *t.shape[2:], device=t.device).to(t.dtype)
    big[:, :t.shape[1]] = t
    return big[:, :t.shape[1]]


@pytest.mark.parametrize("dtypes, P, N, L", CASES, ids=lambda v: _id(v))
def test_replay_kernel_matches_reference(dtypes, P, N, L):
    """3L+3 steps from desynchronised cursors and origins: y, checkpoint, ring and cursors follow the reference;
    checkpoints of non-flush rows stay bit-identical; padded rows and unused slots are untouched; every
    non-padded output is written. The ring routes (latency route off)."""
    _check_replay_steps(dtypes, P, N, L, latency_rows=0)


# fp32 checkpoints whose head tiles own the cursor replicas (pool.latency_route_limit): per tile (80 x 64: five
# tiles, so tiles 0-2 own two replicas each and 3-4 one; 128 x 64: eight tiles of 16 rows) or per block of four
# tiles behind a block barrier (64 x 256: 16 tiles, four blocks; 128 x 256: 32 tiles, eight blocks)
LATENCY_CASES = [c for c in CASES if c[0][0] == F32 and (c[1] * c[2] <= 8192 or c[1] * c[2] % 4096 == 0)] + [
    ((F32, BF16), 80, 64, 16), ((F32, F16), 128, 64, 16), ((F32, BF16), 64, 256, 8), ((F32, BF16), 128, 256, 32)]


@pytest.mark.parametrize("dtypes, P, N, L", LATENCY_CASES, ids=lambda v: _id(v))
def test_latency_route_kernel_matches_reference(dtypes, P, N, L):
    """The same checks with the latency route's limit at three rows' checkpoints and steps of three rows (every
    row flushes: rows with records fold them, in the conventional kernel's mapping) between steps of six (the
    ring routes): the kernels leave and pick up each other's cursors."""
    _check_replay_steps(dtypes, P, N, L, latency_rows=3)


def _check_replay_steps(dtypes, P, N, L, latency_rows):
    state_dtype, act_dtype = dtypes
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    cfg = ReplayConfig(buffer_len=L, state_dtype=state_dtype, act_dtype=act_dtype,
                       latency_route_bytes=latency_rows * 8 * P * N * 4)
    dev = torch.device("cuda")
    pool = random_pool(shape, num_slots=9, cfg=cfg, device=dev)
    ref = clone_pool(pool)
    A, D, dt_bias = layer_params(shape, dev)
    folded = 0
    for step in range(3 * L + 3):
        latency = latency_rows > 0 and step % 3 == 0
        batch = latency_rows if latency else 6
        assert pool.flushes_every_row(batch) == latency
        slots = slot_map(batch, 9, n_pad=1, device=dev)
        x, dt, B, C, z = step_inputs(shape, batch, act_dtype, dev)
        if step % 2:
            x, z = _wide(x, 3), _wide(z, 1)
        before = clone_pool(pool)
        out = torch.full_like(x, float("nan"))
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        y_ref = replay_decode_reference(ref, x, dt, B, C, A, D, z, dt_bias, True, slots)
        torch.cuda.synchronize()
        live = slots >= 0
        assert not torch.isnan(out[live]).any(), f"step {step}: output not fully written"
        assert torch.isnan(out[~live]).all(), f"step {step}: padded row written"
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
        assert torch.equal(pool.ring_x, ref.ring_x) and torch.equal(pool.ring_B, ref.ring_B), \
            f"step {step}: ring records differ"
        assert rel_err(pool.ring_dt, ref.ring_dt) < 1e-6, f"step {step}: ring dt differs"
        assert rel_err(pool.checkpoint, ref.checkpoint) < tol(*dtypes), f"step {step}: checkpoint differs"
    assert latency_rows == 0 or L == 1 or folded > 0, "no latency step met a row with records to fold"


@pytest.mark.parametrize("P, N, L", [(64, 128, 16), (80, 64, 8), (128, 64, 32), (64, 64, 64), (64, 256, 16),
                                     (128, 256, 8)])
def test_latency_route_fold_equals_the_combined_kernels_flush_bitwise(P, N, L):
    """Every row at history L-1, one step on the latency route and one on the combined kernel (limit 0) from the
    same pool: the fold performs the flush's fp32 operations in the same order, so every buffer is bit-identical
    (checkpoint, cursors back at 0, rings untouched by both); y within two bf16 roundings (other read-out order)."""
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    dev = torch.device("cuda")
    lat = random_pool(shape, 7, ReplayConfig(L, F32, BF16), dev, desync=False)
    lat.set_cursor(slice(None), L - 1, torch.randint(0, L, (7,), device=dev, dtype=torch.int32))
    ring = ring_route_twin(lat)
    assert lat.flushes_every_row(6) and not ring.flushes_every_row(6)
    A, D, dt_bias = layer_params(shape, dev)
    slots = slot_map(6, 7, n_pad=1, device=dev)
    x, dt, B, C, z = step_inputs(shape, 6, BF16, dev)
    outs = []
    for pool in (lat, ring):
        out = torch.full_like(x, float("nan"))
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        outs.append(out)
    torch.cuda.synchronize()
    for name, t in lat.buffers.items():
        assert torch.equal(t, ring.buffers[name]), f"{name} differs from the combined kernel's flush"
    live = slots >= 0
    assert torch.isnan(outs[0][~live]).all() and not torch.isnan(outs[0][live]).any()
    a, b = outs[0][live].float(), outs[1][live].float()
    torch.testing.assert_close(a, b, rtol=2 ** -6, atol=2 ** -6 * float(b.abs().max()))


@pytest.mark.parametrize("act_dtype", [F32, F16, BF16], ids=dtype_name)
@pytest.mark.parametrize("P, N", [(64, 128), (80, 64), (128, 64), (64, 256)])
def test_latency_route_at_history_zero_equals_the_conventional_kernel_bitwise(act_dtype, P, N):
    """A step on the latency route (the default for these small steps) with every cursor at history 0 is the
    conventional kernel's step bit for bit (y and checkpoint), and writes no cursor or ring record."""
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=2)
    dev = torch.device("cuda")
    pool = random_pool(shape, 7, ReplayConfig(8, F32, act_dtype), dev, desync=False)
    assert pool.flushes_every_row(6) and pool.history().eq(0).all()
    before = clone_pool(pool)
    state = pool.checkpoint.clone()
    A, D, dt_bias = layer_params(shape, dev)
    for step in range(4):
        slots = slot_map(6, 7, n_pad=1, device=dev)
        x, dt, B, C, z = step_inputs(shape, 6, act_dtype, dev)
        y1 = torch.full_like(x, float("nan"))
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=y1)
        y2 = conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        live = slots >= 0
        assert torch.isnan(y1[~live]).all() and torch.equal(y1[live], y2[live]), f"step {step}"
        assert torch.equal(pool.checkpoint, state), f"step {step}"
    for name in ("ring_x", "ring_B", "ring_dt", "cursor"):
        assert torch.equal(pool.buffers[name], before.buffers[name]), f"{name} written on the latency route"


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "latency_route"])
@pytest.mark.parametrize("L", [4, 16])
def test_replay_kernel_matches_fp64_recurrence(L, latency_route_bytes):
    """fp32 state and activations: outputs track the fp64 sequential recurrence over 3L+3 steps, through the
    ring routes and through the latency route (the default for these small steps)."""
    shape = Mamba2LayerShape(nheads=16, head_dim=64, dstate=128, ngroups=4)
    dev = torch.device("cuda")
    cfg = ReplayConfig(buffer_len=L, state_dtype=F32, act_dtype=F32, latency_route_bytes=latency_route_bytes)
    pool = random_pool(shape, num_slots=8, cfg=cfg, device=dev)
    A, D, dt_bias = layer_params(shape, dev)
    oracle = SequentialOracle(pool, A, D, dt_bias)
    for step in range(3 * L + 3):
        slots = slot_map(6, 8, n_pad=1, device=dev)
        x, dt, B, C, z = step_inputs(shape, 6, F32, dev)
        y = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        y_ref = oracle.step(slots.cpu(), x, dt, B, C, z)
        live = (slots >= 0).cpu()
        assert rel_err(y.cpu()[live], y_ref[live]) < 5e-5, f"step {step}"


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=lambda v: _id(v))
def test_replay_l1_equals_conventional_kernel_bitwise(dtypes):
    """L=1: every step flushes an empty ring, so the replay kernel must equal the conventional kernel exactly."""
    state_dtype, act_dtype = dtypes
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=128, ngroups=2)
    dev = torch.device("cuda")
    pool = random_pool(shape, 5, ReplayConfig(1, state_dtype, act_dtype, latency_route_bytes=0), dev, desync=False)
    state = pool.checkpoint.clone()
    A, D, dt_bias = layer_params(shape, dev)
    for _ in range(3):
        slots = slot_map(4, 5, n_pad=1, device=dev)
        x, dt, B, C, z = step_inputs(shape, 4, act_dtype, dev)
        y1 = replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        y2 = conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots)
        live = slots >= 0
        assert torch.equal(y1[live], y2[live])
        assert torch.equal(pool.checkpoint, state)


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=lambda v: _id(v))
@pytest.mark.parametrize("P, N", [(64, 128), (80, 64), (128, 256)])
def test_conventional_kernel_matches_reference(dtypes, P, N):
    state_dtype, act_dtype = dtypes
    shape = Mamba2LayerShape(nheads=8, head_dim=P, dstate=N, ngroups=4)
    dev = torch.device("cuda")
    state = torch.randn(7, 8, P, N, device=dev).to(state_dtype)
    ref_state = state.clone()
    A, D, dt_bias = layer_params(shape, dev, with_D=P != 80, with_bias=N != 64)
    for step in range(3):
        slots = slot_map(5, 7, n_pad=2, device=dev)
        x, dt, B, C, z = step_inputs(shape, 5, act_dtype, dev, with_z=step != 1)
        before = state.clone()
        out = torch.full_like(x, float("nan"))
        conventional_decode(state, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        y_ref = conventional_decode_reference(ref_state, x, dt, B, C, A, D, z, dt_bias, True, slots)
        live = slots >= 0
        assert not torch.isnan(out[live]).any() and torch.isnan(out[~live]).all()
        assert rel_err(out[live], y_ref[live]) < tol(*dtypes)
        assert rel_err(state, ref_state) < tol(*dtypes)
        unused = [s for s in range(7) if s not in set(slots[live].tolist())]
        assert torch.equal(state[unused], before[unused]), "unused slots changed"


@pytest.mark.parametrize("latency_route_bytes", [0, None], ids=["ring", "latency_route"])
def test_replay_step_captured_in_cuda_graph(latency_route_bytes):
    """One replay step captured once and replayed 2L+3 times with new inputs and no host sync follows the
    reference: the cursor lives and advances on the device (ring routes, and the latency route the default
    takes for this small step)."""
    L = 6
    shape = Mamba2LayerShape(nheads=8, head_dim=64, dstate=128, ngroups=2)
    dev = torch.device("cuda")
    cfg = ReplayConfig(L, F32, BF16, latency_route_bytes=latency_route_bytes)
    pool = random_pool(shape, 6, cfg, dev)
    ref = clone_pool(pool)
    A, D, dt_bias = layer_params(shape, dev)
    slots = slot_map(5, 6, n_pad=1, device=dev)
    static = list(step_inputs(shape, 5, BF16, dev))
    out = torch.empty_like(static[0])
    # Warm up on a throwaway pool (capture needs the library loaded and the kernels resolved).
    scratch = clone_pool(pool)
    replay_decode(scratch, *static[:4], A, D=D, z=static[4], dt_bias=dt_bias, slot_idx=slots, out=out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replay_decode(pool, *static[:4], A, D=D, z=static[4], dt_bias=dt_bias, slot_idx=slots, out=out)
    for step in range(2 * L + 3):
        for dst, src in zip(static, step_inputs(shape, 5, BF16, dev)):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        y_ref = replay_decode_reference(ref, *static[:4], A, D, static[4], dt_bias, True, slots)
        live = slots >= 0
        assert rel_err(out[live], y_ref[live]) < tol(F32, BF16), f"replay {step}"
        assert torch.equal(pool.cursor, ref.cursor)


def _step_both_routes(monkeypatch, split, combined, x, dt, B, C, A, D, z, dt_bias, slots, out_pad=0):
    """One replay step on each pool, `split` through output_only.cuh's mapping and `combined` through the combined
    kernel (RSSM_ROUTES forces each), outputs poisoned first; returns both outputs after a device sync. out_pad > 0:
    each output is a view whose heads lie head_dim + out_pad elements apart, the gaps checked untouched."""
    outs = []
    for pool, routes in ((split, "split"), (combined, "combined")):
        monkeypatch.setenv("RSSM_ROUTES", routes)
        big = torch.full((*x.shape[:2], x.shape[2] + out_pad), float("nan"), dtype=x.dtype, device=x.device)
        out = big[..., :x.shape[2]]
        replay_decode(pool, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slots, out=out)
        outs.append(out)
        assert torch.isnan(big[..., x.shape[2]:]).all(), f"{routes}: y written between heads"
    torch.cuda.synchronize()
    return outs


@pytest.mark.parametrize("read_format", ["none", "nvfp4"])
@pytest.mark.parametrize("act_dtype, L, P, heads_per_group", [(BF16, 8, 64, 16), (BF16, 32, 64, 8), (F16, 16, 128, 4),
                                                               (BF16, 5, 80, 8)])
def test_split_routes_match_the_combined_kernel(monkeypatch, read_format, act_dtype, L, P, heads_per_group,
                                                out_pad=0):
    """The replay step in output_only.cuh's mapping (fp32: one launch, flushing rows rebuilt there; nvfp4: the
    flush-only launch first) against the combined kernel (RSSM_ROUTES forces either) on identical pools over 2L+3
    steps, with cursors desynchronised per group (rows mixing flushing and output-only groups; a group's heads
    share the ring of B records and so, in every step the library makes, their cursor), padding, shuffled slots
    and strided x / z: every pool buffer (checkpoint, rings, cursors, read copy) bit-identical after every step
    (the flush rows perform the same fp32 operations in the same order; the output-only rows append the same
    records); y within two bf16 / fp16 roundings (the output-only kernel sums the same terms in another order;
    nvfp4: exact products summed on the tensor cores)."""
    shape = Mamba2LayerShape(nheads=2 * heads_per_group, head_dim=P, dstate=128, ngroups=2)
    cfg = ReplayConfig(L, F32, act_dtype, read_format, latency_route_bytes=0)
    dev = torch.device("cuda")
    num_slots, batch = 9, 7
    split = random_pool(shape, num_slots, cfg, dev)
    for s in range(num_slots):
        split.write_read_copy(s, split.checkpoint[s])
    per_group = lambda: torch.randint(0, L, (num_slots, 2, 1, 1), device=dev, dtype=torch.int32)  # noqa: E731
    split.cursor[..., CURSOR_HISTORY] = per_group().repeat_interleave(heads_per_group, 1)[..., 0]
    split.cursor[..., CURSOR_ORIGIN] = per_group().repeat_interleave(heads_per_group, 1)[..., 0]
    combined = clone_pool(split)
    A, D, dt_bias = layer_params(shape, dev)
    ulp = 2.0 ** -7 if act_dtype == BF16 else 2.0 ** -10
    rounded_apart = False  # some y of the two routes one rounding apart: proof that the split routes ran
    for step in range(2 * L + 3):
        slots = slot_map(batch, num_slots, n_pad=1, device=dev)
        x, dt, B, C, z = step_inputs(shape, batch, act_dtype, dev)
        if step % 2:
            x, z = _wide(x, 3), _wide(z, 1)
        outs = _step_both_routes(monkeypatch, split, combined, x, dt, B, C, A, D, z, dt_bias, slots, out_pad)
        live = slots >= 0
        assert torch.isnan(outs[0][~live]).all(), f"step {step}: padded row written"
        assert not torch.isnan(outs[0][live]).any(), f"step {step}: output not fully written"
        a, b = outs[0][live].float(), outs[1][live].float()
        torch.testing.assert_close(a, b, rtol=2 * ulp, atol=2 * ulp * float(b.abs().max()),
                                   msg=lambda m: f"step {step}: y of the split routes: {m}")
        rounded_apart |= not torch.equal(a, b)
        for name, t in split.buffers.items():
            assert torch.equal(t, combined.buffers[name]), f"step {step}: {name} differs from the combined kernel"
    assert rounded_apart, "y identical to the combined kernel's bit for bit: the output-only launch did not run"


@pytest.mark.parametrize("knob, value", [("RSSM_OO_HEADS", "2"), ("RSSM_OO_HEADS", "8"), ("RSSM_OO_HEADS", "16"),
                                         ("RSSM_OO_PREFETCH", "3"), ("RSSM_OO_FIRST_L2", "1"),
                                         ("RSSM_OO_FIRST_L2", "0"), ("RSSM_OO_TAIL_ROWS", "3"),
                                         ("RSSM_OO_TAIL_ROWS", "7")])
def test_split_routes_at_other_launch_settings(monkeypatch, knob, value):
    """The same comparison at the output-only kernel's other A/B settings: 2 heads per block (the fewest at
    P = 64), 8 (the default cap, which small forced launches halve to 4), 16 (above the cap), an L2 prefetch of
    three batches of rows ahead, the warp's first batch of rows loaded after the prologue through L2 (1) or
    before it into registers (0), whatever the batches per warp, and the last 3 of the 7 rows in a tail launch of
    blocks of half the heads (fp32 reads: a programmatic dependent of the first launch) or all 7 there."""
    monkeypatch.setenv(knob, value)
    test_split_routes_match_the_combined_kernel(monkeypatch, "none", BF16, 8, 64, 16)


@pytest.mark.parametrize("lean, heads, L, act_dtype", [("0", "", 8, BF16), ("0", "", 32, BF16), ("1", "1", 8, BF16),
                                                       ("1", "16", 8, BF16), ("1", "2", 32, BF16), ("1", "", 3, BF16),
                                                       ("1", "", 32, F16), ("1", "4", 16, F16)])
def test_split_routes_nvfp4_variants(monkeypatch, lean, heads, L, act_dtype):
    """The nvfp4 output-only kernel both ways (RSSM_NVFP4_LEAN): 80 registers with the window's ring x records read
    from global memory (1; the library's choice from 12 blocks per multiprocessor), at 1, 2, 4 and 16 heads per block
    and L 3 / 8 / 16 / 32 (the window wrapping around the ring at random origins), bf16 and fp16 activations; or 128
    registers with the whole ring staged in shared memory (0): every buffer bit-identical to the combined kernel's,
    y within two roundings."""
    monkeypatch.setenv("RSSM_NVFP4_LEAN", lean)
    if heads:
        monkeypatch.setenv("RSSM_OO_HEADS", heads)
    test_split_routes_match_the_combined_kernel(monkeypatch, "nvfp4", act_dtype, L, 64, 16)


@pytest.mark.parametrize("lean", ["0", "1"])
@pytest.mark.parametrize("out_pad", [1, 8])
def test_split_routes_nvfp4_output_views(monkeypatch, lean, out_pad):
    """The nvfp4 output-only kernel writes a lane's consecutive rows of y together where y's address and head stride
    allow (16 or 8 bytes) and one by one otherwise: y as a view whose heads lie head_dim + 1 elements apart (every
    row but the first misaligned) or head_dim + 8 (aligned), both variants; the gaps between heads untouched."""
    monkeypatch.setenv("RSSM_NVFP4_LEAN", lean)
    test_split_routes_match_the_combined_kernel(monkeypatch, "nvfp4", BF16, 8, 64, 16, out_pad=out_pad)


@pytest.mark.parametrize("read_format, heads, first_l2", [("none", "8", "1"), ("none", "8", "0"), ("none", "4", "1"),
                                                         ("nvfp4", "16", "")])
def test_split_routes_tail_launch(monkeypatch, read_format, heads, first_l2):
    """The tail launch (the last 3 of the 7 rows) behind the block sizes it follows in use: 8 heads (4-head tail
    blocks: the default at b50-b131 on Super) and 4 heads (2-head tail blocks), with the first batch of a warp's rows
    via L2 (1) or in registers (0) in the first launch (the tail launch's own choice follows its batches per warp);
    with an nvfp4 copy the knob is ignored (one output-only launch after the flush-only launch)."""
    monkeypatch.setenv("RSSM_OO_TAIL_ROWS", "3")
    monkeypatch.setenv("RSSM_OO_HEADS", heads)
    if first_l2:
        monkeypatch.setenv("RSSM_OO_FIRST_L2", first_l2)
    test_split_routes_match_the_combined_kernel(monkeypatch, read_format, BF16, 8, 64, 16)


@pytest.mark.parametrize("read_format", ["none", "nvfp4"])
def test_split_routes_with_every_row_flushing(monkeypatch, read_format):
    """300 rows, every one flushing in the same step, then a step of output-only rows: fp32, every block of the
    output-only kernel rebuilds all its heads; nvfp4, the flush-only launch's blocks each take several rows (their
    shared memory reused between rows) over two 256-row pieces of the batch. Every buffer bit-identical to the
    combined kernel's, y within two bf16 roundings."""
    L, batch, num_slots = 8, 300, 304
    shape = Mamba2LayerShape(nheads=32, head_dim=64, dstate=128, ngroups=2)
    dev = torch.device("cuda")
    split = random_pool(shape, num_slots, ReplayConfig(L, F32, BF16, read_format), dev, desync=False)
    for s in range(num_slots):
        split.write_read_copy(s, split.checkpoint[s])
    split.set_cursor(slice(None), L - 1, torch.randint(0, L, (num_slots,), device=dev, dtype=torch.int32))
    combined = clone_pool(split)
    A, D, dt_bias = layer_params(shape, dev)
    for step in range(2):
        slots = slot_map(batch, num_slots, n_pad=3, device=dev)
        x, dt, B, C, z = step_inputs(shape, batch, BF16, dev)
        outs = _step_both_routes(monkeypatch, split, combined, x, dt, B, C, A, D, z, dt_bias, slots)
        live = slots >= 0
        assert torch.isnan(outs[0][~live]).all() and not torch.isnan(outs[0][live]).any(), f"step {step}"
        a, b = outs[0][live].float(), outs[1][live].float()
        torch.testing.assert_close(a, b, rtol=2 ** -6, atol=2 ** -6 * float(b.abs().max()),
                                   msg=lambda m: f"step {step}: y of the split routes: {m}")
        for name, t in split.buffers.items():
            assert torch.equal(t, combined.buffers[name]), f"step {step}: {name} differs from the combined kernel"
        if step == 0:
            assert (split.history()[slots[live].long().cpu()] == 0).all(), "every live row flushed"


def test_split_routes_with_every_row_flushing_nvfp4_lean(monkeypatch):
    """The every-row-flushing comparison above through the 80-register nvfp4 output-only kernel (RSSM_NVFP4_LEAN=1,
    which the library takes on its own from 12 blocks per multiprocessor): 300 rows flushing, then 300 rows reading
    the window's ring records from global memory."""
    monkeypatch.setenv("RSSM_NVFP4_LEAN", "1")
    test_split_routes_with_every_row_flushing(monkeypatch, "nvfp4")
