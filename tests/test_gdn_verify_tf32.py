"""CPU check of the precision policy of the GDN verify kernel's tensor-core path (plugins/include/replayssm/gdn/
verify.cuh): with 16-bit activations it rounds an fp32 state to tf32 (round to nearest, ties away) in S0 k_i and
S0 q_i, everything else as the reference. Emulated here by patching the reference's row function, on the GPU
kernel tests' problems (a shorter run, with flushes): the drift it adds must stay well inside their 16-bit
tolerances, so that the kernel's own summation-order error still fits beside it."""

import pytest
import torch

import trtllm_replayssm.ops.gdn.spec_reference as spec_reference
from gdn_spec_cases import spec_pool, window_inputs
from mamba2_cases import rel_err, slot_map, worst as worst_of
from test_gdn_spec_kernels import TOL
from trtllm_replayssm.config import GdnLayerShape, ReplayConfig
from trtllm_replayssm.ops.slots import commit_reference

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def tf32(x):
    """x rounded to tf32 as cvt.rna.tf32.f32 does (10 mantissa bits, ties away from zero), in x's dtype."""
    bits = x.to(F32).contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(F32).to(x.dtype)


def tensor_core_row(S0, kw, uw, gw, q, k, v, g, beta, flush, S0_read=None):
    """replay_row (ops/gdn/replay_reference.py, non-flush branch, scalar decay) with e^E (tf32(S0) k) and
    e^E (tf32(S0) q) as the kernel takes them; k, q are 16-bit values here, exact in tf32."""
    assert not flush and g.dim() == 1
    h = kw.shape[0]
    gall = torch.cat([gw, g[None]])
    suffix = torch.zeros_like(gall)
    for j in range(h - 1, -1, -1):
        suffix[j] = suffix[j + 1] + gall[j + 1]
    eE = torch.exp(suffix[0] + gall[0])[:, None]
    Sk = eE * (tf32(S0) * k[:, None, :]).sum(-1)
    Sq = eE * (tf32(S0 if S0_read is None else S0_read) * q[:, None, :]).sum(-1)
    for j in range(h):
        kd = kw[j] * torch.exp(suffix[j])[:, None]
        Sk = Sk + uw[j] * (kd * k).sum(-1)[:, None]
        Sq = Sq + uw[j] * (kd * q).sum(-1)[:, None]
    u = beta[:, None] * (v - Sk)
    return Sq + u * (k * q).sum(-1)[:, None], u, None


@pytest.mark.parametrize("act_dtype, T, L", [(BF16, 8, 16), (F16, 2, 4)], ids=["bf16-T8", "fp16-T2"])
def test_tf32_state_rounding_stays_inside_16bit_tolerances(act_dtype, T, L, monkeypatch):
    torch.manual_seed(0)
    shape = GdnLayerShape(1, 2, 128, 128)
    pool = spec_pool(shape, 9, ReplayConfig(L, F32, act_dtype), T, "cpu")
    ref = pool.clone()
    worst = {"y": 0.0, "ring_u": 0.0, "checkpoint": 0.0}
    for _ in range(12):
        slots = slot_map(4, 9, n_pad=1, device="cpu")
        inputs = window_inputs(shape, 4, T, act_dtype, "cpu")
        with monkeypatch.context() as m:
            m.setattr(spec_reference, "replay_row", tensor_core_row)
            y = spec_reference.replay_verify_reference(pool, *inputs, slots)
        y_ref = spec_reference.replay_verify_reference(ref, *inputs, slots)
        live = slots >= 0
        worst["y"] = worst_of(worst["y"], rel_err(y[live], y_ref[live]))
        worst["ring_u"] = worst_of(worst["ring_u"], rel_err(pool.ring_u, ref.ring_u))
        worst["checkpoint"] = worst_of(worst["checkpoint"], rel_err(pool.checkpoint, ref.checkpoint))
        accepted = torch.randint(1, T + 1, (4,), dtype=torch.int32)
        commit_reference(pool, accepted, slot_idx=slots)
        commit_reference(ref, accepted, slot_idx=slots)
    assert worst["y"] > 0, "the emulation did not take effect"
    assert worst_of(*worst.values()) < TOL[act_dtype] / 3, worst
