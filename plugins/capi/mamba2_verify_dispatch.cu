// The one dispatch point of the Mamba-2 speculative verify family (ReplaySSM verify and the snapshot path):
// validation of runtime values against the closed lists, then the jump to the specialisation compiled in
// mamba2_verify_<state dtype>.cu. The window T is dispatched inside launch_verify (mamba2/verify.cuh).
#include "error.h"
#include "replayssm.h"
#include "replayssm/mamba2/verify.cuh"

namespace replayssm {
namespace mamba2 {

// Closed lists, as the decode family (mirrored by trtllm_replayssm/config.py; tests check the two agree).
static const int kVerifyHeadDims[] = {64, 80, 128};
static const int kVerifyDstates[] = {64, 128, 256};
static const int kMinWindow = 2;

#define RSSM_DECLARE(S, A, N) \
  extern template cudaError_t launch_verify<S, A, N>(const rssm_mamba2_verify_params&, cudaStream_t);
#define RSSM_DECLARE_N(S, A) RSSM_DECLARE(S, A, 64) RSSM_DECLARE(S, A, 128) RSSM_DECLARE(S, A, 256)
#define RSSM_DECLARE_ACT(S) RSSM_DECLARE_N(S, float) RSSM_DECLARE_N(S, __half) RSSM_DECLARE_N(S, __nv_bfloat16)
RSSM_DECLARE_ACT(float)
RSSM_DECLARE_ACT(__half)
RSSM_DECLARE_ACT(__nv_bfloat16)
#undef RSSM_DECLARE_ACT
#undef RSSM_DECLARE_N
#undef RSSM_DECLARE

template <typename S, typename A>
static cudaError_t verify_dispatch_n(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  switch (p.dstate) {
    case 64: return launch_verify<S, A, 64>(p, stream);
    case 128: return launch_verify<S, A, 128>(p, stream);
    default: return launch_verify<S, A, 256>(p, stream);
  }
}

template <typename S>
static cudaError_t verify_dispatch_act(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  switch (p.act_dtype) {
    case RSSM_DTYPE_FP32: return verify_dispatch_n<S, float>(p, stream);
    case RSSM_DTYPE_FP16: return verify_dispatch_n<S, __half>(p, stream);
    default: return verify_dispatch_n<S, __nv_bfloat16>(p, stream);
  }
}

static cudaError_t verify_dispatch(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  switch (p.state_dtype) {
    case RSSM_DTYPE_FP32: return verify_dispatch_act<float>(p, stream);
    case RSSM_DTYPE_FP16: return verify_dispatch_act<__half>(p, stream);
    default: return verify_dispatch_act<__nv_bfloat16>(p, stream);
  }
}

template <size_t K>
static bool listed(int v, const int (&list)[K]) {
  for (int x : list)
    if (x == v) return true;
  return false;
}

static bool is_aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

static rssm_status validate_verify(const rssm_mamba2_verify_params& p) {
  const bool replay = p.mode == RSSM_MAMBA2_REPLAY;
  if (p.mode != RSSM_MAMBA2_CONVENTIONAL && !replay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = snapshot path, 1 = replay verify)", p.mode);
  if (!listed(p.head_dim, kVerifyHeadDims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_dim=%d is not supported (supported: 64, 80, 128)", p.head_dim);
  if (!listed(p.dstate, kVerifyDstates))
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
  if (p.window < kMinWindow || p.window > kMaxWindow)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (%d..%d tokens per row)", p.window, kMinWindow,
                kMaxWindow);
  if (replay && (p.buffer_len < 2 * p.window || p.buffer_len > kMaxBufferLen))
    return fail(RSSM_ERR_INVALID_ARGUMENT,
                "buffer_len=%d is out of range for window=%d (%d..%d: the ring holds the committed history and a "
                "window of drafts)",
                p.buffer_len, p.window, 2 * p.window, kMaxBufferLen);
  // The kernels address within a slot with 32-bit offsets.
  if (static_cast<int64_t>(p.nheads) * p.head_dim * p.dstate >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads * head_dim * dstate = %lld exceeds 2^31 - 1 elements per slot",
                static_cast<long long>(p.nheads) * p.head_dim * p.dstate);
  struct Named {
    const void* ptr;
    const char* name;
  };
  const Named required[] = {{p.state, "state"}, {p.x, "x"}, {p.dt, "dt"}, {p.B, "B"},
                            {p.C, "C"},         {p.A, "A"}, {p.y, "y"}};
  for (const Named& r : required)
    if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", r.name);
  if (!is_aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  if (replay) {
    const Named ring[] = {{p.ring_x, "ring_x"}, {p.ring_B, "ring_B"}, {p.ring_dt, "ring_dt"}, {p.cursor, "cursor"}};
    for (const Named& r : ring) {
      if (!r.ptr) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL (required by replay verify)", r.name);
      if (!is_aligned16(r.ptr)) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is not 16-byte aligned", r.name);
    }
  } else {
    if (!p.snapshots) return fail(RSSM_ERR_INVALID_ARGUMENT, "snapshots is NULL (required by the snapshot path)");
    if (!is_aligned16(p.snapshots)) return fail(RSSM_ERR_INVALID_ARGUMENT, "snapshots is not 16-byte aligned");
  }
  // Rows of x, z, B and C start on 16 bytes: they are copied with vector and bulk copies.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  struct Rows {
    const void* ptr;
    int64_t s0, s1, s2;
    const char* name;
  };
  const Rows rows[] = {{p.x, p.x_batch_stride, p.x_token_stride, p.x_head_stride, "x"},
                       {p.z, p.z_batch_stride, p.z_token_stride, p.z_head_stride, "z"},
                       {p.B, p.B_batch_stride, p.B_token_stride, p.B_group_stride, "B"},
                       {p.C, p.C_batch_stride, p.C_token_stride, p.C_group_stride, "C"}};
  for (const Rows& t : rows) {
    if (!t.ptr) continue;
    if (!is_aligned16(t.ptr) || (t.s0 * act_bytes) % 16 || (t.s1 * act_bytes) % 16 || (t.s2 * act_bytes) % 16)
      return fail(RSSM_ERR_INVALID_ARGUMENT,
                  "%s rows must be 16-byte aligned (pointer %p, strides %lld, %lld, %lld elements of %lld bytes)",
                  t.name, t.ptr, static_cast<long long>(t.s0), static_cast<long long>(t.s1),
                  static_cast<long long>(t.s2), static_cast<long long>(act_bytes));
  }
  return RSSM_OK;
}

}  // namespace mamba2
}  // namespace replayssm

using namespace replayssm;

extern "C" size_t rssm_mamba2_verify_params_size(void) { return sizeof(rssm_mamba2_verify_params); }

extern "C" rssm_status rssm_mamba2_verify_validate(const rssm_mamba2_verify_params* params, size_t params_size) {
  clear_error();
  if (!params) return fail(RSSM_ERR_INVALID_ARGUMENT, "params is NULL");
  if (params_size != sizeof(rssm_mamba2_verify_params))
    return fail(RSSM_ERR_ABI_MISMATCH, "params size %zu differs from the library's %zu", params_size,
                sizeof(rssm_mamba2_verify_params));
  return mamba2::validate_verify(*params);
}

extern "C" rssm_status rssm_mamba2_verify(const rssm_mamba2_verify_params* params, size_t params_size,
                                         void* stream) {
  const rssm_status st = rssm_mamba2_verify_validate(params, params_size);
  if (st != RSSM_OK) return st;
  const cudaError_t err = mamba2::verify_dispatch(*params, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return fail(RSSM_ERR_CUDA, "mamba2 verify launch failed: %s", cudaGetErrorString(err));
  return RSSM_OK;
}
