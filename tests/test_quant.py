"""State precisions: quantise/dequantise round-trip bounds per format, stochastic rounding unbiased within
statistical bounds and deterministic per key."""

import math

import numpy as np
import pytest
import torch

from trtllm_replayssm.quant import (E2M1_VALUES, _e2m1_code, _pack_e2m1, _unpack_e2m1, counter_uniform,
                                    dequantize_fp8_rows, dequantize_nvfp4, quantize_fp8_rows, quantize_nvfp4,
                                    quantize_state, stochastic_round)


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
    assert t.dtype == torch.float32 and t.shape == (4, 2)  # one scale per NVFP4_ROWS = 4 rows
    d = dequantize_nvfp4(packed, bscale, t)
    blocks = x.reshape(4, 8, 4, 16)
    amax = blocks.abs().amax(-1, keepdim=True)
    err = (d.reshape(4, 8, 4, 16) - blocks).abs()
    # e2m1 spacing is at most 2 (between 4 and 6) in units of amax/6; the e4m3 block scale adds 2^-4 relative.
    assert bool((err <= amax * (1 / 6 + 2**-4) + 1e-12).all())
    assert float((d - x).norm() / x.norm()) < 0.15


def _e2m1_values(codes):
    return (E2M1_VALUES[(codes & 7).long()] * torch.where(codes >= 8, -1.0, 1.0)).numpy()


def test_nvfp4_byte_order_and_the_kernels_widenings():
    """Every pair of codes packs to its own byte and back (_pack_e2m1's bit order), and the kernels' integer
    widenings of that order, written here with the same masks and shifts as common/nvfp4.cuh, are exact on words
    of random bytes: e2m1_even_to_e4m3 / e2m1_odd_to_e4m3 give e4m3 bytes worth 2^-6 times each code's value (no
    bit of a neighbouring byte leaks in), e2m1x2_scaled gives fp16 halves worth 2^-14 times them."""
    c = torch.arange(16, dtype=torch.uint8).repeat_interleave(16)
    d = torch.arange(16, dtype=torch.uint8).repeat(16)
    packed = _pack_e2m1(c, d)
    assert len(set(packed.tolist())) == 256
    even, odd = _unpack_e2m1(packed)
    assert torch.equal(even, c) and torch.equal(odd, d)
    words = np.random.default_rng(0).integers(0, 2**32, size=4096, dtype=np.uint64)
    as_e4m3 = {"even": ((words << 2) & 0x9C9C9C9C), "odd": (((words >> 2) & 0x14141414) | (words & 0x88888888))}
    for j in range(4):
        codes = _unpack_e2m1(torch.from_numpy(((words >> (8 * j)) & 0xFF).astype(np.uint8)))
        for which, code in zip(("even", "odd"), codes):
            b = torch.from_numpy(((as_e4m3[which] >> (8 * j)) & 0xFF).astype(np.uint8)).view(torch.float8_e4m3fn)
            assert np.array_equal(b.float().numpy() * 64, _e2m1_values(code)), f"byte {j}, {which} codes"
    byte = np.arange(256, dtype=np.uint32)
    halves = (((byte & 0x7) << 9) | ((byte & 0x20) << 10) | ((byte & 0x50) << 21) | ((byte & 0x8) << 23)
              | ((byte & 0x80) << 24)).view(np.float16).reshape(-1, 2).astype(np.float32)
    even, odd = _unpack_e2m1(torch.from_numpy(byte.astype(np.uint8)))
    assert np.array_equal(halves[:, 0] * 16384, _e2m1_values(even))
    assert np.array_equal(halves[:, 1] * 16384, _e2m1_values(odd))


def test_nvfp4_row_groups_are_independent():
    """A group of 4 rows is quantised from its own values only: scaling another group leaves its codes,
    block scales and group scale bit-identical (the flush of one warp's rows needs nothing else)."""
    x = torch.randn(3, 16, 64)
    y = x.clone()
    y[:, 4:8] *= 1000.0
    y[:, 12:16] *= 1e-3
    a, b = quantize_nvfp4(x), quantize_nvfp4(y)
    keep = [0, 2]  # groups 0 and 2 (rows 0-3, 8-11) are unchanged
    rows = torch.tensor([0, 1, 2, 3, 8, 9, 10, 11])
    assert torch.equal(a[0][:, rows], b[0][:, rows])
    assert torch.equal(a[1][:, rows].view(torch.uint8), b[1][:, rows].view(torch.uint8))
    assert torch.equal(a[2][:, keep], b[2][:, keep])
    assert torch.allclose(b[2][:, 1], a[2][:, 1] * 1000.0, rtol=1e-6)


