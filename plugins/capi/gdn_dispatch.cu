// The one dispatch point of the Gated DeltaNet decode family: validation of runtime values against the closed
// lists below, then the jump to the specialisation compiled in gdn_decode_<state dtype>.cu.
#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/gdn/decode.cuh"

namespace replayssm {
namespace gdn {

// Closed list (mirrored by trtllm_replayssm/config.py GDN_HEAD_DIMS): head_k_dim and head_v_dim.
static const int kHeadDims[] = {64, 128, 256};

#define RSSM_DECLARE(S, A, K) \
  extern template cudaError_t launch_decode<S, A, K>(const rssm_gdn_decode_params&, cudaStream_t);
#define RSSM_DECLARE_K(S, A) RSSM_DECLARE(S, A, 64) RSSM_DECLARE(S, A, 128) RSSM_DECLARE(S, A, 256)
#define RSSM_DECLARE_ACT(S) RSSM_DECLARE_K(S, float) RSSM_DECLARE_K(S, __half) RSSM_DECLARE_K(S, __nv_bfloat16)
RSSM_DECLARE_ACT(float)
RSSM_DECLARE_ACT(__half)
RSSM_DECLARE_ACT(__nv_bfloat16)

static cudaError_t dispatch(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  return with_dtype(p.state_dtype, [&](auto state_tag) {
    return with_dtype(p.act_dtype, [&](auto act_tag) {
      using S = typename decltype(state_tag)::type;
      using A = typename decltype(act_tag)::type;
      return with_value<64, 128, 256>(p.head_k_dim, [&](auto k) { return launch_decode<S, A, decltype(k)::value>(p, stream); });
    });
  });
}

static rssm_status validate(const rssm_gdn_decode_params& p) {
  if (p.mode != RSSM_GDN_CONVENTIONAL && p.mode != RSSM_GDN_REPLAY)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = conventional, 1 = replay)", p.mode);
  if (!in_list(p.head_k_dim, kHeadDims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_k_dim=%d is not supported (supported: 64, 128, 256)", p.head_k_dim);
  if (!in_list(p.head_v_dim, kHeadDims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_v_dim=%d is not supported (supported: 64, 128, 256)", p.head_v_dim);
  if (const rssm_status st = check_dtype("state_dtype", p.state_dtype)) return st;
  if (const rssm_status st = check_dtype("act_dtype", p.act_dtype)) return st;
  if (p.num_k_heads < 1 || p.num_k_heads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_k_heads=%d is out of range (1..65535)", p.num_k_heads);
  if (p.num_v_heads < 1 || p.num_v_heads % p.num_k_heads != 0 || p.num_v_heads / p.num_k_heads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads=%d must be a positive multiple of num_k_heads=%d",
                p.num_v_heads, p.num_k_heads);
  if (p.batch < 0 || p.batch > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", p.batch);
  if (p.num_slots < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_slots=%d is negative", p.num_slots);
  if (!p.slot_idx && p.batch > p.num_slots)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d exceeds num_slots=%d and no slot_idx was given", p.batch,
                p.num_slots);
  if (p.mode == RSSM_GDN_REPLAY && (p.buffer_len < 1 || p.buffer_len > kMaxBufferLen))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "buffer_len=%d is out of range (1..%d)", p.buffer_len, kMaxBufferLen);
  // The kernels address within a slot and within a batch row with 32-bit offsets.
  if (static_cast<int64_t>(p.num_v_heads) * p.head_v_dim * p.head_k_dim >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads * head_v_dim * head_k_dim exceeds 2^31 - 1 elements per slot");
  const int64_t head_strides[] = {p.v_head_stride, p.y_head_stride};
  for (int64_t hs : head_strides)
    if (hs < 0 || hs * p.num_v_heads >= (int64_t{1} << 31))
      return fail(RSSM_ERR_INVALID_ARGUMENT, "head stride %lld of v or y is negative or spans 2^31 elements",
                  static_cast<long long>(hs));
  struct Named {
    const void* ptr;
    const char* name;
  };
  const Named required[] = {{p.state, "state"}, {p.q, "q"}, {p.k, "k"}, {p.v, "v"},
                            {p.g, "g"},         {p.beta, "beta"}, {p.y, "y"}};
  for (const Named& r : required)
    if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", r.name);
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  // Rows of q, k are read with vector loads, rows of v with 8-byte asynchronous copies.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  struct Rows {
    const void* ptr;
    int64_t stride0, stride1;
    const char* name;
  };
  const Rows rows[] = {{p.q, p.q_batch_stride, p.q_head_stride, "q"},
                       {p.k, p.k_batch_stride, p.k_head_stride, "k"},
                       {p.v, p.v_batch_stride, p.v_head_stride, "v"}};
  for (const Rows& t : rows) {
    if (!aligned16(t.ptr) || (t.stride0 * act_bytes) % 16 || (t.stride1 * act_bytes) % 16)
      return fail(RSSM_ERR_INVALID_ARGUMENT,
                  "%s rows must be 16-byte aligned (pointer %p, strides %lld, %lld elements of %lld bytes)", t.name,
                  t.ptr, static_cast<long long>(t.stride0), static_cast<long long>(t.stride1),
                  static_cast<long long>(act_bytes));
  }
  if (p.mode == RSSM_GDN_REPLAY) {
    const Named ring[] = {{p.ring_u, "ring_u"}, {p.ring_k, "ring_k"}, {p.ring_g, "ring_g"}, {p.cursor, "cursor"}};
    for (const Named& r : ring) {
      if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL (required by replay mode)", r.name);
      if (!aligned16(r.ptr)) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is not 16-byte aligned", r.name);
    }
  }
  return RSSM_OK;
}

}  // namespace gdn
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_gdn_decode, rssm_gdn_decode_params, replayssm::gdn::validate,
                         replayssm::gdn::dispatch, "gdn decode")
