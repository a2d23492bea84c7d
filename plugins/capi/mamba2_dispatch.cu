// The one dispatch point of the Mamba-2 decode family: validation of runtime values against the closed lists
// below, then the jump to the specialisation compiled in mamba2_decode_<state dtype>[_read_<copy>].cu.
#include <cstdio>
#include <string>
#include <type_traits>

#include "error.h"
#include "replayssm.h"
#include "replayssm/mamba2/decode.cuh"

namespace replayssm {
namespace mamba2 {

// Closed lists (mirrored by trtllm_replayssm/config.py; tests check the two agree).
static const int kHeadDims[] = {64, 80, 128};
static const int kDstates[] = {64, 128, 256};
// (checkpoint dtype, read format) pairs with a compiled read-copy kernel: the copy must be narrower than the
// checkpoint (otherwise it saves no traffic; trtllm_replayssm/config.py refuses the same pairs).
struct ReadCopyPair {
  int state_dtype, read_format;
};
static const ReadCopyPair kReadCopies[] = {{RSSM_DTYPE_FP32, RSSM_READ_FP16}, {RSSM_DTYPE_FP32, RSSM_READ_BF16},
                                           {RSSM_DTYPE_FP32, RSSM_READ_FP8},  {RSSM_DTYPE_FP16, RSSM_READ_FP8},
                                           {RSSM_DTYPE_BF16, RSSM_READ_FP8},  {RSSM_DTYPE_FP32, RSSM_READ_NVFP4}};
static const char kReadCopiesText[] =
    "supported (state_dtype, read_format): (fp32, fp16), (fp32, bf16), (fp32, fp8), (fp16, fp8), (bf16, fp8), "
    "(fp32, nvfp4); read_format none with every state dtype";

#define RSSM_DECLARE(S, A, N, R) \
  extern template cudaError_t launch_decode<S, A, N, R>(const rssm_mamba2_decode_params&, cudaStream_t);
#define RSSM_DECLARE_N(S, A, R) RSSM_DECLARE(S, A, 64, R) RSSM_DECLARE(S, A, 128, R) RSSM_DECLARE(S, A, 256, R)
#define RSSM_DECLARE_ACT(S, R) \
  RSSM_DECLARE_N(S, float, R) RSSM_DECLARE_N(S, __half, R) RSSM_DECLARE_N(S, __nv_bfloat16, R)
RSSM_DECLARE_ACT(float, void)
RSSM_DECLARE_ACT(__half, void)
RSSM_DECLARE_ACT(__nv_bfloat16, void)
RSSM_DECLARE_ACT(float, __half)
RSSM_DECLARE_ACT(float, __nv_bfloat16)
RSSM_DECLARE_ACT(float, __nv_fp8_e4m3)
RSSM_DECLARE_ACT(__half, __nv_fp8_e4m3)
RSSM_DECLARE_ACT(__nv_bfloat16, __nv_fp8_e4m3)
RSSM_DECLARE_ACT(float, nvfp4x2)

template <typename S, typename A, typename R>
static cudaError_t dispatch_n(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  switch (p.dstate) {
    case 64: return launch_decode<S, A, 64, R>(p, stream);
    case 128: return launch_decode<S, A, 128, R>(p, stream);
    default: return launch_decode<S, A, 256, R>(p, stream);
  }
}

template <typename S, typename R>
static cudaError_t dispatch_act(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  switch (p.act_dtype) {
    case RSSM_DTYPE_FP32: return dispatch_n<S, float, R>(p, stream);
    case RSSM_DTYPE_FP16: return dispatch_n<S, __half, R>(p, stream);
    default: return dispatch_n<S, __nv_bfloat16, R>(p, stream);
  }
}

// Read copies apply to replay mode only; validate() has checked the pair against kReadCopies.
template <typename S>
static cudaError_t dispatch_read(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  const int fmt = p.mode == RSSM_MAMBA2_REPLAY ? p.read_format : RSSM_READ_NONE;
  switch (fmt) {
    case RSSM_READ_FP8: return dispatch_act<S, __nv_fp8_e4m3>(p, stream);
    case RSSM_READ_FP16:
      if constexpr (std::is_same_v<S, float>) return dispatch_act<S, __half>(p, stream);
      break;
    case RSSM_READ_BF16:
      if constexpr (std::is_same_v<S, float>) return dispatch_act<S, __nv_bfloat16>(p, stream);
      break;
    case RSSM_READ_NVFP4:
      if constexpr (std::is_same_v<S, float>) return dispatch_act<S, nvfp4x2>(p, stream);
      break;
    default: break;
  }
  return dispatch_act<S, void>(p, stream);
}

static cudaError_t dispatch(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  switch (p.state_dtype) {
    case RSSM_DTYPE_FP32: return dispatch_read<float>(p, stream);
    case RSSM_DTYPE_FP16: return dispatch_read<__half>(p, stream);
    default: return dispatch_read<__nv_bfloat16>(p, stream);
  }
}

static const char* read_format_name(int f) {
  switch (f) {
    case RSSM_READ_NONE: return "none";
    case RSSM_READ_FP16: return "fp16";
    case RSSM_READ_BF16: return "bf16";
    case RSSM_READ_FP8: return "fp8";
    case RSSM_READ_NVFP4: return "nvfp4";
    default: return "unknown";
  }
}

// The read-copy fields: a pair from kReadCopies, replay mode, and the copy's buffers.
static rssm_status validate_read_copy(const rssm_mamba2_decode_params& p) {
  if (p.read_format == RSSM_READ_NONE) return RSSM_OK;
  bool listed = false;
  for (const ReadCopyPair& r : kReadCopies) listed |= r.state_dtype == p.state_dtype && r.read_format == p.read_format;
  if (!listed)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) with state_dtype=%d is not supported; %s",
                p.read_format, read_format_name(p.read_format), p.state_dtype, kReadCopiesText);
  if (p.mode != RSSM_MAMBA2_REPLAY)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) needs mode=1 (replay), got mode=%d", p.read_format,
                read_format_name(p.read_format), p.mode);
  if (!p.read_state) return fail(RSSM_ERR_INVALID_ARGUMENT, "read_state is NULL (required by read_format=%d)", p.read_format);
  if (reinterpret_cast<uintptr_t>(p.read_state) & 15u)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_state is not 16-byte aligned");
  if (p.read_format == RSSM_READ_FP8 || p.read_format == RSSM_READ_NVFP4) {
    if (!p.read_scale)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_scale is NULL (required by read_format=%d, %s)", p.read_format,
                  read_format_name(p.read_format));
    if (reinterpret_cast<uintptr_t>(p.read_scale) & 3u)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_scale is not 4-byte aligned");
  }
  if (p.read_format == RSSM_READ_NVFP4) {
    if (!p.read_block_scale)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_block_scale is NULL (required by read_format=4, nvfp4)");
    if (reinterpret_cast<uintptr_t>(p.read_block_scale) & 15u)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_block_scale is not 16-byte aligned");
  }
  return RSSM_OK;
}

