// The one dispatch point of the Mamba-2 decode family: validation of runtime values against the closed lists
// below, then the jump to the specialisation compiled in mamba2_decode_<state dtype>[_read_<copy>].cu.
#include <cstdio>
#include <string>
#include <type_traits>

#include "dispatch.h"
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

// Read copies apply to replay mode only; validate() has checked the pair against kReadCopies.
static cudaError_t dispatch(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  return with_dtype(p.state_dtype, [&](auto state_tag) {
    using S = typename decltype(state_tag)::type;
    auto launch = [&](auto read_tag) {
      using R = typename decltype(read_tag)::type;
      return with_dtype(p.act_dtype, [&](auto act_tag) {
        using A = typename decltype(act_tag)::type;
        return with_value<64, 128, 256>(p.dstate, [&](auto n) { return launch_decode<S, A, decltype(n)::value, R>(p, stream); });
      });
    };
    const int fmt = p.mode == RSSM_MAMBA2_REPLAY ? p.read_format : RSSM_READ_NONE;
    if (fmt == RSSM_READ_FP8) return launch(TypeTag<__nv_fp8_e4m3>{});
    if constexpr (std::is_same_v<S, float>) {
      if (fmt == RSSM_READ_FP16) return launch(TypeTag<__half>{});
      if (fmt == RSSM_READ_BF16) return launch(TypeTag<__nv_bfloat16>{});
      if (fmt == RSSM_READ_NVFP4) return launch(TypeTag<nvfp4x2>{});
    }
    return launch(TypeTag<void>{});
  });
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

// The latency route's field (dispatch.h check_latency_route), and a head whose tiles can own the cursor replicas
// (conventional.cuh latency_route_fits).
static rssm_status validate_latency_route(const rssm_mamba2_decode_params& p) {
  if (const rssm_status st = check_latency_route(p, RSSM_MAMBA2_REPLAY)) return st;
  if (p.latency_route_bytes && !latency_route_fits(p.head_dim, p.dstate))
    return fail(RSSM_ERR_INVALID_ARGUMENT,
                "latency_route_bytes=%lld needs head_dim * dstate / 1024 tiles <= 8, or a multiple of 4 <= 32; "
                "got %d * %d", static_cast<long long>(p.latency_route_bytes), p.head_dim, p.dstate);
  return RSSM_OK;
}

static rssm_status validate(const rssm_mamba2_decode_params& p) {
  if (p.mode != RSSM_MAMBA2_CONVENTIONAL && p.mode != RSSM_MAMBA2_REPLAY)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = conventional, 1 = replay)", p.mode);
  if (const rssm_status st = check_mamba2_layer(p, kHeadDims, kDstates)) return st;
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
  const NamedPtr required[] = {{p.state, "state"}, {p.x, "x"}, {p.dt, "dt"}, {p.B, "B"},
                               {p.C, "C"},         {p.A, "A"}, {p.y, "y"}};
  if (const rssm_status st = check_pointers(required)) return st;
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  // Rows of x, z, B and C start on 16 bytes: B and C are read with vector loads.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  const RowsOf<2> rows[] = {{p.x, {p.x_batch_stride, p.x_head_stride}, "x"},
                            {p.z, {p.z_batch_stride, p.z_head_stride}, "z"},
                            {p.B, {p.B_batch_stride, p.B_group_stride}, "B"},
                            {p.C, {p.C_batch_stride, p.C_group_stride}, "C"}};
  if (const rssm_status st = check_rows16(rows, act_bytes)) return st;
  if (p.mode == RSSM_MAMBA2_REPLAY) {
    const NamedPtr ring[] = {{p.ring_x, "ring_x"}, {p.ring_B, "ring_B"}, {p.ring_dt, "ring_dt"}, {p.cursor, "cursor"}};
    if (const rssm_status st = check_pointers(ring, "required by replay mode", true)) return st;
  }
  if (const rssm_status st = validate_read_copy(p)) return st;
  return validate_latency_route(p);
}

}  // namespace mamba2
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_mamba2_decode, rssm_mamba2_decode_params, replayssm::mamba2::validate,
                         replayssm::mamba2::dispatch, "mamba2 decode")
