"""The speculative test harness itself (tests/spec_harness.py) must report a broken verify: fed an all-NaN output
or an output shifted by one token (each token's output where the next token's belongs), both of its drivers
return an error far above the tolerances their tests use, where the unmutated references stay inside them.
Runs on the CPU with the Mamba-2 references, in the drivers' GPU form too (`worst_against_truth` on device "cpu")."""

import math

import pytest
import torch

from mamba2_cases import layer_params, worst
from mamba2_spec_cases import spec_pool, window_inputs
from oracle import fold_ring
from spec_harness import run_spec, worst_against_truth
from trtllm_replayssm.config import Mamba2LayerShape, ReplayConfig
from trtllm_replayssm.ops.mamba2 import replay_verify, snapshot_verify
from trtllm_replayssm.ops.mamba2.reference import mamba2_step
from trtllm_replayssm.pool import Mamba2StatePool

SHAPE = Mamba2LayerShape(nheads=2, head_dim=64, dstate=64, ngroups=1)
T, L, STEPS = 4, 12, 6
TOL = 5e-5  # the fp64-truth tolerance of the fp32 speculative tests

MUTATIONS = {
    "none": lambda y: y,
    "nan": lambda y: torch.full_like(y, math.nan),
    "shifted": lambda y: torch.roll(y, 1, dims=1),  # token i's output reported at token i + 1
}


def _setup(ring_history):
    """A pool (with random ring histories, or all at history 0 for run_spec, whose truth is the checkpoint), the
    layer's A and its verify / snapshot verify / fp64 truth step."""
    torch.manual_seed(0)
    cfg = ReplayConfig(L, torch.float32, torch.float32)
    if ring_history:
        pool = spec_pool(SHAPE, 6, cfg, T, "cpu")
    else:
        pool = Mamba2StatePool(SHAPE, 6, cfg)
        pool.checkpoint.normal_()
    A, D, dt_bias = layer_params(SHAPE, "cpu")
    A64, D64, bias64 = A.double(), D.double(), dt_bias.double()

    def truth_step(st, row):
        x, dt, B, C, z = row
        return mamba2_step(st, x, dt, A64, B, C, D64, z, bias64)

    def verify(p, x, dt, B, C, z, slot_idx):
        return replay_verify(p, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slot_idx)

    def snapshot(st, snaps, x, dt, B, C, z, slot_idx):
        return snapshot_verify(st, snaps, x, dt, B, C, A, D=D, z=z, dt_bias=dt_bias, slot_idx=slot_idx)

    return pool, A, verify, snapshot, truth_step


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_run_spec_reports_a_broken_output(mutation):
    pool, _, verify, snapshot, truth_step = _setup(ring_history=False)
    err = run_spec(pool, T, STEPS, lambda b: window_inputs(SHAPE, b, T, torch.float32, "cpu"),
                   lambda *a, **kw: MUTATIONS[mutation](verify(*a, **kw)), snapshot, truth_step, tol=TOL, check=False)
    if mutation == "none":
        assert 0 < err < TOL
    else:
        assert not err < 1e-2, err  # NaN must not compare as small


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_worst_against_truth_reports_a_broken_output(mutation):
    pool, A, verify, snapshot, truth_step = _setup(ring_history=True)
    truth = fold_ring(pool, A)
    errs = worst_against_truth(
        pool, truth, T, STEPS, lambda b: window_inputs(SHAPE, b, T, torch.float32, "cpu"),
        lambda p, inp, slots: MUTATIONS[mutation](verify(p, *inp, slot_idx=slots)),
        lambda st, snaps, inp, slots: snapshot(st, snaps, *inp, slot_idx=slots),
        lambda st, rows, b, i: truth_step(st, [t[b:b + 1, i] for t in rows]), "cpu")
    assert 0 < errs["snapshot"] < TOL, errs  # the untouched path stays good
    if mutation == "none":
        assert 0 < worst(errs["replay"], errs["paths"]) < TOL, errs
    else:
        assert not errs["replay"] < 1e-2 and not errs["paths"] < 1e-2, errs


def test_worst_keeps_a_nan_wherever_it_comes():
    assert math.isnan(worst(0.0, math.nan)) and math.isnan(worst(math.nan, 0.5)) and math.isnan(worst(1.0, 2.0,
                                                                                                        math.nan))
    assert worst(0.25, 0.5, 0.125) == 0.5
