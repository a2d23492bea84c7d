"""GPU check of the precision of the GDN verify kernel's tensor-core path (plugins/include/replayssm/gdn/verify.cuh):
with 16-bit activations at K = 128 it takes S0 k_i and S0 q_i on TF32 MMAs, rounding an fp32 state to tf32 (10
mantissa bits, round to nearest), everything else in fp32 as the reference (ops/gdn/spec_reference.py).

The bound, derived from that rounding: each product term of S0 k_i and S0 q_i carries a relative error of at most
u_tf32 = 2^-11; y_i = S0 q_i + sum_j u_j (k_j . q_i) sees it in its first term and again through the window's
earlier u_j (|beta| < 1, unit-norm k, q scaled by K^-1/2: their sum is below the first term), so y and u before
rounding stay within 2 u_tf32 of the reference's (norm-relative); both sides then round to the activation dtype,
which moves each by at most one unit roundoff u_act: 2 u_tf32 + 2 u_act. The checkpoint is never rounded to tf32
and sees the error only through the u records a fold reads: the same bound. fp32 summation order (2e-5 at most,
tests/test_gdn_spec_kernels.py) is far below it. Expected: a CPU emulation of the tf32 rounding in the reference
moved y by ~9e-4 with bf16 activations (bound 8.8e-3) and ~3.4e-4 with fp16 (bound 2.0e-3)."""

import pytest
import torch

from gdn_spec_cases import spec_pool, window_inputs
from mamba2_cases import rel_err, slot_map, worst
from test_gdn_spec_kernels import PREPARED, _has_spec_kernels
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.gdn import replay_verify
from trtllm_replayssm.ops.gdn.spec_reference import replay_verify_reference
from trtllm_replayssm.ops.slots import commit_reference, spec_commit

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _has_spec_kernels(), reason="kernel library built without the GDN verify kernels")]

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
U_TF32 = 2.0 ** -11
U_ACT = {F16: 2.0 ** -11, BF16: 2.0 ** -8}
DEV = torch.device("cuda")


def tf32_bound(act_dtype):
    return 2 * U_TF32 + 2 * U_ACT[act_dtype]


def worst_against_reference(act_dtype, dims, T, L, steps=12, batch=4, device=DEV):
    """Kernel verify + commit against the reference from the same pool (fp32 checkpoint): the worst norm-relative
    differences of y (live rows), the ring's u records and the checkpoint over `steps` steps of random accepted
    counts (flushes included), and how many slot folds the steps made."""
    shape = GdnLayerShape(*dims)
    pool = spec_pool(shape, 9, ReplayConfig(L, F32, act_dtype), T, device)
    ref = pool.clone()
    errs, folds = {"y": 0.0, "ring_u": 0.0, "checkpoint": 0.0}, 0
    for _ in range(steps):
        slots = slot_map(batch, 9, n_pad=1, device=device)
        inputs = window_inputs(shape, batch, T, act_dtype, device)
        hist = pool.history()
        folds += sum(int(hist[s]) > 0 and int(hist[s]) + 2 * T > L for s in slots[slots >= 0].tolist())
        y = replay_verify(pool, *inputs, slot_idx=slots, **PREPARED)
        y_ref = replay_verify_reference(ref, *inputs, slots)
        live = slots >= 0
        errs["y"] = worst(errs["y"], rel_err(y[live], y_ref[live]))
        errs["ring_u"] = worst(errs["ring_u"], rel_err(pool.ring_u, ref.ring_u))
        errs["checkpoint"] = worst(errs["checkpoint"], rel_err(pool.checkpoint, ref.checkpoint))
        accepted = torch.randint(1, T + 1, (batch,), dtype=torch.int32, device=device)
        spec_commit(pool, accepted, slot_idx=slots, window=T)
        commit_reference(ref, accepted, slot_idx=slots)
    return errs, folds


@pytest.mark.parametrize("act_dtype, dims, T, L", [
    (BF16, (1, 2, 128, 128), 8, 16), (F16, (1, 2, 128, 128), 2, 4), (F16, (2, 4, 128, 128), 8, 24),
    (BF16, (2, 4, 128, 128), 5, 11)], ids=["bf16-T8", "fp16-T2", "fp16-T8", "bf16-T5"])
def test_tensor_core_path_stays_within_the_tf32_bound(act_dtype, dims, T, L):
    errs, folds = worst_against_reference(act_dtype, dims, T, L)
    assert folds >= 3, f"only {folds} folds: the case does not exercise the checkpoint"
    assert errs["y"] > 0, "y equals the reference bit for bit: the comparison shows nothing"
    bound = tf32_bound(act_dtype)
    assert all(e < bound for e in errs.values()), f"{errs} against the bound {bound:.2e}"
