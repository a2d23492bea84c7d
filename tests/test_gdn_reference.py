"""CPU tests of the Gated DeltaNet / KDA references: replay against the fp64 sequential recurrence (both routes,
many steps past several flushes, desynchronised cursors, shuffled slots, padding), the L=1 anchor, the pool."""

import pytest
import torch

from mamba2_cases import rel_err, slot_map
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn.reference import (decay_state, expand_heads, gdn_gating, gdn_sequence, gdn_step,
                                                l2norm, prepare_qk)
from trtllm_replayssm.ops.gdn.replay_reference import (gdn_conventional_decode_reference,
                                                       gdn_replay_decode_reference, replay_row)
from trtllm_replayssm.pool import GdnStatePool

KINDS = [False, True]
KIND_IDS = ["gdn", "kda"]


def step_inputs(shape: GdnLayerShape, batch, dtype=torch.float32):
    """Prepared inputs with realistic magnitudes: unit-norm keys, q scaled by K^-1/2, decays in (0.5, 1)."""
    H, HV, K, V = shape.num_k_heads, shape.num_v_heads, shape.head_k_dim, shape.head_v_dim
    q, k = prepare_qk(torch.randn(batch, H, K), torch.randn(batch, H, K))
    v = torch.randn(batch, HV, V)
    a = torch.randn(batch, HV, K) if shape.per_channel_decay else torch.randn(batch, HV)
    A_log = torch.rand(HV, K) - 1.5 if shape.per_channel_decay else torch.rand(HV) - 1.5
    g, beta = gdn_gating(a, torch.randn(batch, HV), A_log, torch.full_like(A_log, -1.0))
    return q.to(dtype), k.to(dtype), v.to(dtype), g, beta


def random_gdn_pool(shape, num_slots, L, device="cpu", latency_route_bytes=0):
    """Random checkpoint and ring, desynchronised cursors; the ring routes unless a latency route limit is given."""
    cfg = ReplayConfig(buffer_len=L, state_dtype=torch.float32, act_dtype=torch.float32,
                       latency_route_bytes=latency_route_bytes)
    pool = GdnStatePool(shape, num_slots, cfg, device=device)
    pool.checkpoint.copy_(torch.randn(pool.checkpoint.shape) * 0.5)
    pool.ring_u.copy_(torch.randn(pool.ring_u.shape) * 0.5)
    pool.ring_k.copy_(l2norm(torch.randn(pool.ring_k.shape)))
    pool.ring_g.copy_(-torch.rand(pool.ring_g.shape) * 0.5)
    pool.set_cursor(slice(None), torch.randint(0, L, (num_slots,), dtype=torch.int32),
                    torch.randint(0, L, (num_slots,), dtype=torch.int32))
    return pool


def fold_ring(pool):
    """fp64 true state of every slot: the checkpoint with the ring's records applied (u already corrected)."""
    HV, L = pool.shape.num_v_heads, pool.buffer_len
    states = pool.checkpoint.double().clone()
    for s in range(pool.num_slots):
        h, origin = int(pool.history()[s]), int(pool.origin()[s])
        for j in range(h):
            p = (origin + j) % L
            k = expand_heads(pool.ring_k[s][:, p].double(), HV)
            decayed = decay_state(states[s], pool.ring_g[s][:, p].double())
            states[s] = decayed + pool.ring_u[s][:, p].double()[..., None] * k[:, None, :]
    return states


