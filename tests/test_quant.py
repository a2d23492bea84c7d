"""State precisions: quantise/dequantise round-trip bounds per format, stochastic rounding unbiased within
statistical bounds and deterministic per key."""

import math

import pytest
import torch

from trtllm_replayssm.quant import (E2M1_VALUES, counter_uniform, dequantize_fp8_rows, dequantize_nvfp4,
                                    quantize_fp8_rows, quantize_nvfp4, stochastic_round)


def test_fp8_rows_round_trip_bound():
    x = torch.randn(16, 128) * torch.logspace(-3, 3, 16)[:, None]  # rows of very different magnitude
    codes, scale = quantize_fp8_rows(x)
    assert codes.dtype == torch.float8_e4m3fn and scale.shape == (16,)
    err = (dequantize_fp8_rows(codes, scale) - x).abs()
    # e4m3: 3 mantissa bits -> half-ulp 2^-4 relative for normals; subnormal half-spacing 2^-10 of the scale.
    assert bool((err <= x.abs() * 2**-4 + scale[:, None] * 2**-10 + 1e-30).all())


def test_nvfp4_round_trip_bound_and_layout():
    x = torch.randn(4, 8, 64)
    packed, bscale, t = quantize_nvfp4(x)
    assert packed.dtype == torch.uint8 and packed.shape == (4, 8, 32) and bscale.shape == (4, 8, 4)
    d = dequantize_nvfp4(packed, bscale, t)
    blocks = x.reshape(4, 8, 4, 16)
    amax = blocks.abs().amax(-1, keepdim=True)
    err = (d.reshape(4, 8, 4, 16) - blocks).abs()
    # e2m1 spacing is at most 2 (between 4 and 6) in units of amax/6; the e4m3 block scale adds 2^-4 relative.
    assert bool((err <= amax * (1 / 6 + 2**-4) + 1e-12).all())
    assert float((d - x).norm() / x.norm()) < 0.15


def test_nvfp4_exact_values_round_trip_exactly():
    vals = E2M1_VALUES[torch.randint(0, 8, (2, 32))] * torch.where(torch.rand(2, 32) < 0.5, -1.0, 1.0)
    vals[:, 0] = 6.0  # every block reaches the top code, so the block scales are exact
    vals[:, 16] = -6.0
    packed, bscale, t = quantize_nvfp4(vals * 0.25)
    assert torch.equal(dequantize_nvfp4(packed, bscale, t), vals * 0.25)


def test_nvfp4_rejects_ragged_rows():
    with pytest.raises(ValueError, match="multiple of 16, got 24"):
        quantize_nvfp4(torch.randn(2, 24))


def test_counter_uniform_is_stateless_and_uniform():
    u = counter_uniform(3, 5, 7, 100000)
    assert bool(((u >= 0) & (u < 1)).all())
    assert abs(float(u.mean()) - 0.5) < 4 * math.sqrt(1 / 12 / u.numel())
    assert torch.equal(counter_uniform(3, 5, 7, 10), u[:10])  # an element's draw depends on its index only
    assert not torch.equal(counter_uniform(3, 5, 8, 10), u[:10])
    assert not torch.equal(counter_uniform(3, 6, 7, 10), u[:10])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_stochastic_rounding_unbiased_and_deterministic(dtype):
    x = (torch.randn(64) * 3).float()
    n = 4000
    draws = torch.stack([stochastic_round(x, dtype, seed=11, slot=2, step=k).float() for k in range(n)])
    rn = x.to(dtype).float()
    lo = torch.minimum(draws.min(0).values, rn)
    hi = torch.maximum(draws.max(0).values, rn)
    assert bool(((draws == lo) | (draws == hi)).all()), "a draw is not one of the two neighbours"
    span = (hi - lo).clamp_min(1e-30)
    p = ((x - lo) / span).clamp(0, 1)
    sigma = span * torch.sqrt(p * (1 - p) / n) + 1e-12
    assert bool(((draws.mean(0) - x).abs() <= 5 * sigma + 1e-7 * x.abs()).all()), "biased"
    assert torch.equal(stochastic_round(x, dtype, 11, 2, 5), stochastic_round(x, dtype, 11, 2, 5))
    assert not torch.equal(stochastic_round(x, dtype, 11, 2, 5), stochastic_round(x, dtype, 12, 2, 5))


def test_stochastic_rounding_keeps_representable_values():
    x = torch.tensor([0.0, 1.0, -2.0, 0.5, 448.0])
    assert torch.equal(stochastic_round(x, torch.float8_e4m3fn, 1, 0, 0).float(), x)
    with pytest.raises(ValueError, match="not supported"):
        stochastic_round(x, torch.float32, 1, 0, 0)
