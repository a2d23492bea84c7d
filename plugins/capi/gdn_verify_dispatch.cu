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
  if (const rssm_status st = check_batch(p.batch, p.num_slots, p.slot_idx)) return st;
  if (const rssm_status st = check_window(p.window, kMinWindow, kMaxWindow, p.buffer_len, replay, kMaxBufferLen))
    return st;
  if (static_cast<int64_t>(p.num_v_heads) * p.head_v_dim * p.head_k_dim >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads * head_v_dim * head_k_dim exceeds 2^31 - 1 elements per slot");
  const NamedPtr required[] = {{p.state, "state"}, {p.q, "q"}, {p.k, "k"}, {p.v, "v"},
                               {p.g, "g"},         {p.beta, "beta"}, {p.y, "y"}};
  if (const rssm_status st = check_pointers(required)) return st;
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  if (replay) {
    const NamedPtr ring[] = {{p.ring_u, "ring_u"}, {p.ring_k, "ring_k"}, {p.ring_g, "ring_g"}, {p.cursor, "cursor"}};
    if (const rssm_status st = check_pointers(ring, "required by replay verify", true)) return st;
  } else {
    const NamedPtr snapshots[] = {{p.snapshots, "snapshots"}};
    if (const rssm_status st = check_pointers(snapshots, "required by the snapshot path", true)) return st;
  }
  // Rows of q, k and v start on 16 bytes: they are read with vector loads and 16-byte asynchronous copies.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  const RowsOf<3> rows[] = {{p.q, {p.q_batch_stride, p.q_token_stride, p.q_head_stride}, "q"},
                            {p.k, {p.k_batch_stride, p.k_token_stride, p.k_head_stride}, "k"},
                            {p.v, {p.v_batch_stride, p.v_token_stride, p.v_head_stride}, "v"}};
  if (const rssm_status st = check_rows16(rows, act_bytes)) return st;
  return RSSM_OK;
}

}  // namespace gdn
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_gdn_verify, rssm_gdn_verify_params, replayssm::gdn::validate_verify,
                         replayssm::gdn::verify_dispatch, "gdn verify")