template <size_t K>
static bool in_list(int v, const int (&list)[K]) {
  for (int x : list)
    if (x == v) return true;
  return false;
}

static bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

static rssm_status validate(const rssm_mamba2_decode_params& p) {
  if (p.mode != RSSM_MAMBA2_CONVENTIONAL && p.mode != RSSM_MAMBA2_REPLAY)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = conventional, 1 = replay)", p.mode);
  if (!in_list(p.head_dim, kHeadDims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_dim=%d is not supported (supported: 64, 80, 128)", p.head_dim);
  if (!in_list(p.dstate, kDstates))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "dstate=%d is not supported (supported: 64, 128, 256)", p.dstate);
  if (!dtype_supported(p.state_dtype))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "state_dtype=%d is not supported (supported: fp32, fp16, bf16)",
                p.state_dtype);
  if (!dtype_supported(p.act_dtype))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "act_dtype=%d is not supported (supported: fp32, fp16, bf16)",
                p.act_dtype);
  if (p.nheads < 1 || p.nheads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads=%d is out of range (1..65535)", p.nheads);
  if (p.ngroups < 1 || p.nheads % p.ngroups != 0)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "ngroups=%d must be >= 1 and divide nheads=%d", p.ngroups, p.nheads);
  if (p.batch < 0 || p.batch > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", p.batch);
  if (p.num_slots < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_slots=%d is negative", p.num_slots);
  if (!p.slot_idx && p.batch > p.num_slots)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d exceeds num_slots=%d and no slot_idx was given", p.batch,
                p.num_slots);
  if (p.mode == RSSM_MAMBA2_REPLAY && (p.buffer_len < 1 || p.buffer_len > kMaxBufferLen))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "buffer_len=%d is out of range (1..%d)", p.buffer_len, kMaxBufferLen);
  // The kernels address within a slot and within a batch row with 32-bit offsets.
  if (static_cast<int64_t>(p.nheads) * p.head_dim * p.dstate >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads * head_dim * dstate = %lld exceeds 2^31 - 1 elements per slot",
                static_cast<long long>(p.nheads) * p.head_dim * p.dstate);
  const int64_t head_strides[] = {p.x_head_stride, p.z_head_stride, p.y_head_stride};
  for (int64_t hs : head_strides)
    if (hs < 0 || hs * p.nheads >= (int64_t{1} << 31))
      return fail(RSSM_ERR_INVALID_ARGUMENT, "head stride %lld of x, z or y is negative or spans 2^31 elements",
                  static_cast<long long>(hs));
  struct Named {
    const void* ptr;
    const char* name;
  };
  const Named required[] = {{p.state, "state"}, {p.x, "x"}, {p.dt, "dt"}, {p.B, "B"},
                            {p.C, "C"},         {p.A, "A"}, {p.y, "y"}};
  for (const Named& r : required)
    if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", r.name);
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  // Rows of x, z, B and C start on 16 bytes: B and C are read with vector loads.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  struct Rows {
    const void* ptr;
    int64_t stride0, stride1;
    const char* name;
  };
  const Rows rows[] = {{p.x, p.x_batch_stride, p.x_head_stride, "x"},
                       {p.z, p.z_batch_stride, p.z_head_stride, "z"},
                       {p.B, p.B_batch_stride, p.B_group_stride, "B"},
                       {p.C, p.C_batch_stride, p.C_group_stride, "C"}};
  for (const Rows& t : rows) {
    if (!t.ptr) continue;
    if (!aligned16(t.ptr) || (t.stride0 * act_bytes) % 16 || (t.stride1 * act_bytes) % 16)
      return fail(RSSM_ERR_INVALID_ARGUMENT,
                  "%s rows must be 16-byte aligned (pointer %p, strides %lld, %lld elements of %lld bytes)", t.name,
                  t.ptr, static_cast<long long>(t.stride0), static_cast<long long>(t.stride1),
                  static_cast<long long>(act_bytes));
  }
  if (p.mode == RSSM_MAMBA2_REPLAY) {
    const Named ring[] = {{p.ring_x, "ring_x"}, {p.ring_B, "ring_B"}, {p.ring_dt, "ring_dt"}, {p.cursor, "cursor"}};
    for (const Named& r : ring)
      if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL (required by replay mode)", r.name);
    if (!aligned16(p.ring_B)) return fail(RSSM_ERR_INVALID_ARGUMENT, "ring_B is not 16-byte aligned");
    if (!aligned16(p.ring_x)) return fail(RSSM_ERR_INVALID_ARGUMENT, "ring_x is not 16-byte aligned");
    if (!aligned16(p.ring_dt)) return fail(RSSM_ERR_INVALID_ARGUMENT, "ring_dt is not 16-byte aligned");
    if (!aligned16(p.cursor)) return fail(RSSM_ERR_INVALID_ARGUMENT, "cursor is not 16-byte aligned");
  }
  return validate_read_copy(p);
}

}  // namespace mamba2
}  // namespace replayssm

using namespace replayssm;

extern "C" size_t rssm_mamba2_decode_params_size(void) { return sizeof(rssm_mamba2_decode_params); }

extern "C" rssm_status rssm_mamba2_decode_validate(const rssm_mamba2_decode_params* params, size_t params_size) {
  clear_error();
  if (!params) return fail(RSSM_ERR_INVALID_ARGUMENT, "params is NULL");
  if (params_size != sizeof(rssm_mamba2_decode_params))
    return fail(RSSM_ERR_ABI_MISMATCH, "params size %zu differs from the library's %zu", params_size,
                sizeof(rssm_mamba2_decode_params));
  return mamba2::validate(*params);
}

extern "C" rssm_status rssm_mamba2_decode(const rssm_mamba2_decode_params* params, size_t params_size,
                                         void* stream) {
  const rssm_status st = rssm_mamba2_decode_validate(params, params_size);
  if (st != RSSM_OK) return st;
  const cudaError_t err = mamba2::dispatch(*params, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return fail(RSSM_ERR_CUDA, "mamba2 decode launch failed: %s", cudaGetErrorString(err));
  return RSSM_OK;
}
