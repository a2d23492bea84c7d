// The one dispatch point of the conv1d family: validation of runtime values against the closed lists below,
// then the jump to the specialisation compiled in conv1d_<activation dtype>.cu (update, verify) or here
// (commit, which depends on the state dtype and k only). Updates take the register kernel when its layout
// requirements hold (update_in_registers_applies), the staged-tile kernel otherwise; both give the same bits.
#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/conv1d/conv1d.cuh"

namespace replayssm {
namespace conv1d {

// Closed lists (mirrored by trtllm_replayssm/config.py CONV1D_KERNEL_SIZES, CONV1D_MAX_TOKENS): kernel sizes
// kMinKernel..kMaxKernel, tokens 1..kMaxTokens; weight and bias in fp32 or the activation dtype.

#define RSSM_DECLARE(S, A, W, K)                                                                  \
  extern template cudaError_t launch_conv<S, A, W, K>(const rssm_conv1d_params&, cudaStream_t); \
  extern template cudaError_t launch_update_in_registers<S, A, W, K>(const rssm_conv1d_params&, cudaStream_t);
#define RSSM_DECLARE_K(S, A, W) RSSM_DECLARE(S, A, W, 2) RSSM_DECLARE(S, A, W, 3) RSSM_DECLARE(S, A, W, 4)
#define RSSM_DECLARE_W(S, A) RSSM_DECLARE_K(S, A, float) RSSM_DECLARE_K(S, A, A)
#define RSSM_DECLARE_A(S) RSSM_DECLARE_W(S, float) RSSM_DECLARE_W(S, __half) RSSM_DECLARE_W(S, __nv_bfloat16)
RSSM_DECLARE_A(float)
RSSM_DECLARE_A(__half)
RSSM_DECLARE_A(__nv_bfloat16)

// Commit depends on the state dtype and k only; update and verify on every dtype and k.
static cudaError_t dispatch(const rssm_conv1d_params& p, cudaStream_t stream) {
  return with_dtype(p.state_dtype, [&](auto state_tag) {
    using S = typename decltype(state_tag)::type;
    if (p.mode == RSSM_CONV1D_COMMIT)
      return with_value<2, 3, 4>(p.kernel_size, [&](auto k) { return launch_commit<S, decltype(k)::value>(p, stream); });
    return with_dtype(p.act_dtype, [&](auto act_tag) {
      using A = typename decltype(act_tag)::type;
      auto launch = [&](auto weight_tag) {
        using W = typename decltype(weight_tag)::type;
        const bool in_registers = update_in_registers_applies<S, A, W>(p);
        return with_value<2, 3, 4>(p.kernel_size, [&](auto k) {
          constexpr int K = decltype(k)::value;
          return in_registers ? launch_update_in_registers<S, A, W, K>(p, stream) : launch_conv<S, A, W, K>(p, stream);
        });
      };
      return p.weight_dtype == RSSM_DTYPE_FP32 ? launch(TypeTag<float>{}) : launch(TypeTag<A>{});
    });
  });
}

static int64_t dtype_bytes(int dtype) { return dtype == RSSM_DTYPE_FP32 ? 4 : 2; }

static rssm_status check_pointer(const void* ptr, const char* name, int dtype) {
  if (!ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", name);
  if (reinterpret_cast<uintptr_t>(ptr) % dtype_bytes(dtype))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s (%p) is not aligned to its %lld-byte elements", name, ptr,
                static_cast<long long>(dtype_bytes(dtype)));
  return RSSM_OK;
}

// Rows of `rows` blocks of `extent` elements, `stride` apart, must not overlap where the kernels write them.
static rssm_status check_stride(int64_t stride, int64_t extent, int rows, const char* name) {
  if (stride < 0 || (rows > 1 && stride < extent))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s=%lld is negative or smaller than the %lld elements it spans", name,
                static_cast<long long>(stride), static_cast<long long>(extent));
  return RSSM_OK;
}

static rssm_status validate(const rssm_conv1d_params& p) {
  if (p.mode != RSSM_CONV1D_UPDATE && p.mode != RSSM_CONV1D_VERIFY && p.mode != RSSM_CONV1D_COMMIT)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = update, 1 = verify, 2 = commit)", p.mode);
  if (p.kernel_size < kMinKernel || p.kernel_size > kMaxKernel)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "kernel_size=%d is not supported (supported: %d..%d)", p.kernel_size,
                kMinKernel, kMaxKernel);
  if (p.mode == RSSM_CONV1D_UPDATE && p.num_tokens != 1)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_tokens=%d must be 1 in update mode", p.num_tokens);
  if (p.num_tokens < 1 || p.num_tokens > kMaxTokens)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_tokens=%d is out of range (1..%d)", p.num_tokens, kMaxTokens);
  if (p.channels < 1) return fail(RSSM_ERR_INVALID_ARGUMENT, "channels=%d must be positive", p.channels);
  if (const rssm_status st = check_batch(p.batch, p.num_slots, p.slot_idx)) return st;
  if (const rssm_status bad = check_dtype("state_dtype", p.state_dtype)) return bad;
  const bool commit = p.mode == RSSM_CONV1D_COMMIT;
  const int64_t width = p.kernel_size - 1 + (p.mode == RSSM_CONV1D_UPDATE ? 0 : p.num_tokens);
  rssm_status st = check_pointer(p.state, "state", p.state_dtype);
  if (st != RSSM_OK) return st;
  if (p.state_channel_stride < width)
    return fail(RSSM_ERR_INVALID_ARGUMENT,
                "state_channel_stride=%lld is smaller than the window width k-1%s = %lld (kernel_size=%d)",
                static_cast<long long>(p.state_channel_stride), p.mode == RSSM_CONV1D_UPDATE ? "" : "+T",
                static_cast<long long>(width), p.kernel_size);
  st = check_stride(p.state_slot_stride, (p.channels - 1) * p.state_channel_stride + width, p.num_slots,
                    "state_slot_stride");
  if (st != RSSM_OK) return st;
  if (commit) {
    if (!p.accepted) return fail(RSSM_ERR_INVALID_ARGUMENT, "accepted is NULL (required by commit mode)");
    return RSSM_OK;
  }
  if (const rssm_status bad = check_dtype("act_dtype", p.act_dtype)) return bad;
  if (p.weight_dtype != RSSM_DTYPE_FP32 && p.weight_dtype != p.act_dtype)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "weight_dtype=%d is not supported (supported: fp32 or act_dtype=%d)",
                p.weight_dtype, p.act_dtype);
  if (p.silu != 0 && p.silu != 1) return fail(RSSM_ERR_INVALID_ARGUMENT, "silu=%d must be 0 or 1", p.silu);
  struct Named {
    const void* ptr;
    const char* name;
    int dtype;
  };
  const Named required[] = {{p.x, "x", p.act_dtype}, {p.weight, "weight", p.weight_dtype}, {p.y, "y", p.act_dtype}};
  for (const Named& r : required)
    if ((st = check_pointer(r.ptr, r.name, r.dtype)) != RSSM_OK) return st;
  if (p.bias && (st = check_pointer(p.bias, "bias", p.weight_dtype)) != RSSM_OK) return st;
  const int tokens = p.mode == RSSM_CONV1D_VERIFY ? p.num_tokens : 1;
  if ((st = check_stride(p.x_token_stride, 0, 1, "x_token_stride")) != RSSM_OK) return st;
  if ((st = check_stride(p.x_batch_stride, 0, 1, "x_batch_stride")) != RSSM_OK) return st;
  // y is written: its token rows and batch rows must not overlap.
  if ((st = check_stride(p.y_token_stride, p.channels, tokens, "y_token_stride")) != RSSM_OK) return st;
  return check_stride(p.y_batch_stride, (tokens - 1) * p.y_token_stride + p.channels, p.batch, "y_batch_stride");
}

}  // namespace conv1d
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_conv1d, rssm_conv1d_params, replayssm::conv1d::validate,
                         replayssm::conv1d::dispatch, "conv1d")
