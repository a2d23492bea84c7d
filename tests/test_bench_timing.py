"""The benchmarks' pool sizing and cold-L2 slot rotation (trtllm_replayssm/bench/timing.py), their step inputs
(bench/inputs.py), and on a GPU that a process's first graph timing is made twice and the first result dropped."""

import pytest
import torch

from trtllm_replayssm.bench import timing
from trtllm_replayssm.bench.inputs import gdn_step_inputs, mamba2_step_inputs
from trtllm_replayssm.bench.timing import L2_BYTES, cold_slot_sets, graph_launches, pool_slots
from trtllm_replayssm.config import GdnLayerShape, Mamba2LayerShape

MIB = 1 << 20


@pytest.mark.parametrize("batch, state_bytes", [(1, 4 * MIB), (8, 4 * MIB), (64, 4 * MIB), (1, 16 * MIB),
                                                (512, 4 * MIB), (3, 7 * MIB)])
def test_cold_slot_sets_are_disjoint_and_cover_twice_l2(batch, state_bytes):
    slots = pool_slots(batch, state_bytes)
    assert slots >= 2 * batch and slots * state_bytes >= 4 * L2_BYTES
    sets = cold_slot_sets(slots, batch, state_bytes, device="cpu")
    assert all(s.dtype == torch.int32 and s.numel() == batch for s in sets)
    every = torch.cat(sets)
    assert every.unique().numel() == every.numel(), "the sets share slots"
    assert int(every.min()) >= 0 and int(every.max()) < slots
    # Enough sets that one pass touches twice the L2 size, or every whole set the pool holds.
    assert len(sets) * batch * state_bytes >= 2 * L2_BYTES or len(sets) == slots // batch
    # ... and no more than needed.
    assert len(sets) == 1 or (len(sets) - 1) * batch * state_bytes < 2 * L2_BYTES


def test_warm_l2_is_one_set():
    sets = cold_slot_sets(pool_slots(1, 4 * MIB), 1, 4 * MIB, cold_l2=False, device="cpu")
    assert len(sets) == 1 and sets[0].numel() == 1


@pytest.mark.parametrize("base, sets, period", [(32, 1, 1), (32, 30, 1), (32, 30, 16), (64, 8, 4), (7, 3, 5)])
def test_graph_launches_are_whole_passes_of_whole_periods(base, sets, period):
    n = graph_launches(base, sets, period)
    assert n >= base and n % (sets * period) == 0
    assert n - sets * period < base, "more launches than needed"


def test_median_of_passes_takes_every_number_and_nested_number_median():
    rows = [{"shape": "s", "batch": 8, "us": 3.0, "sweep": {"a": 1.0, "b": 9.0}, "cfg": "a"},
            {"shape": "s", "batch": 8, "us": 1.0, "sweep": {"a": 5.0, "b": 2.0}, "cfg": "b"},
            {"shape": "s", "batch": 8, "us": 2.0, "sweep": {"a": 4.0, "b": 3.0}, "cfg": "b"}]
    m = timing.median_of_passes(rows)
    assert m == {"shape": "s", "batch": 8, "us": 2.0, "sweep": {"a": 4.0, "b": 3.0}, "cfg": "a"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_first_graph_timing_of_a_process_is_made_twice(monkeypatch):
    monkeypatch.setattr(timing, "_settled", False)
    x = torch.randn(1024, device="cuda")
    calls = []
    step = lambda: calls.append(x.mul_(1.0))  # noqa: E731 (one kernel; the Python call counts eager + capture)
    n = 5
    assert timing.time_graph_us(step, n) > 0
    assert len(calls) == 2 * (2 + n), "the first timing of the process was not repeated"
    calls.clear()
    assert timing.time_graph_us(step, n) > 0
    assert len(calls) == 2 + n, "a later timing was repeated"
    calls.clear()
    assert timing.time_graph_us_raw(step, n) > 0 and len(calls) == 2 + n


def test_step_inputs_have_the_layer_shapes_and_magnitudes():
    """The benchmarks' random step inputs: shapes and dtypes of the layer, decays negative (Mamba-2 A in
    [-16, -1], GDN g in (-0.5, 0]), beta in [0, 1), q and k of unit norm, nothing left at zero."""
    torch.manual_seed(0)
    m = mamba2_step_inputs(Mamba2LayerShape(8, 16, 32, 2), 3, "cpu")
    assert {k: tuple(v.shape) for k, v in m.items()} == {
        "A": (8,), "D": (8,), "dt_bias": (8,), "x": (3, 8, 16), "z": (3, 8, 16), "dt": (3, 8), "B": (3, 2, 32),
        "C": (3, 2, 32), "out": (3, 8, 16)}
    assert all(m[n].dtype == torch.bfloat16 for n in ("x", "z", "dt", "B", "C", "out"))
    assert bool((m["A"] <= -1).all() and (m["A"] >= -16).all())
    assert all(bool((m[n] != 0).any()) for n in ("D", "dt_bias", "x", "z", "dt", "B", "C"))
    g = gdn_step_inputs(GdnLayerShape(2, 4, 32, 16), 3, "cpu", dtype=torch.float16)
    assert {k: tuple(v.shape) for k, v in g.items()} == {
        "q": (3, 2, 32), "k": (3, 2, 32), "v": (3, 4, 16), "g": (3, 4), "beta": (3, 4), "out": (3, 4, 16)}
    assert all(g[n].dtype == torch.float16 for n in ("q", "k", "v", "out"))
    assert g["g"].dtype == torch.float32 and g["beta"].dtype == torch.float32
    for n in ("q", "k"):
        torch.testing.assert_close(g[n].float().norm(dim=-1), torch.ones(3, 2), atol=2e-3, rtol=0)
    assert bool((g["g"] <= 0).all() and (g["g"] > -0.5).all() and (g["beta"] >= 0).all() and (g["beta"] < 1).all())
