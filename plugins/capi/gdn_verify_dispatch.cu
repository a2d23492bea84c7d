// The one dispatch point of the Gated DeltaNet speculative verify family (ReplaySSM verify and the snapshot
// path): validation of runtime values against the closed lists, then the jump to the specialisation compiled in
// gdn_verify_<state dtype>.cu. The window T and the mode are dispatched inside launch_verify (gdn/verify.cuh).
#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/gdn/verify.cuh"

namespace replayssm {
namespace gdn {

// Closed lists, as the decode family (mirrored by trtllm_replayssm/config.py; tests check the two agree).
static const int kVerifyHeadDims[] = {64, 128, 256};
static const int kMinWindow = 2;

#define RSSM_DECLARE(S, A, K) \
  extern template cudaError_t launch_verify<S, A, K>(const rssm_gdn_verify_params&, cudaStream_t);
#define RSSM_DECLARE_K(S, A) RSSM_DECLARE(S, A, 64) RSSM_DECLARE(S, A, 128) RSSM_DECLARE(S, A, 256)
#define RSSM_DECLARE_ACT(S) RSSM_DECLARE_K(S, float) RSSM_DECLARE_K(S, __half) RSSM_DECLARE_K(S, __nv_bfloat16)
RSSM_DECLARE_ACT(float)
RSSM_DECLARE_ACT(__half)
RSSM_DECLARE_ACT(__nv_bfloat16)
#undef RSSM_DECLARE_ACT
#undef RSSM_DECLARE_K
#undef RSSM_DECLARE

static cudaError_t verify_dispatch(const rssm_gdn_verify_params& p, cudaStream_t stream) {
  return with_dtype(p.state_dtype, [&](auto state_tag) {
    return with_dtype(p.act_dtype, [&](auto act_tag) {
      using S = typename decltype(state_tag)::type;
      using A = typename decltype(act_tag)::type;
      return with_value<64, 128, 256>(p.head_k_dim, [&](auto k) { return launch_verify<S, A, decltype(k)::value>(p, stream); });
    });
  });
}

static rssm_status validate_verify(const rssm_gdn_verify_params& p) {
  const bool replay = p.mode == RSSM_GDN_REPLAY;
  if (p.mode != RSSM_GDN_CONVENTIONAL && !replay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = snapshot path, 1 = replay verify)", p.mode);
  if (!in_list(p.head_k_dim, kVerifyHeadDims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_k_dim=%d is not supported (supported: 64, 128, 256)", p.head_k_dim);
  if (!in_list(p.head_v_dim, kVerifyHeadDims))
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
  if (p.window < kMinWindow || p.window > kMaxWindow)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (%d..%d tokens per row)", p.window, kMinWindow,
                kMaxWindow);
  if (replay && (p.buffer_len < 2 * p.window || p.buffer_len > kMaxBufferLen))
    return fail(RSSM_ERR_INVALID_ARGUMENT,
                "buffer_len=%d is out of range for window=%d (%d..%d: the ring holds the committed history and a "
                "window of drafts)",
                p.buffer_len, p.window, 2 * p.window, kMaxBufferLen);
  if (static_cast<int64_t>(p.num_v_heads) * p.head_v_dim * p.head_k_dim >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads * head_v_dim * head_k_dim exceeds 2^31 - 1 elements per slot");
  struct Named {
    const void* ptr;
    const char* name;
  };
  const Named required[] = {{p.state, "state"}, {p.q, "q"}, {p.k, "k"}, {p.v, "v"},
                            {p.g, "g"},         {p.beta, "beta"}, {p.y, "y"}};
  for (const Named& r : required)
    if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", r.name);
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  if (replay) {
    const Named ring[] = {{p.ring_u, "ring_u"}, {p.ring_k, "ring_k"}, {p.ring_g, "ring_g"}, {p.cursor, "cursor"}};
    for (const Named& r : ring) {
      if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL (required by replay verify)", r.name);
      if (!aligned16(r.ptr)) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is not 16-byte aligned", r.name);
    }
  } else {
    if (!p.snapshots) return fail(RSSM_ERR_INVALID_ARGUMENT, "snapshots is NULL (required by the snapshot path)");
    if (!aligned16(p.snapshots)) return fail(RSSM_ERR_INVALID_ARGUMENT, "snapshots is not 16-byte aligned");
  }
  // Rows of q, k and v start on 16 bytes: they are read with vector loads and 16-byte asynchronous copies.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  struct Rows {
    const void* ptr;
    int64_t s0, s1, s2;
    const char* name;
  };
  const Rows rows[] = {{p.q, p.q_batch_stride, p.q_token_stride, p.q_head_stride, "q"},
                       {p.k, p.k_batch_stride, p.k_token_stride, p.k_head_stride, "k"},
                       {p.v, p.v_batch_stride, p.v_token_stride, p.v_head_stride, "v"}};
  for (const Rows& t : rows) {
    if (!aligned16(t.ptr) || (t.s0 * act_bytes) % 16 || (t.s1 * act_bytes) % 16 || (t.s2 * act_bytes) % 16)
      return fail(RSSM_ERR_INVALID_ARGUMENT,
                  "%s rows must be 16-byte aligned (pointer %p, strides %lld, %lld, %lld elements of %lld bytes)",
                  t.name, t.ptr, static_cast<long long>(t.s0), static_cast<long long>(t.s1),
                  static_cast<long long>(t.s2), static_cast<long long>(act_bytes));
  }
  return RSSM_OK;
}

}  // namespace gdn
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_gdn_verify, rssm_gdn_verify_params, replayssm::gdn::validate_verify,
                         replayssm::gdn::verify_dispatch, "gdn verify")
