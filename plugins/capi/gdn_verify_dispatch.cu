// The one dispatch point of the Gated DeltaNet speculative verify family (ReplaySSM verify and the snapshot
// path): validation of runtime values against the closed lists, then the jump to the specialisation compiled in
// gdn_verify_<state dtype>[_read_<copy>].cu. The window T and the mode are dispatched inside launch_verify
// (gdn/verify.cuh).
#include <type_traits>

#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/gdn/verify.cuh"

namespace replayssm {
namespace gdn {

// Closed lists, as the decode family (mirrored by trtllm_replayssm/config.py; tests check the two agree).
static const int kVerifyHeadDims[] = {64, 128, 256};
static const int kMinWindow = 2;

// Read copies compiled (mirrored by trtllm_replayssm/config.py GDN_KERNEL_READ_*, the decode family's list): an
// fp32 checkpoint with fp16 / bf16 activations, copy fp16, bf16 or fp8, ReplaySSM verify (not the snapshot path),
// every head_k_dim above. nvfp4 is not read by the verify kernel; KDA has no verify kernel.
static const int kReadFormats[] = {RSSM_READ_FP16, RSSM_READ_BF16, RSSM_READ_FP8};
static const char kReadCopiesText[] =
    "the GDN verify kernel reads fp16 / bf16 / fp8 copies: read_format 1, 2 or 3 with state_dtype=0 (fp32), "
    "act_dtype 1 or 2 (fp16, bf16), mode=1 (replay)";

#define RSSM_DECLARE(S, A, D, R) \
  extern template cudaError_t launch_verify<S, A, D, R>(const rssm_gdn_verify_params&, cudaStream_t);
RSSM_FOR_COPY_FAMILY_TYPES(RSSM_DECLARE)
#undef RSSM_DECLARE

// validate_verify() has admitted a read copy only with the combinations compiled (kReadFormats, kReadCopiesText).
static cudaError_t verify_dispatch(const rssm_gdn_verify_params& p, cudaStream_t stream) {
  const auto launch = [&](auto s, auto a, auto d, auto r) {
    using S = tag_type<decltype(s)>;
    using A = tag_type<decltype(a)>;
    return launch_verify<S, A, decltype(d)::value, tag_type<decltype(r)>>(p, stream);
  };
  return with_copy_family_types(p.state_dtype, p.act_dtype, p.read_format, p.head_k_dim, launch);
}

// The read-copy fields: a compiled combination (kReadCopiesText) and the copy's buffers.
static rssm_status validate_read_copy(const rssm_gdn_verify_params& p) {
  if (p.read_format == RSSM_READ_NVFP4)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=4 (nvfp4) is not supported by the GDN verify kernel; %s",
                kReadCopiesText);
  return check_read_copy(p, RSSM_GDN_REPLAY, kReadFormats, kReadCopiesText);
}

static rssm_status validate_verify(const rssm_gdn_verify_params& p) {
  const bool replay = p.mode == RSSM_GDN_REPLAY;
  if (p.mode != RSSM_GDN_CONVENTIONAL && !replay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = snapshot path, 1 = replay verify)", p.mode);
  if (const rssm_status st = check_gdn_layer(p, kVerifyHeadDims)) return st;
  // (value heads per key head bound the verify kernel's work units per key head, verify_shape)
  if (p.num_v_heads / p.num_k_heads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads=%d is more than 65535 value heads per key head (num_k_heads=%d)",
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
  return validate_read_copy(p);
}

}  // namespace gdn
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_gdn_verify, rssm_gdn_verify_params, replayssm::gdn::validate_verify,
                         replayssm::gdn::verify_dispatch, "gdn verify")
