"""State precisions, in PyTorch: the low-precision formats of read copies and checkpoints, and the
stochastic rounding applied when a flush stores a non-fp32 checkpoint. The specification of the kernels'
quantisers (the Mamba-2 decode flush writes fp16 / bf16 / fp8 / nvfp4 copies exactly as below).

Formats (x: [..., R, n], quantised along the last dimension):
    fp8 e4m3, per-row scale  : s = amax(|row|) * (1/448) ;  q = e4m3(x / s)
    nvfp4                    : per group of NVFP4_ROWS = 4 rows an fp32 scale t = amax(|group|) * (1/2688);
                               per block of 16 a scale b = e4m3(amax(|block|) * (1/6) * (1 / t));
                               q = e2m1(x * r) with r = 1 / (b t) (r = 0 where b t = 0), e2m1 values
                               {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign, round to nearest even (ties to the even
                               code), saturating at 6; two codes per byte (_pack_e2m1's bit order). t clamps to the
                               smallest normal fp32. Reciprocals per group and per block, products per element:
                               the kernel's flush divides once per 4 elements, not per element.
    (1/c) is the constant's reciprocal rounded to fp32, and a product with it is one fp32 product: PyTorch's
    CUDA division by a Python scalar is exactly that product while its CPU division is a true division, so the
    specification is written with products to give the same bits on every device. Every other division is
    one IEEE fp32 division between tensors, and b t is one fp32 product, so a kernel that quantises fp32
    values with the same operations in the order written writes the same bits.

Why the nvfp4 second-level scale is per group of 4 rows and not per tensor (or per slot): a copy is written
by the flush of one decode step, in one pass, by blocks that each see part of a slot's state (a block owns
some (head, tile of rows) units; how many rows a tile has depends on the launch: 8 to 64 rows, 20 for
head_dim 80). A per-tensor scale would need the amax of the whole state before any code is written: a second
pass or a grid-wide reduction. The group must lie inside what one flushing unit holds, whatever the tiling;
the kernel's finest unit of rows is one warp's rows (4, 8 or 16 consecutive rows, aligned, for every
checkpoint dtype and dstate), so 4 rows is the largest group that is always inside one warp: its amax is a
warp shuffle, no shared memory and no agreement between blocks. 16 rows would straddle tiles at head_dim 80
(tiles of 20 rows) and at 8-row tiles. Cost: 4 bytes per 4 x dstate elements (0.4 to 1.6% of the codes).
Stochastic rounding to bf16 / fp16 / fp8 e4m3: round up with probability (x - lo) / (hi - lo) between the two
neighbouring representable values, from a counter-based generator keyed on (seed, slot, step, element):
reproducible for a fixed key, unbiased in expectation.
"""

from __future__ import annotations

import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
# Reciprocals of the scale divisors, multiplied in fp32 (module docstring: why products, not divisions).
INV_E4M3_MAX = 1.0 / E4M3_MAX
INV_E2M1_MAX = 1.0 / E2M1_MAX
INV_NVFP4_RANGE = 1.0 / (E4M3_MAX * E2M1_MAX)
NVFP4_BLOCK = 16  # elements per e4m3 block scale
NVFP4_ROWS = 4  # rows per fp32 group scale (module docstring: why 4)
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float8_e4m3fn: torch.int8}


def quantize_fp8_rows(x: torch.Tensor):
    """(codes float8_e4m3fn [..., n], scale fp32 [...]) with one scale per row."""
    x = x.float()
    scale = (x.abs().amax(-1) * INV_E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny)
    return (x / scale[..., None]).to(torch.float8_e4m3fn), scale


