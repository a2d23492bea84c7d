// Read copies, shared by the decode kernel families (Mamba-2, Gated DeltaNet): the flush's quantisation of a
// thread's fp32 state vectors into the copy (fp16 / bf16 / fp8 e4m3 with a scale per state row). The copy keeps
// the checkpoint's layout and thread mapping (Tiling<StateT, N>): a thread's copy vectors are its checkpoint
// vectors narrowed, so the flush writes exactly the copy elements the output-only route of the same thread reads.
// nvfp4 (Mamba-2 only) has its own store in mamba2/decode.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cfloat>
#include <type_traits>

#include "replayssm/common/math.cuh"

namespace replayssm {

// Element type of the tile the output route of a decode or verify kernel reads: the read copy's, or the
// checkpoint's without one (CopyT void).
template <typename StateT, typename CopyT>
using ReadT = std::conditional_t<std::is_void_v<CopyT>, StateT, CopyT>;

// Flush, one access instruction of a thread (RPI rows, NV vectors of VEC elements per row at this lane): stores
// the fp32 state vectors s into the read copy at `dst` (the thread's first copy element of the instruction's
// row) and, for fp8, that row's scale at `scale_dst` (written by the row's first lane). Same rounding as
// trtllm_replayssm/quant.py: fp16/bf16 nearest even; fp8 scale = max(amax * (1/448), FLT_MIN) (the reciprocal
// rounded to fp32) with the amax across the row's LPR lanes, code = e4m3(v / scale) (IEEE division,
// saturating). Every lane of the warp takes part (fp8: shuffles across the row's lanes).
template <typename CopyT, typename Tl>
__device__ __forceinline__ void store_read_copy_row(const float (&s)[Tl::NV][Tl::VEC], CopyT* dst, float* scale_dst,
                                                    int col_lane) {
  constexpr int VEC = Tl::VEC, NV = Tl::NV, LPR = Tl::LPR;
  constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;
  float scale = 1.f;
  if constexpr (kRowScale) {
    float amax = 0.f;
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) amax = fmaxf(amax, fabsf(s[v][e]));
    scale = fmaxf(group_max<LPR>(amax) * (1.f / 448.f), FLT_MIN);
    if (col_lane == 0) *scale_dst = scale;  // WRITES read_scale[slot, head, row]
  }
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    float q[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) q[e] = kRowScale ? s[v][e] / scale : s[v][e];
    store_vec<CopyT, VEC>(dst + v * LPR * VEC, q);  // WRITES read_state[slot, head, row, :]
  }
}

// The same for all KI instructions of a thread (instruction i covers row `i * RPI` past the thread's first row):
// `dst` is the thread's first copy element, `scale_dst` the scale of the thread's first row.
template <typename CopyT, typename Tl>
__device__ __forceinline__ void store_read_copy(const float (&s)[Tl::KI][Tl::NV][Tl::VEC], CopyT* dst,
                                                float* scale_dst, int col_lane) {
#pragma unroll
  for (int i = 0; i < Tl::KI; ++i)
    store_read_copy_row<CopyT, Tl>(s[i], dst + i * Tl::RPI * Tl::ROW, scale_dst ? scale_dst + i * Tl::RPI : nullptr,
                                   col_lane);
}

}  // namespace replayssm
