// Reduce-scatter of M per-lane partial sums over the LPR lanes of a state row (M and LPR powers of two), for
// kernels that take several dot products per state row at once (a speculative verify: T vectors per row).
// It generalises reduce_scatter (common/decode_tiling.cuh) to any M: every shuffle stage halves the values a
// lane keeps, so M values cost M - R shuffles instead of M log2(LPR).
//
// Afterwards lane l holds R = max(M / LPR, 1) consecutive values, flat indices multi_scatter_base(l) + 0..R-1,
// in v[0..R-1]. When M >= LPR each is the sum over all LPR lanes; when M < LPR, the SH = LPR / M aligned
// consecutive lanes that share a value hold disjoint partial sums of it (finish with group_sum<SH>).
#pragma once
#include <cuda_runtime.h>

namespace replayssm {

template <int M, int LPR>
struct MultiScatter {
  static constexpr int R = M >= LPR ? M / LPR : 1;   // values kept per lane
  static constexpr int SH = M >= LPR ? 1 : LPR / M;  // lanes sharing one value
  static_assert((M & (M - 1)) == 0 && (LPR & (LPR - 1)) == 0 && LPR <= 32, "powers of two, LPR <= 32");
};

// One shuffle stage: lanes with `mask` set keep the upper HALF values, the others the lower; each adds its
// partner's copy of the half it keeps. Recursion (not a loop) keeps every index a compile-time constant, so the
// values stay in registers.
template <int HALF, int MASK, int R, int M>
__device__ __forceinline__ void multi_reduce_stage(float (&v)[M], int lane) {
  if constexpr (HALF >= R) {
    const bool upper = lane & MASK;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
      const float send = upper ? v[i] : v[i + HALF];
      const float keep = upper ? v[i + HALF] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, MASK);
    }
    multi_reduce_stage<HALF / 2, MASK / 2, R, M>(v, lane);
  }
}

template <int M, int LPR>
__device__ __forceinline__ void multi_reduce_scatter(float (&v)[M]) {
  multi_reduce_stage<M / 2, LPR / 2, MultiScatter<M, LPR>::R, M>(v, threadIdx.x % 32);
}

// Flat index of the first value multi_reduce_scatter left in `lane`.
template <int M, int LPR>
__device__ __forceinline__ int multi_scatter_base(int lane) {
  constexpr int R = MultiScatter<M, LPR>::R;
  int base = 0;
#pragma unroll
  for (int half = M / 2, mask = LPR / 2; half >= R; half /= 2, mask /= 2)
    if (lane & mask) base += half;
  return base;
}

}  // namespace replayssm
