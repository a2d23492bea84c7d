// The one dispatch point of the Mamba-2 decode family: validation of runtime values against the closed lists
// below, then the jump to the specialisation compiled in mamba2_decode_<state dtype>.cu.
#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/mamba2/decode.cuh"

namespace replayssm {
namespace mamba2 {

// Closed lists (mirrored by trtllm_replayssm/config.py; tests check the two agree).
static const int kHeadDims[] = {64, 80, 128};
static const int kDstates[] = {64, 128, 256};

#define RSSM_DECLARE(S, A, N) \
  extern template cudaError_t launch_decode<S, A, N>(const rssm_mamba2_decode_params&, cudaStream_t);
#define RSSM_DECLARE_N(S, A) RSSM_DECLARE(S, A, 64) RSSM_DECLARE(S, A, 128) RSSM_DECLARE(S, A, 256)
#define RSSM_DECLARE_ACT(S) RSSM_DECLARE_N(S, float) RSSM_DECLARE_N(S, __half) RSSM_DECLARE_N(S, __nv_bfloat16)
RSSM_DECLARE_ACT(float)
RSSM_DECLARE_ACT(__half)
RSSM_DECLARE_ACT(__nv_bfloat16)

static cudaError_t dispatch(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  return with_dtype(p.state_dtype, [&](auto state_tag) {
    return with_dtype(p.act_dtype, [&](auto act_tag) {
      using S = typename decltype(state_tag)::type;
      using A = typename decltype(act_tag)::type;
      return with_value<64, 128, 256>(p.dstate, [&](auto n) { return launch_decode<S, A, decltype(n)::value>(p, stream); });
    });
  });
}

static rssm_status validate(const rssm_mamba2_decode_params& p) {
  if (p.mode != RSSM_MAMBA2_CONVENTIONAL && p.mode != RSSM_MAMBA2_REPLAY)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = conventional, 1 = replay)", p.mode);
  if (!in_list(p.head_dim, kHeadDims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_dim=%d is not supported (supported: 64, 80, 128)", p.head_dim);
  if (!in_list(p.dstate, kDstates))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "dstate=%d is not supported (supported: 64, 128, 256)", p.dstate);
  if (const rssm_status st = check_dtype("state_dtype", p.state_dtype)) return st;
  if (const rssm_status st = check_dtype("act_dtype", p.act_dtype)) return st;
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
  return RSSM_OK;
}

}  // namespace mamba2
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_mamba2_decode, rssm_mamba2_decode_params, replayssm::mamba2::validate,
                         replayssm::mamba2::dispatch, "mamba2 decode")