@pytest.mark.parametrize("per_channel", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("h", [0, 1, 5, 15])
@pytest.mark.parametrize("flush", [False, True], ids=["output_only", "flush"])
def test_replay_row_matches_fp64_recurrence(per_channel, h, flush):
    HV, K, V = 4, 64, 64
    S0 = torch.randn(HV, V, K, dtype=torch.float64)
    ks = l2norm(torch.randn(h + 1, 1, HV, K, dtype=torch.float64))
    qs = l2norm(torch.randn(h + 1, 1, HV, K, dtype=torch.float64)) * K ** -0.5
    vs = torch.randn(h + 1, 1, HV, V, dtype=torch.float64)
    gs = -torch.rand(h + 1, 1, HV, *((K,) if per_channel else ()), dtype=torch.float64) * 0.5
    betas = torch.rand(h + 1, 1, HV, dtype=torch.float64)
    ys, S = gdn_sequence(S0[None], qs, ks, vs, gs, betas)
    # The ring holds the corrected updates u_j of the first h tokens: recompute them along the recurrence.
    us, st = [], S0[None]
    for j in range(h):
        Sd = decay_state(st, gs[j])
        us.append(betas[j][..., None] * (vs[j] - (Sd * ks[j][..., None, :]).sum(-1)))
        _, st = gdn_step(st, qs[j], ks[j], vs[j], gs[j], betas[j])
    uw = torch.stack(us)[:, 0] if h else torch.zeros(0, HV, V, dtype=torch.float64)
    y, _, S_new = replay_row(S0, ks[:h, 0], uw, gs[:h, 0], qs[h, 0], ks[h, 0], vs[h, 0], gs[h, 0], betas[h, 0], flush)
    assert rel_err(y, ys[-1, 0]) < 1e-12
    if flush:
        assert rel_err(S_new, S[0]) < 1e-12


@pytest.mark.parametrize("latency_rows", [0, 2], ids=["ring", "latency_route"])
@pytest.mark.parametrize("per_channel", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("L", [1, 4, 8])
def test_pool_replay_matches_recurrence_over_flushes(per_channel, L, latency_rows):
    """3L+5 steps from desynchronised cursors and origins, shuffled slots, a padding row; fp32 against fp64
    (tolerance 5e-5: fp32 arithmetic over <= L replayed terms). latency_route: GDN steps alternate between two
    rows (the latency route: every row flushes, folding its records) and five (the ring); KDA has no latency
    route, so its pool refuses the limit and the case checks that refusal."""
    shape = GdnLayerShape(2, 4, 64, 64, per_channel_decay=per_channel)
    limit = latency_rows * 4 * 64 * 64 * 4
    if per_channel and limit:
        with pytest.raises(ValueError, match="scalar decay"):
            random_gdn_pool(shape, num_slots=7, L=L, latency_route_bytes=limit)
        return
    pool = random_gdn_pool(shape, num_slots=7, L=L, latency_route_bytes=limit)
    states = fold_ring(pool)
    folded = 0
    for step in range(3 * L + 5):
        latency = latency_rows > 0 and step % 3 == 0
        batch = latency_rows if latency else 5
        assert pool.flushes_every_row(batch) == latency
        slots = slot_map(batch, 7, n_pad=1, device="cpu")
        hist_before = pool.history().clone()
        q, k, v, g, beta = step_inputs(shape, batch)
        out = torch.full_like(v, float("nan"))
        gdn_replay_decode_reference(pool, q, k, v, g, beta, slot_idx=slots, out=out)
        for b, s in enumerate(slots.tolist()):
            if s < 0:
                assert torch.isnan(out[b]).all(), "padding row written"
                continue
            y_ref, st = gdn_step(states[s:s + 1], q[b:b + 1].double(), k[b:b + 1].double(), v[b:b + 1].double(),
                                 g[b:b + 1].double(), beta[b:b + 1].double())
            states[s] = st[0]
            assert rel_err(out[b], y_ref[0]) < 5e-5, f"step {step} row {b}"
            if latency:
                assert int(pool.history()[s]) == 0, f"step {step}: a latency step left a record"
                folded += int(hist_before[s]) > 0
    assert not latency_rows or L == 1 or folded > 0, "no latency step met a row with records to fold"


def test_latency_route_at_history_zero_is_the_conventional_step_bitwise():
    """A small step on the latency route (the default for GDN) with every cursor at history 0 is the
    conventional step bit for bit; cursors stay at 0 and no ring record is written."""
    shape = GdnLayerShape(2, 4, 64, 64)
    pool = random_gdn_pool(shape, num_slots=3, L=6, latency_route_bytes=None)
    pool.set_cursor(slice(None), 0)
    assert pool.flushes_every_row(3)
    before = {n: t.clone() for n, t in pool.buffers.items()}
    state = pool.checkpoint.clone()
    for step in range(5):
        q, k, v, g, beta = step_inputs(shape, 3)
        y1 = gdn_replay_decode_reference(pool, q, k, v, g, beta)
        y2 = gdn_conventional_decode_reference(state, q, k, v, g, beta)
        assert torch.equal(y1, y2), f"step {step}"
        assert torch.equal(pool.checkpoint, state), f"step {step}"
    for name in ("ring_u", "ring_k", "ring_g", "cursor"):
        assert torch.equal(pool.buffers[name], before[name]), f"{name} written on the latency route"


@pytest.mark.parametrize("per_channel", KINDS, ids=KIND_IDS)
def test_l1_replay_equals_conventional_bitwise(per_channel):
    shape = GdnLayerShape(2, 4, 64, 64, per_channel_decay=per_channel)
    pool = random_gdn_pool(shape, num_slots=3, L=1)
    state = pool.checkpoint.clone()
    for _ in range(4):
        q, k, v, g, beta = step_inputs(shape, 3)
        y1 = gdn_replay_decode_reference(pool, q, k, v, g, beta)
        y2 = gdn_conventional_decode_reference(state, q, k, v, g, beta)
        assert torch.equal(y1, y2)
        assert torch.equal(pool.checkpoint, state)


def test_unused_slots_untouched_and_flush_empties_ring():
    shape = GdnLayerShape(2, 4, 64, 64)
    pool = random_gdn_pool(shape, num_slots=5, L=4)
    pool.set_cursor(slice(None), 0)
    before = {n: t.clone() for n, t in pool.buffers.items()}
    slots = torch.tensor([4, -1, 1], dtype=torch.int32)
    for step in range(4):
        q, k, v, g, beta = step_inputs(shape, 3)
        gdn_replay_decode_reference(pool, q, k, v, g, beta, slot_idx=slots)
        if step < 3:
            assert torch.equal(pool.checkpoint, before["checkpoint"]), "checkpoint changed before the flush"
    assert pool.history().tolist() == [0] * 5
    for name, t in pool.buffers.items():
        for s in (0, 2, 3):
            assert torch.equal(t[s], before[name][s]), f"{name} of unused slot {s} changed"
    assert not torch.equal(pool.checkpoint[[1, 4]], before["checkpoint"][[1, 4]])


def test_gating_and_normalisation():
    g, beta = gdn_gating(torch.randn(3, 4), torch.randn(3, 4), torch.zeros(4), torch.zeros(4))
    assert (g < 0).all() and ((beta > 0) & (beta < 1)).all()
    q, k = prepare_qk(torch.randn(2, 3, 128), torch.randn(2, 3, 128))
    assert torch.allclose(k.norm(dim=-1), torch.ones(2, 3), atol=1e-5)
    assert torch.allclose(q.norm(dim=-1), torch.full((2, 3), 128 ** -0.5), atol=1e-6)


def test_gdn_pool_layout_by_hand():
    shape = GdnLayerShape(16, 64, 128, 128)  # Qwen3.5-122B-A10B
    pool = GdnStatePool(shape, 1, ReplayConfig(buffer_len=16, state_dtype="fp32", act_dtype="bf16"))
    b = pool.bytes_per_slot()
    assert b["checkpoint"] == 64 * 128 * 128 * 4 == 4 * 2**20  # the brief's 4 MiB
    assert b["ring_u"] == 64 * 16 * 128 * 2 and b["ring_k"] == 16 * 16 * 128 * 2 and b["ring_g"] == 64 * 16 * 4
    kda = GdnStatePool(GdnLayerShape(16, 64, 128, 128, True), 1, ReplayConfig(buffer_len=5))
    assert kda.ring_g.shape == (1, 64, 5, 128)
    with pytest.raises(ValueError, match="num_v_heads=6"):
        GdnLayerShape(4, 6, 128, 128).validate()
    with pytest.raises(ValueError, match="head_k_dim=96"):
        GdnLayerShape(4, 8, 96, 128).validate()
