// The nvfp4 read copy's format (quant.py specifies it): e2m1 codes two per byte (bit order below), an e4m3 scale
// per 16 elements of a row, an fp32 scale per 4 rows; and the conversions the kernels need: the flush's encoder, and
// the non-flush reads' widenings (to fp32 in the combined kernel, mamba2/decode.cuh; to e4m3 bytes and fp16 pairs
// for the tensor cores in mamba2/output_only.cuh).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstring>

namespace replayssm {

// nvfp4 (quant.py): rows per fp32 group scale, elements per e4m3 block scale, and 448 * 6 (the largest
// block scale times the largest e2m1 value).
constexpr int kNvfp4Rows = 4, kNvfp4Block = 16;
constexpr float kNvfp4Range = 448.f * 6.f;

// e2m1 code of a value already scaled (q = x * r, r = 1 / (b t)): the nearest of {0, 0.5, 1, 1.5, 2, 3, 4, 6},
// ties to the even code, saturating at 6, sign bit 3 set for q < 0 (quant._e2m1_code; NaN gives 0). Branch-free:
// below 1 the grid step is 0.5, two comparisons (0.25 ties down to 0, 0.75 up to 1.0); from 1 up an e2m1 value is
// an fp32 value with one mantissa bit, so the bits rounded to one mantissa bit (to nearest, ties to even) and
// shifted right by 22 are 254 at 1.0, 255 at 1.5, 256 at 2.0, ..., 259 at 6.0 and 260 from 7.0 (saturated).
__device__ __forceinline__ uint32_t e2m1_code(float q) {
  const float m = fabsf(q);
  const uint32_t bits = __float_as_uint(m);
  const uint32_t normal = min(((bits + 0x1FFFFFu + ((bits >> 22) & 1u)) >> 22) - 252u, 7u);
  const uint32_t small = (m > 0.25f ? 1u : 0u) + (m >= 0.75f ? 1u : 0u);
  return (m >= 1.f ? normal : small) | (q < 0.f ? 8u : 0u);
}

// A byte of two codes (quant.py's bit order): the even element's code c (bits m, e0, e1, sign = bits 0-3 of c)
// at byte bits 0, 1, 2, 5, the odd element's code d at byte bits 4, 3, 6, 7. Chosen for the widening to e4m3 below,
// which wants a code's bits at {2, 3, 4, 7}: the even code then moves by one shift (+2), the odd one keeps e0 and
// the sign in place and moves m and e1 by one shift (-2): 5 integer operations per word of 8 codes against 7 with
// plain nibbles (an exhaustive search over the byte's 8! placements finds no fewer).
__device__ __forceinline__ uint32_t pack_e2m1x2(uint32_t c, uint32_t d) {
  return (c & 0x7u) | ((c & 0x8u) << 2) | ((d & 0x1u) << 4) | ((d & 0x2u) << 2) | ((d & 0xCu) << 4);
}
// Two e2m1 codes (one byte, pack_e2m1x2's order) widened to fp32, times 2^-14, exactly: a code's magnitude bits
// placed at fp16 bits 9-11 read as exponent E (bits 10-11) and mantissa m (bit 9); E >= 1 is 2^(E-15)(1 + m/2)
// and E = 0 the subnormal m 2^-15, both 2^-14 times the e2m1 value (the caller folds 2^14 into the scale).
__device__ __forceinline__ float2 e2m1x2_scaled(uint32_t c) {
  const uint32_t h = ((c & 0x7u) << 9) | ((c & 0x20u) << 10) | ((c & 0x50u) << 21) | ((c & 0x8u) << 23) |
                     ((c & 0x80u) << 24);
  __half2 pair;
  memcpy(&pair, &h, sizeof(h));
  return __half22float2(pair);
}

// Eight e2m1 codes (a word of four bytes in pack_e2m1x2's order, elements 2 j and 2 j + 1 in byte j) as e4m3 bytes
// (a code's bits at 2, 3, 4, 7): the even elements (0, 2, 4, 6), the odd ones.
__device__ __forceinline__ uint32_t e2m1_even_to_e4m3(uint32_t w) { return (w << 2) & 0x9C9C9C9Cu; }
__device__ __forceinline__ uint32_t e2m1_odd_to_e4m3(uint32_t w) {
  return ((w >> 2) & 0x14141414u) | (w & 0x88888888u);
}
// Four e4m3 bytes as two fp16 pairs: bytes 0, 1 (lo) and 2, 3 (hi), the first byte of each in the low half. (Taking
// the register's halves in PTX lets ptxas read the upper half in place; a shift by 16 costs an instruction.)
__device__ __forceinline__ void e4m3x4_to_half2x2(uint32_t four, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(four));
}
// Two e4m3 bytes (the low 16 bits) as two floats.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return __half22float2(__half2(h));
}
__device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return static_cast<uint32_t>(__half_as_ushort(h.x)) | (static_cast<uint32_t>(__half_as_ushort(h.y)) << 16);
}

}  // namespace replayssm
