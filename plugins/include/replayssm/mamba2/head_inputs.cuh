// A Mamba-2 head's per-token scalars (raw dt, dt_bias, A, D) in two halves: the loads (load_head_inputs), then the
// arithmetic (processed_dt), so that a kernel can issue these loads with its others before waiting on any
// (common/math.cuh issue_loads_here). Used as they arrive, the softplus threshold's branch on dt made every later
// load wait for dt's. Shared by the decode (conventional, combined, output-only) and verify kernels, whose params
// structs name these fields alike.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "replayssm/common/math.cuh"

namespace replayssm {
namespace mamba2 {

struct HeadInputs {
  float dt = 0.f, dt_bias = 0.f, A = 0.f, D = 0.f;  // dt raw (before bias and softplus); dt_bias, D: 0 if absent
};

// Token `dt_index` (the element offset of its raw dt) of head `head`.
template <typename ActT, typename Params>
__device__ __forceinline__ HeadInputs load_head_inputs(const Params& p, int64_t dt_index, int head) {
  HeadInputs in;
  in.dt = to_float(static_cast<const ActT*>(p.dt)[dt_index]);
  in.dt_bias = p.dt_bias ? p.dt_bias[head] : 0.f;
  in.A = p.A[head];
  in.D = p.D ? p.D[head] : 0.f;
  return in;
}

// dt = softplus(dt + dt_bias) (identity above 20) or dt + dt_bias, in fp32.
template <typename Params>
__device__ __forceinline__ float processed_dt(const Params& p, const HeadInputs& in) {
  const float dt = in.dt + in.dt_bias;
  return p.dt_softplus ? softplus_thresholded(dt) : dt;
}

}  // namespace mamba2
}  // namespace replayssm
