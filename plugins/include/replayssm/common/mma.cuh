// Warp-level tensor-core helpers (sm_80 and later; the library targets sm_90): TF32 conversion, the m16n8k8 TF32
// MMA and the m16n8k16 fp16 MMA, both with fp32 accumulation, as inline PTX.
//
// Fragment layout of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, for lane l with g = l / 4, t = l % 4
// (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32):
//   A (16 x 8, row-major): a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4]
//   B (8 x 8, column n):   b0 = B[t][g], b1 = B[t + 4][g]
//   C, D (16 x 8):         c0 = C[g][2t], c1 = C[g][2t + 1], c2 = C[g + 8][2t], c3 = C[g + 8][2t + 1]
// Fragment layout of mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (".f16"; each register two halves, the
// lower k in the low half):
//   A (16 x 16): a0 = A[g][2t, 2t + 1], a1 = A[g + 8][2t, 2t + 1], a2 = A[g][2t + 8, 2t + 9], a3 = A[g + 8][2t + 8, 2t + 9]
//   B (16 x 8):  b0 = B[2t, 2t + 1][g], b1 = B[2t + 8, 2t + 9][g]
//   C, D: as above.
// The k index appears only in A and B: any permutation of k applied to both leaves the product unchanged, which
// is what lets a kernel feed A straight from the columns a lane already holds (gdn/verify.cuh,
// mamba2/output_only.cuh).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

namespace replayssm {

// fp32 -> tf32 (10 explicit mantissa bits), round to nearest with ties away from zero; the result is an fp32
// bit pattern whose low 13 bits are zero.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// d += A (16 x 8) * B (8 x 8), A and B as tf32 fragments (layout above), fp32 accumulation.
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += A (16 x 16) * B (16 x 8), A and B as fp16 fragments (layout above), fp32 accumulation. (Hopper has no
// fp8 mma.sync: ptxas runs an e4m3 m16n8k32 as fp16 conversions and two of these, plus fp32 adds.)
__device__ __forceinline__ void mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with bf16 fragments (A and B bf16, fp32 accumulation).
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace replayssm
