// The one dispatch point of the gated RMSNorm family: validation of runtime values, then the jump to the
// specialisation of (activation dtype, weight dtype, order), all compiled here (ten small kernels).
#include <cmath>

#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/norm/gated_rmsnorm.cuh"

namespace replayssm {
namespace norm {

// Closed lists (mirrored by trtllm_replayssm/config.py GATED_RMSNORM_GROUP_MULTIPLE, GATED_RMSNORM_MAX_GROUP_SIZE):
// group sizes multiples of kGroupMultiple up to kMaxGroupSize; weight in fp32 or the activation dtype.

static cudaError_t dispatch(const rssm_gated_rmsnorm_params& p, cudaStream_t stream) {
  return with_dtype(p.act_dtype, [&](auto act_tag) {
    using A = tag_type<decltype(act_tag)>;
    auto launch = [&](auto weight_tag) {
      using W = tag_type<decltype(weight_tag)>;
      return p.norm_before_gate ? launch_gated_rmsnorm<A, W, true>(p, stream)
                                : launch_gated_rmsnorm<A, W, false>(p, stream);
    };
    return p.weight_dtype == RSSM_DTYPE_FP32 ? launch(TypeTag<float>{}) : launch(TypeTag<A>{});
  });
}

static rssm_status check_pointer(const void* ptr, const char* name, int dtype) {
  const int bytes = dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  if (!ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", name);
  if (reinterpret_cast<uintptr_t>(ptr) % bytes)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s (%p) is not aligned to its %d-byte elements", name, ptr, bytes);
  return RSSM_OK;
}

static rssm_status validate(const rssm_gated_rmsnorm_params& p) {
  if (const rssm_status st = check_dtype("act_dtype", p.act_dtype)) return st;
  if (p.weight_dtype != RSSM_DTYPE_FP32 && p.weight_dtype != p.act_dtype)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "weight_dtype=%d is not supported (supported: fp32 or act_dtype=%d)",
                p.weight_dtype, p.act_dtype);
  if (p.norm_before_gate != 0 && p.norm_before_gate != 1)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "norm_before_gate=%d must be 0 (gate first) or 1 (norm first)",
                p.norm_before_gate);
  if (p.group_size < kGroupMultiple || p.group_size > kMaxGroupSize || p.group_size % kGroupMultiple != 0)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "group_size=%d is not supported (supported: multiples of %d up to %d)",
                p.group_size, kGroupMultiple, kMaxGroupSize);
  if (p.num_groups < 1) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_groups=%d must be positive", p.num_groups);
  if (p.rows < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "rows=%d is negative", p.rows);
  if (static_cast<int64_t>(p.rows) * p.num_groups > INT32_MAX)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "rows=%d x num_groups=%d exceeds %d groups per launch", p.rows,
                p.num_groups, INT32_MAX);
  if (!(p.eps > 0.f) || std::isinf(p.eps))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "eps=%g must be positive and finite", static_cast<double>(p.eps));
  rssm_status st;
  if ((st = check_pointer(p.y, "y", p.act_dtype)) != RSSM_OK) return st;
  if ((st = check_pointer(p.gate, "gate", p.act_dtype)) != RSSM_OK) return st;
  if ((st = check_pointer(p.weight, "weight", p.weight_dtype)) != RSSM_OK) return st;
  if ((st = check_pointer(p.out, "out", p.act_dtype)) != RSSM_OK) return st;
  const int64_t width = static_cast<int64_t>(p.num_groups) * p.group_size;
  if (p.y_row_stride < 0)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "y_row_stride=%lld is negative", static_cast<long long>(p.y_row_stride));
  if (p.gate_row_stride < 0)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "gate_row_stride=%lld is negative",
                static_cast<long long>(p.gate_row_stride));
  // out is written: its rows must not overlap.
  if (p.out_row_stride < 0 || (p.rows > 1 && p.out_row_stride < width))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "out_row_stride=%lld is negative or smaller than the %lld elements of a row",
                static_cast<long long>(p.out_row_stride), static_cast<long long>(width));
  return RSSM_OK;
}

}  // namespace norm
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_gated_rmsnorm, rssm_gated_rmsnorm_params, replayssm::norm::validate,
                         replayssm::norm::dispatch, "gated_rmsnorm")