def dequantize_fp8_rows(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return codes.float() * scale[..., None]


def _e2m1_code(v: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 code (sign bit 3, magnitude index 0..7) of values already scaled into [-6, 6], saturating at
    6; ties go to the even magnitude index, as round-to-nearest-even does. Counted by comparisons against the
    midpoints of E2M1_VALUES (strict where the lower neighbour is the even one): no per-value temporaries wider
    than a byte, and the same comparisons as the kernel's e2m1_code. NaN gives 0."""
    m = v.abs()
    idx = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for mid, lower_is_even in ((0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True),
                               (3.5, False), (5.0, True)):
        idx += (m > mid) if lower_is_even else (m >= mid)
    return idx | ((v < 0).to(torch.uint8) << 3)


def quantize_nvfp4(x: torch.Tensor):
    """x [..., R, n] -> (packed codes uint8 [..., R, n/2], block scales float8_e4m3fn [..., R, n/16],
    group scales fp32 [..., R/4]): one fp32 scale per NVFP4_ROWS consecutive rows (module docstring)."""
    x = x.float()
    if x.dim() < 2:
        raise ValueError(f"nvfp4 quantises rows of a matrix [..., R, n], got shape {tuple(x.shape)}")
    *lead, R, n = x.shape
    if n % NVFP4_BLOCK:
        raise ValueError(f"nvfp4 needs the last dimension to be a multiple of {NVFP4_BLOCK}, got {n}")
    if R % NVFP4_ROWS:
        raise ValueError(f"nvfp4 needs the row count to be a multiple of {NVFP4_ROWS}, got {R}")
    groups = x.reshape(*lead, R // NVFP4_ROWS, NVFP4_ROWS * n)
    t = (groups.abs().amax(-1) * INV_NVFP4_RANGE).clamp_min(torch.finfo(torch.float32).tiny)
    t_rows = t.repeat_interleave(NVFP4_ROWS, dim=-1)[..., None]  # [..., R, 1]
    blocks = x.reshape(*lead, R, n // NVFP4_BLOCK, NVFP4_BLOCK)
    bscale = (blocks.abs().amax(-1) * INV_E2M1_MAX * (torch.ones_like(t_rows) / t_rows)).to(torch.float8_e4m3fn)
    denom = (bscale.float() * t_rows)[..., None]
    positive = denom > 0
    r = torch.where(positive, torch.ones_like(denom) / torch.where(positive, denom, 1.0), 0.0)
    scaled = blocks * r
    codes = _e2m1_code(scaled).reshape(*lead, R, n)
    return _pack_e2m1(codes[..., 0::2], codes[..., 1::2]), bscale, t


def _pack_e2m1(c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Bytes of two e2m1 codes (bits m, e0, e1, sign = 0..3 of each): the even element's code c at byte bits 0, 1,
    2, 5 and the odd element's code d at bits 4, 3, 6, 7. The kernels widen a word of such bytes to e4m3 bytes (a
    code's bits at 2, 3, 4, 7) in 5 integer operations (one shift of the even codes; the odd codes' e0 and sign in
    place, m and e1 shifted by 2) against 7 for plain nibbles (common/nvfp4.cuh pack_e2m1x2)."""
    return (c & 7) | ((c & 8) << 2) | ((d & 1) << 4) | ((d & 2) << 2) | ((d & 12) << 4)


def _unpack_e2m1(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two codes of each byte made by _pack_e2m1: (even element's, odd element's)."""
    return (packed & 7) | ((packed >> 2) & 8), ((packed >> 4) & 1) | ((packed >> 2) & 2) | ((packed >> 4) & 12)


def dequantize_nvfp4(packed: torch.Tensor, bscale: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The fp32 values e2m1 * (b t) of a copy made by quantize_nvfp4 ([..., R, n])."""
    codes = torch.stack(_unpack_e2m1(packed), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
    vals = E2M1_VALUES.to(packed.device)[(codes & 7).long()] * torch.where(codes >= 8, -1.0, 1.0)
    n = vals.shape[-1]
    t_rows = t.float().repeat_interleave(NVFP4_ROWS, dim=-1)[..., None]
    blocks = vals.reshape(*vals.shape[:-1], n // NVFP4_BLOCK, NVFP4_BLOCK) * (bscale.float() * t_rows)[..., None]
    return blocks.reshape(*vals.shape)


def counter_uniform(seed: int, slot: int, step: int, numel: int, device="cpu") -> torch.Tensor:
    """Uniform [0, 1) floats for elements 0..numel-1 of (seed, slot, step): a stateless integer hash
    (64-bit mix of the key and the element index), so any element's draw can be recomputed alone."""
    M = (1 << 64) - 1
    key = (seed * 0x9E3779B97F4A7C15 + slot * 0xBF58476D1CE4E5B9 + step * 0x94D049BB133111EB) & M
    key = key - (1 << 64) if key >= (1 << 63) else key  # as a signed 64-bit value
    z = torch.arange(numel, dtype=torch.int64, device=device) * -7046029254386353131 + key  # 0x9E37... odd
    for shift, mult in ((30, -4658895280553007687), (27, -7723592293110705685)):  # splitmix64 finaliser
        z = (z ^ _srl(z, shift)) * mult
    z = z ^ _srl(z, 31)
    return _srl(z, 40).double().div(float(1 << 24)).float()  # top 24 bits


def _srl(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 values."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def stochastic_round(x: torch.Tensor, dtype: torch.dtype, seed: int, slot: int, step: int) -> torch.Tensor:
    """x (fp32) rounded to `dtype` (bf16, fp16 or fp8 e4m3) up or down at random, unbiased; deterministic
    for a fixed (seed, slot, step). Values beyond the format's range saturate to its largest finite value."""
    if dtype not in _BITS:
        raise ValueError(f"stochastic rounding to {dtype} is not supported (bf16, fp16, fp8 e4m3)")
    x = x.float()
    big = torch.finfo(dtype).max
    x = x.clamp(-big, big)
    r = x.to(dtype)  # nearest; the other neighbour is one unit in the last place from r towards x
    rf = r.float()
    bits = r.view(_BITS[dtype]).to(torch.int32)  # sign-magnitude: +1 moves away from zero, -1 towards it
    towards = torch.where(x.abs() > rf.abs(), bits + 1, bits - 1)
    other = torch.where(rf == x, r, towards.to(_BITS[dtype]).view(dtype))  # exact values have no other
    of = other.float()
    lo, hi = torch.minimum(rf, of), torch.maximum(rf, of)
    span = hi - lo
    p_up = torch.where(span > 0, (x - lo) / torch.where(span > 0, span, 1.0), torch.zeros_like(x))
    u = counter_uniform(seed, slot, step, x.numel(), x.device).reshape(x.shape)
    return torch.where(u < p_up, hi, lo).to(dtype)


def quantize_state(x: torch.Tensor, fmt: str) -> dict:
    """A state [..., R, N] (fp32) in a read-copy format, as named parts: {'read_state', and scales}; the names
    are the pool's buffers and the kernel params' fields (nvfp4: read_block_scale e4m3, read_scale fp32)."""
    if fmt in ("fp16", "bf16"):
        return {"read_state": x.to(torch.float16 if fmt == "fp16" else torch.bfloat16)}
    if fmt == "fp8":
        codes, scale = quantize_fp8_rows(x)
        return {"read_state": codes, "read_scale": scale}
    if fmt == "nvfp4":
        packed, bscale, t = quantize_nvfp4(x)
        return {"read_state": packed, "read_block_scale": bscale, "read_scale": t}
    raise ValueError(f"unknown read format {fmt!r}")


def dequantize_state(parts: dict, fmt: str) -> torch.Tensor:
    """The fp32 values of a read copy made by quantize_state."""
    if fmt in ("fp16", "bf16"):
        return parts["read_state"].float()
    if fmt == "fp8":
        return dequantize_fp8_rows(parts["read_state"], parts["read_scale"])
    if fmt == "nvfp4":
        return dequantize_nvfp4(parts["read_state"], parts["read_block_scale"], parts["read_scale"])
    raise ValueError(f"unknown read format {fmt!r}")
