// Gated DeltaNet / KDA per-step preparation shared by the decode kernels (decode.cuh's combined kernel,
// output_only.cuh), so that the routes of one step compute the same values bit for bit:
//   - the gates from the raw projections (params.h, gate_mode RSSM_GDN_GATES_RAW), or read precomputed; fp32 as
//     trtllm_replayssm/ops/gdn/reference.py gdn_gating;
//   - the in-kernel preparation of q and k (qk_flags) in a given lane tiling: the norm's sum of squares is a
//     per-lane FMA chain over the lane's columns, then a butterfly over the row's lanes, so a kernel that wants
//     the combined kernel's bits calls this with the combined kernel's tiling;
//   - the window weights of record j (scalar decay) from its suffix sum of g.
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/gdn/params.h"

namespace replayssm {
namespace gdn {

// One element of a raw gate input of the given rssm_dtype, widened to fp32.
__device__ __forceinline__ float load_gate(const void* ptr, int dtype, int64_t i) {
  switch (dtype) {
    case RSSM_DTYPE_FP16: return to_float(static_cast<const __half*>(ptr)[i]);
    case RSSM_DTYPE_BF16: return to_float(static_cast<const __nv_bfloat16*>(ptr)[i]);
    default: return static_cast<const float*>(ptr)[i];
  }
}

// g = -exp(A_log) softplus(a + dt_bias) for value head hv (KDA: at key channel c) of batch row b, from the raw
// gates, or the precomputed g; fp32 as reference.gdn_gating.
template <bool KDA>
__device__ __forceinline__ float gate_g(const rssm_gdn_decode_params& p, int b, int hv, int c) {
  if (p.gate_mode != RSSM_GDN_GATES_RAW)
    return KDA ? p.g[b * p.g_batch_stride + hv * p.g_head_stride + c] : p.g[b * p.g_batch_stride + hv];
  const int64_t ia = b * p.a_batch_stride + hv * p.a_head_stride + (KDA ? c : 0);
  const int64_t il = hv * p.A_log_head_stride + (KDA ? c * p.A_log_k_stride : 0);
  const int64_t id = hv * p.dt_bias_head_stride + (KDA ? c * p.dt_bias_k_stride : 0);
  const float x = load_gate(p.a, p.gate_dtype, ia) + load_gate(p.dt_bias, p.gate_param_dtype, id);
  return -expf(load_gate(p.A_log, p.gate_param_dtype, il)) * softplus_thresholded(x);
}

// beta of value head hv of batch row b: sigmoid(b) from the raw gates, or the precomputed beta.
__device__ __forceinline__ float gate_beta(const rssm_gdn_decode_params& p, int b, int hv) {
  if (p.gate_mode != RSSM_GDN_GATES_RAW) return p.beta[b * p.beta_batch_stride + hv];
  return 1.f / (1.f + expf(-load_gate(p.b, p.gate_dtype, b * p.b_batch_stride + hv)));
}

// In-kernel preparation of the current q and k (params.h qk_flags), held as NV vectors of VEC columns per lane,
// LPR lanes per row (lane col_lane holds columns (c LPR + col_lane) VEC + e): L2 norm (eps 1e-6 inside the
// square root), q scaled, then both rounded to the activation dtype (as the reference prepares them, and as the
// ring stores k): every product the kernels form reads the rounded values. qk_flags must be warp-uniform.
template <typename ActT, int NV, int VEC, int LPR>
__device__ __forceinline__ void prepare_qk(const rssm_gdn_decode_params& p, float (&Kc)[NV][VEC], float (&Qc)[NV][VEC]) {
  if (!p.qk_flags) return;
  if (p.qk_flags & RSSM_GDN_QK_L2NORM) {
    // |k|², |q|² over the LPR lanes of a row, which hold all K columns between them.
    float nk = 0.f, nq = 0.f;
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        nk = fmaf(Kc[c][e], Kc[c][e], nk);
        nq = fmaf(Qc[c][e], Qc[c][e], nq);
      }
    const float rk = rsqrtf(group_sum<LPR>(nk) + 1e-6f), rq = rsqrtf(group_sum<LPR>(nq) + 1e-6f);
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        Kc[c][e] *= rk;
        Qc[c][e] *= rq;
      }
  }
  const float qs = (p.qk_flags & RSSM_GDN_QK_SCALE) ? p.q_scale : 1.f;
  // Rounding point: the prepared q and k are rounded to the activation dtype.
#pragma unroll
  for (int c = 0; c < NV; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      Kc[c][e] = to_float(from_float<ActT>(Kc[c][e]));
      Qc[c][e] = to_float(from_float<ActT>(Qc[c][e] * qs));
    }
}

// The window weights of record j of a head (scalar decay), from ex = sum_{i=j+1..h} g_i: w_j = e^{ex},
// w_j (k_j·k), w_j (k_j·q) for the ring records j < h (0 for the others, the current token included); kk and kq
// hold k_pos·k and k_pos·q by ring position; w, ck, cq are the head's rows, indexed by record.
__device__ __forceinline__ void store_window_weights(int j, float ex, int hist, int origin, int L, const float* kk,
                                                     const float* kq, float* w, float* ck, float* cq) {
  if (j >= L) return;
  const bool ring = j < hist;
  const float wj = ring ? expf(ex) : 0.f;
  const int pos = ring ? ring_pos(origin, j, L) : 0;
  w[j] = wj;
  ck[j] = ring ? wj * kk[pos] : 0.f;
  cq[j] = ring ? wj * kq[pos] : 0.f;
}

}  // namespace gdn
}  // namespace replayssm
