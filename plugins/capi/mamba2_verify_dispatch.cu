// The one dispatch point of the Mamba-2 speculative verify family (ReplaySSM verify and the snapshot path):
// validation of runtime values against the closed lists, then the jump to the specialisation compiled in
// mamba2_verify_<state dtype>[_read_<copy>].cu. The window T is dispatched inside launch_verify (mamba2/verify.cuh).
#include <type_traits>

#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/mamba2/verify.cuh"

namespace replayssm {
namespace mamba2 {

// Closed lists, as the decode family (mirrored by trtllm_replayssm/config.py; tests check the two agree).
static const int kVerifyHeadDims[] = {64, 80, 128};
static const int kVerifyDstates[] = {64, 128, 256};
static const int kMinWindow = 2;

// Read copies compiled (mirrored by trtllm_replayssm/config.py MAMBA2_VERIFY_READ_*): an fp32 checkpoint with
// fp16 / bf16 activations, copy fp16, bf16 or fp8, ReplaySSM verify (not the snapshot path), every dstate above.
// nvfp4 is not read by the verify kernel (mamba2/verify.cuh says why).
static const int kReadFormats[] = {RSSM_READ_FP16, RSSM_READ_BF16, RSSM_READ_FP8};
static const char kReadCopiesText[] =
    "the verify kernel reads fp16 / bf16 / fp8 copies: read_format 1, 2 or 3 with state_dtype=0 (fp32), "
    "act_dtype 1 or 2 (fp16, bf16), mode=1 (replay)";

#define RSSM_DECLARE(S, A, D, R) \
  extern template cudaError_t launch_verify<S, A, D, R>(const rssm_mamba2_verify_params&, cudaStream_t);
RSSM_FOR_COPY_FAMILY_TYPES(RSSM_DECLARE)
#undef RSSM_DECLARE

// validate_verify() has admitted a read copy only with the combinations compiled (kReadFormats, kReadCopiesText).
static cudaError_t verify_dispatch(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  const auto launch = [&](auto s, auto a, auto d, auto r) {
    using S = tag_type<decltype(s)>;
    using A = tag_type<decltype(a)>;
    return launch_verify<S, A, decltype(d)::value, tag_type<decltype(r)>>(p, stream);
  };
  return with_copy_family_types(p.state_dtype, p.act_dtype, p.read_format, p.dstate, launch);
}

// The read-copy fields: a compiled combination (kReadCopiesText) and the copy's buffers.
static rssm_status validate_read_copy(const rssm_mamba2_verify_params& p) {
  return check_read_copy(p, RSSM_MAMBA2_REPLAY, kReadFormats, kReadCopiesText);
}

static rssm_status validate_verify(const rssm_mamba2_verify_params& p) {
  const bool replay = p.mode == RSSM_MAMBA2_REPLAY;
  if (p.mode != RSSM_MAMBA2_CONVENTIONAL && !replay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = snapshot path, 1 = replay verify)", p.mode);
  if (const rssm_status st = check_mamba2_layer(p, kVerifyHeadDims, kVerifyDstates)) return st;
  if (const rssm_status st = check_window(p.window, kMinWindow, kMaxWindow, p.buffer_len, replay, kMaxBufferLen))
    return st;
  // The kernels address within a slot with 32-bit offsets.
  if (static_cast<int64_t>(p.nheads) * p.head_dim * p.dstate >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads * head_dim * dstate = %lld exceeds 2^31 - 1 elements per slot",
                static_cast<long long>(p.nheads) * p.head_dim * p.dstate);
  const NamedPtr required[] = {{p.state, "state"}, {p.x, "x"}, {p.dt, "dt"}, {p.B, "B"},
                               {p.C, "C"},         {p.A, "A"}, {p.y, "y"}};
  if (const rssm_status st = check_pointers(required)) return st;
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  if (replay) {
    const NamedPtr ring[] = {{p.ring_x, "ring_x"}, {p.ring_B, "ring_B"}, {p.ring_dt, "ring_dt"}, {p.cursor, "cursor"}};
    if (const rssm_status st = check_pointers(ring, "required by replay verify", true)) return st;
  } else {
    const NamedPtr snapshots[] = {{p.snapshots, "snapshots"}};
    if (const rssm_status st = check_pointers(snapshots, "required by the snapshot path", true)) return st;
  }
  // Rows of x, z, B and C start on 16 bytes: they are copied with vector and bulk copies.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  const RowsOf<3> rows[] = {{p.x, {p.x_batch_stride, p.x_token_stride, p.x_head_stride}, "x"},
                            {p.z, {p.z_batch_stride, p.z_token_stride, p.z_head_stride}, "z"},
                            {p.B, {p.B_batch_stride, p.B_token_stride, p.B_group_stride}, "B"},
                            {p.C, {p.C_batch_stride, p.C_token_stride, p.C_group_stride}, "C"}};
  if (const rssm_status st = check_rows16(rows, act_bytes)) return st;
  return validate_read_copy(p);
}

}  // namespace mamba2
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_mamba2_verify, rssm_mamba2_verify_params, replayssm::mamba2::validate_verify,
                         replayssm::mamba2::verify_dispatch, "mamba2 verify")
