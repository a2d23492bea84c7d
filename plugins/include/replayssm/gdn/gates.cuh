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

// The gates' arithmetic from their raw inputs, fp32 as reference.gdn_gating: g = -exp(A_log) softplus(a + dt_bias),
// beta = sigmoid(b).
__device__ __forceinline__ float raw_gate_g(float a, float dt_bias, float A_log) {
  return -expf(A_log) * softplus_thresholded(a + dt_bias);
}
__device__ __forceinline__ float raw_gate_beta(float b) { return 1.f / (1.f + expf(-b)); }

// g for value head hv (KDA: at key channel c) of batch row b, from the raw gates, or the precomputed g.
template <bool KDA>
__device__ __forceinline__ float gate_g(const rssm_gdn_decode_params& p, int b, int hv, int c) {
  if (p.gate_mode != RSSM_GDN_GATES_RAW)
    return KDA ? p.g[b * p.g_batch_stride + hv * p.g_head_stride + c] : p.g[b * p.g_batch_stride + hv];
  const int64_t ia = b * p.a_batch_stride + hv * p.a_head_stride + (KDA ? c : 0);
  const int64_t il = hv * p.A_log_head_stride + (KDA ? c * p.A_log_k_stride : 0);
  const int64_t id = hv * p.dt_bias_head_stride + (KDA ? c * p.dt_bias_k_stride : 0);
  return raw_gate_g(load_gate(p.a, p.gate_dtype, ia), load_gate(p.dt_bias, p.gate_param_dtype, id),
                    load_gate(p.A_log, p.gate_param_dtype, il));
}

// beta of value head hv of batch row b: sigmoid(b) from the raw gates, or the precomputed beta.
__device__ __forceinline__ float gate_beta(const rssm_gdn_decode_params& p, int b, int hv) {
  if (p.gate_mode != RSSM_GDN_GATES_RAW) return p.beta[b * p.beta_batch_stride + hv];
  return raw_gate_beta(load_gate(p.b, p.gate_dtype, b * p.b_batch_stride + hv));
}

// A value head's scalar gates (g and beta as gate_g<false> and gate_beta give them, the same bits) in two halves:
// the loads (load_head_gates), then the arithmetic (head_gates), so that a kernel can issue these loads with its
// others before waiting on any (common/math.cuh issue_loads_here). Precomputed gates: g and beta as read.
struct HeadGateInputs {
  float a_or_g = 0.f, dt_bias = 0.f, A_log = 0.f, b_or_beta = 0.f;
};
__device__ __forceinline__ HeadGateInputs load_head_gates(const rssm_gdn_decode_params& p, int b, int hv) {
  HeadGateInputs in;
  if (p.gate_mode != RSSM_GDN_GATES_RAW) {
    in.a_or_g = p.g[b * p.g_batch_stride + hv];
    in.b_or_beta = p.beta[b * p.beta_batch_stride + hv];
  } else {
    in.a_or_g = load_gate(p.a, p.gate_dtype, b * p.a_batch_stride + hv * p.a_head_stride);
    in.dt_bias = load_gate(p.dt_bias, p.gate_param_dtype, hv * p.dt_bias_head_stride);
    in.A_log = load_gate(p.A_log, p.gate_param_dtype, hv * p.A_log_head_stride);
    in.b_or_beta = load_gate(p.b, p.gate_dtype, b * p.b_batch_stride + hv);
  }
  return in;
}
__device__ __forceinline__ void head_gates(const rssm_gdn_decode_params& p, const HeadGateInputs& in, float& g,
                                           float& beta) {
  const bool raw = p.gate_mode == RSSM_GDN_GATES_RAW;
  g = raw ? raw_gate_g(in.a_or_g, in.dt_bias, in.A_log) : in.a_or_g;
  beta = raw ? raw_gate_beta(in.b_or_beta) : in.b_or_beta;
}

// The current k and q of batch row b, key head kh, as NV vectors of VEC columns per lane, LPR lanes per row (lane
// col_lane holds columns (c LPR + col_lane) VEC + e): the layout prepare_qk and the kernels' dots take.
template <typename ActT, int NV, int VEC, int LPR>
__device__ __forceinline__ void load_qk(const rssm_gdn_decode_params& p, int b, int kh, int col_lane,
                                        float (&Kc)[NV][VEC], float (&Qc)[NV][VEC]) {
  const ActT* kg = static_cast<const ActT*>(p.k) + b * p.k_batch_stride + kh * p.k_head_stride;
  const ActT* qg = static_cast<const ActT*>(p.q) + b * p.q_batch_stride + kh * p.q_head_stride;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    load_vec<ActT, VEC>(kg + (c * LPR + col_lane) * VEC, Kc[c]);
    load_vec<ActT, VEC>(qg + (c * LPR + col_lane) * VEC, Qc[c]);
  }
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