def test_nvfp4_exact_values_round_trip_exactly():
    vals = E2M1_VALUES[torch.randint(0, 8, (4, 32))] * torch.where(torch.rand(4, 32) < 0.5, -1.0, 1.0)
    vals[:, 0] = 6.0  # every block reaches the top code, so the block scales are exact
    vals[:, 16] = -6.0
    packed, bscale, t = quantize_nvfp4(vals * 0.25)
    assert torch.equal(dequantize_nvfp4(packed, bscale, t), vals * 0.25)


def test_e2m1_rounds_to_nearest_even_with_thresholds():
    """The code of a scaled value is the nearest e2m1 value, ties to the even code, saturating at 6; equal to
    the comparison count of quant._e2m1_code."""
    v = torch.tensor([0.0, 0.25, 0.2500001, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.0001, 7.0, 1e9, -0.25, -0.3, -5.0, -9.0])
    m = v.abs()
    idx = ((m > 0.25).int() + (m >= 0.75).int() + (m > 1.25).int() + (m >= 1.75).int() + (m > 2.5).int()
           + (m >= 3.5).int() + (m > 5.0).int())
    want = (idx | ((v < 0).int() << 3)).to(torch.uint8)
    assert torch.equal(_e2m1_code(v), want)
    assert want.tolist()[:12] == [0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7]


def test_e2m1_branch_free_formula_equals_the_comparison_count():
    """The flush's e2m1_code (common/nvfp4.cuh) rounds fp32 bits instead of counting comparisons: from 1 up, the
    bits rounded to one mantissa bit (nearest, ties to even) and shifted right by 22, less 252, saturated at 7;
    below 1, two comparisons. The same formula in numpy's uint32 arithmetic, against quant._e2m1_code on every
    threshold, its fp32 neighbours, random values across the range, and the specials."""
    mids = np.array([0.25, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0], np.float32)
    near = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    rng = np.random.default_rng(7)
    rand = np.concatenate([rng.uniform(0, 9, 20000), rng.uniform(0, 1.01, 20000), 10.0 ** rng.uniform(-40, 38, 2000)])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38], np.float32)
    mag = np.concatenate([near, rand.astype(np.float32), specials]).astype(np.float32)
    v = np.concatenate([mag, -mag])
    m = np.abs(v)
    bits = m.view(np.uint32).astype(np.int64)
    normal = np.minimum(((bits + 0x1FFFFF + ((bits >> 22) & 1)) >> 22) - 252, 7)
    small = (m > 0.25).astype(np.int64) + (m >= 0.75)
    with np.errstate(invalid="ignore"):
        code = np.where(m >= 1, normal, small) | np.where(v < 0, 8, 0)
    want = _e2m1_code(torch.from_numpy(v)).numpy().astype(np.int64)
    assert np.array_equal(code, want), v[code != want][:8]


def test_nvfp4_rejects_ragged_rows():
    with pytest.raises(ValueError, match="multiple of 16, got 24"):
        quantize_nvfp4(torch.randn(4, 24))
    with pytest.raises(ValueError, match="multiple of 4, got 6"):
        quantize_nvfp4(torch.randn(6, 32))


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


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
def test_quantisers_give_the_same_bits_on_cpu_and_gpu(fmt):
    """The kernels' read copies are checked bit for bit against quantize_state run on the GPU, so the
    specification must not depend on the device. PyTorch's CUDA division by a Python scalar is a product with
    the fp32 reciprocal while its CPU division is a true division (the two differ on ~1 row in 5 here); the
    quantisers multiply by fp32 reciprocals, which both devices compute alike."""
    x = torch.randn(64, 8, 64, 128) * torch.logspace(-4, 4, 64)[:, None, None, None]
    on_cpu = quantize_state(x, fmt)
    on_gpu = quantize_state(x.cuda(), fmt)
    assert on_cpu.keys() == on_gpu.keys()
    for name, part in on_cpu.items():
        assert torch.equal(_bits(part), _bits(on_gpu[name].cpu())), name
