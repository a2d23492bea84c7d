// The one dispatch point of the conv1d family: validation of runtime values against the closed lists below,
// then the jump to the specialisation compiled in conv1d_<activation dtype>.cu (update, verify) or here
// (commit, which depends on the state dtype and k only).
#include "error.h"
#include "replayssm.h"
#include "replayssm/conv1d/conv1d.cuh"

namespace replayssm {
namespace conv1d {

// Closed lists (mirrored by trtllm_replayssm/config.py CONV1D_KERNEL_SIZES, CONV1D_MAX_TOKENS): kernel sizes
// kMinKernel..kMaxKernel, tokens 1..kMaxTokens; weight and bias in fp32 or the activation dtype.

#define RSSM_DECLARE(S, A, W, K) \
  extern template cudaError_t launch_conv<S, A, W, K>(const rssm_conv1d_params&, cudaStream_t);
#define RSSM_DECLARE_K(S, A, W) RSSM_DECLARE(S, A, W, 2) RSSM_DECLARE(S, A, W, 3) RSSM_DECLARE(S, A, W, 4)
#define RSSM_DECLARE_W(S, A) RSSM_DECLARE_K(S, A, float) RSSM_DECLARE_K(S, A, A)
#define RSSM_DECLARE_A(S) RSSM_DECLARE_W(S, float) RSSM_DECLARE_W(S, __half) RSSM_DECLARE_W(S, __nv_bfloat16)
RSSM_DECLARE_A(float)
RSSM_DECLARE_A(__half)
RSSM_DECLARE_A(__nv_bfloat16)

template <typename S, typename A, typename W>
static cudaError_t dispatch_k(const rssm_conv1d_params& p, cudaStream_t stream) {
  switch (p.kernel_size) {
    case 2: return launch_conv<S, A, W, 2>(p, stream);
    case 3: return launch_conv<S, A, W, 3>(p, stream);
    default: return launch_conv<S, A, W, 4>(p, stream);
  }
}

template <typename S, typename A>
static cudaError_t dispatch_w(const rssm_conv1d_params& p, cudaStream_t stream) {
  if (p.weight_dtype == RSSM_DTYPE_FP32) return dispatch_k<S, A, float>(p, stream);
  return dispatch_k<S, A, A>(p, stream);
}

template <typename S>
static cudaError_t dispatch_act(const rssm_conv1d_params& p, cudaStream_t stream) {
  if (p.mode == RSSM_CONV1D_COMMIT) {
    switch (p.kernel_size) {
      case 2: return launch_commit<S, 2>(p, stream);
      case 3: return launch_commit<S, 3>(p, stream);
      default: return launch_commit<S, 4>(p, stream);
    }
  }
  switch (p.act_dtype) {
    case RSSM_DTYPE_FP32: return dispatch_w<S, float>(p, stream);
    case RSSM_DTYPE_FP16: return dispatch_w<S, __half>(p, stream);
    default: return dispatch_w<S, __nv_bfloat16>(p, stream);
  }
}

static cudaError_t dispatch(const rssm_conv1d_params& p, cudaStream_t stream) {
  switch (p.state_dtype) {
    case RSSM_DTYPE_FP32: return dispatch_act<float>(p, stream);
    case RSSM_DTYPE_FP16: return dispatch_act<__half>(p, stream);
    default: return dispatch_act<__nv_bfloat16>(p, stream);
  }
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
  if (p.batch < 0 || p.batch > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", p.batch);
  if (p.num_slots < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_slots=%d is negative", p.num_slots);
  if (!p.slot_idx && p.batch > p.num_slots)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d exceeds num_slots=%d and no slot_idx was given", p.batch,
                p.num_slots);
  if (!dtype_supported(p.state_dtype))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "state_dtype=%d is not supported (supported: fp32, fp16, bf16)",
                p.state_dtype);
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
  if (!dtype_supported(p.act_dtype))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "act_dtype=%d is not supported (supported: fp32, fp16, bf16)",
                p.act_dtype);
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

using namespace replayssm;

extern "C" size_t rssm_conv1d_params_size(void) { return sizeof(rssm_conv1d_params); }

extern "C" rssm_status rssm_conv1d_validate(const rssm_conv1d_params* params, size_t params_size) {
  clear_error();
  if (!params) return fail(RSSM_ERR_INVALID_ARGUMENT, "params is NULL");
  if (params_size != sizeof(rssm_conv1d_params))
    return fail(RSSM_ERR_ABI_MISMATCH, "params size %zu differs from the library's %zu", params_size,
                sizeof(rssm_conv1d_params));
  return conv1d::validate(*params);
}

extern "C" rssm_status rssm_conv1d(const rssm_conv1d_params* params, size_t params_size, void* stream) {
  const rssm_status st = rssm_conv1d_validate(params, params_size);
  if (st != RSSM_OK) return st;
  const cudaError_t err = conv1d::dispatch(*params, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return fail(RSSM_ERR_CUDA, "conv1d launch failed: %s", cudaGetErrorString(err));
  return RSSM_OK;
}
