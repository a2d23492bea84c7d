// C ABI of the prefill (context phase) of every family (common/prefill_params.h has the contract): validation, then
// the start kernel, the family's conventional decode step once per token through its own entry point (the step's
// launch logic exists once), then the read-copy refresh (common/prefill.cuh). Everything on the caller's stream.
#include <algorithm>
#include <type_traits>

#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/common/prefill.cuh"

namespace replayssm {
namespace prefill {

constexpr int kMaxTokens = 65535;

// Read copies the refresh kernel writes: (checkpoint dtype, format) pairs, the ones each family's replay decode
// reads (mamba2_dispatch.cu kReadCopies, gdn_dispatch.cu kReadFormats).
struct CopyPair {
  int state_dtype, read_format;
};
static const CopyPair kMamba2Copies[] = {{RSSM_DTYPE_FP32, RSSM_READ_FP16}, {RSSM_DTYPE_FP32, RSSM_READ_BF16},
                                         {RSSM_DTYPE_FP32, RSSM_READ_FP8},  {RSSM_DTYPE_FP16, RSSM_READ_FP8},
                                         {RSSM_DTYPE_BF16, RSSM_READ_FP8},  {RSSM_DTYPE_FP32, RSSM_READ_NVFP4}};
static const char kMamba2CopiesText[] =
    "supported (state_dtype, read_format): (fp32, fp16), (fp32, bf16), (fp32, fp8), (fp16, fp8), (bf16, fp8), "
    "(fp32, nvfp4)";
static const CopyPair kGdnCopies[] = {
    {RSSM_DTYPE_FP32, RSSM_READ_FP16}, {RSSM_DTYPE_FP32, RSSM_READ_BF16}, {RSSM_DTYPE_FP32, RSSM_READ_FP8}};
static const char kGdnCopiesText[] =
    "supported (state_dtype, read_format): (fp32, fp16), (fp32, bf16), (fp32, fp8); none with per_channel_decay";

static int64_t dtype_bytes(int dtype) { return dtype == RSSM_DTYPE_FP32 ? 4 : 2; }

// p advanced by `elems` elements of `elem_bytes` bytes (NULL stays NULL).
template <typename T>
T* advance(T* p, int64_t elems, int64_t elem_bytes) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return p ? reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + elems * elem_bytes) : p;
}

// The prompt fields every family shares.
static rssm_status check_prompt(int batch, int num_tokens, const int32_t* lengths, const int32_t* workspace,
                                const int32_t* slot_idx) {
  if (num_tokens < 1 || num_tokens > kMaxTokens)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_tokens=%d is out of range (1..%d)", num_tokens, kMaxTokens);
  if (batch < 0 || batch > 65535) return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", batch);
  const NamedPtr required[] = {{lengths, "lengths"}, {workspace, "workspace"}, {slot_idx, "step.slot_idx"}};
  if (const rssm_status st = check_pointers(required, "required by prefill")) return st;
  if (reinterpret_cast<uintptr_t>(workspace) & 3u)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "workspace is not 4-byte aligned");
  return RSSM_OK;
}

// Token strides: non-negative, and (rows16) keeping every token's rows on 16 bytes.
struct TokenStride {
  const void* ptr;
  int64_t stride, elem_bytes;
  const char* name;
  bool rows16;
};
template <size_t K>
rssm_status check_token_strides(const TokenStride (&strides)[K]) {
  for (const TokenStride& s : strides) {
    if (!s.ptr) continue;
    if (s.stride < 0)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "%s=%lld is negative", s.name, static_cast<long long>(s.stride));
    if (s.rows16 && (s.stride * s.elem_bytes) % 16)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "%s=%lld elements of %lld bytes is not a multiple of 16 bytes", s.name,
                  static_cast<long long>(s.stride), static_cast<long long>(s.elem_bytes));
  }
  return RSSM_OK;
}

// The read copy the refresh writes: a listed pair and its buffers.
template <size_t K>
rssm_status check_refresh(int state_dtype, int fmt, const void* read_state, const float* read_scale,
                          const void* read_block_scale, const CopyPair (&pairs)[K], const char* text) {
  if (fmt == RSSM_READ_NONE) return RSSM_OK;
  bool listed = false;
  for (const CopyPair& c : pairs) listed |= c.state_dtype == state_dtype && c.read_format == fmt;
  if (!listed)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) with state_dtype=%d is not supported by prefill; %s",
                fmt, read_format_name(fmt), state_dtype, text);
  if (!read_state) return fail(RSSM_ERR_INVALID_ARGUMENT, "read_state is NULL (required by read_format=%d)", fmt);
  if (!aligned16(read_state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "read_state is not 16-byte aligned");
  if (fmt == RSSM_READ_FP8 || fmt == RSSM_READ_NVFP4) {
    if (!read_scale) return fail(RSSM_ERR_INVALID_ARGUMENT, "read_scale is NULL (required by read_format=%d)", fmt);
    if (reinterpret_cast<uintptr_t>(read_scale) & 3u)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_scale is not 4-byte aligned");
  }
  if (fmt == RSSM_READ_NVFP4 && (!read_block_scale || !aligned16(read_block_scale)))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_block_scale is NULL or not 16-byte aligned (required by nvfp4)");
  return RSSM_OK;
}

// The largest word (16, 8, 4 or 2 bytes) dividing every address, stride and size of the regions.
static int zero_word_bytes(const PrefillZero* regions, int n) {
  uint64_t bits = 16;
  for (int r = 0; r < n; ++r)
    bits |= reinterpret_cast<uintptr_t>(regions[r].base) | static_cast<uint64_t>(regions[r].slot_stride) |
            static_cast<uint64_t>(regions[r].row_bytes) | static_cast<uint64_t>(regions[r].row_stride);
  return static_cast<int>(bits & (~bits + 1));  // the lowest set bit
}

// Launches the start kernel: per-token slot indices into the workspace, live slots' regions zeroed.
static rssm_status start(const PrefillStartArgs& a, cudaStream_t stream, const char* what) {
  int64_t words = 0;
  const int word = zero_word_bytes(a.zero, a.regions);
  for (int r = 0; r < a.regions; ++r) words = std::max(words, a.zero[r].rows * a.zero[r].row_bytes / word);
  const int threads = 256;
  const int64_t chunks = std::min<int64_t>(std::max<int64_t>((words + 4 * threads - 1) / (4 * threads), 1), 1024);
  const dim3 grid(static_cast<unsigned>(chunks), a.batch);
  switch (word) {
    case 16: prefill_start_kernel<uint4><<<grid, threads, 0, stream>>>(a); break;
    case 8: prefill_start_kernel<uint2><<<grid, threads, 0, stream>>>(a); break;
    case 4: prefill_start_kernel<uint32_t><<<grid, threads, 0, stream>>>(a); break;
    default: prefill_start_kernel<uint16_t><<<grid, threads, 0, stream>>>(a); break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return RSSM_OK;
  return fail(RSSM_ERR_CUDA, "%s start launch failed: %s", what, cudaGetErrorString(err));
}

// The start of a Mamba-2 / GDN pool's slots: the checkpoint and the cursor (an empty ring; none in a pool without
// ring), each contiguous per slot.
static PrefillStartArgs pool_start(const int32_t* slot_idx, const int32_t* lengths, int32_t* workspace, int batch,
                                   int num_tokens, int num_slots, int pad_slot_id, void* state, int64_t state_bytes,
                                   int32_t* cursor, int heads) {
  PrefillStartArgs a{slot_idx, lengths, workspace, batch, num_tokens, num_slots, pad_slot_id, cursor ? 2 : 1, {}};
  const int64_t cursor_bytes = static_cast<int64_t>(heads) * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS * 4;
  a.zero[0] = {static_cast<char*>(state), state_bytes, 1, state_bytes, state_bytes};
  a.zero[1] = {reinterpret_cast<char*>(cursor), cursor_bytes, 1, cursor_bytes, cursor_bytes};
  return a;
}

// Launches the refresh of the live slots' read copies (none: nothing to do); the pair was validated.
static rssm_status refresh(const PrefillRefreshArgs& a, int state_dtype, int fmt, int N, cudaStream_t stream,
                           const char* what) {
  if (fmt == RSSM_READ_NONE) return RSSM_OK;
  const cudaError_t err = with_dtype(state_dtype, [&](auto state_tag) {
    using S = tag_type<decltype(state_tag)>;
    auto launch = [&](auto copy_tag) {
      using R = tag_type<decltype(copy_tag)>;
      return with_value<64, 128, 256>(N, [&](auto n) {
        constexpr int kN = decltype(n)::value;
        constexpr int rows_per_block = kPrefillRefreshWarps * Tiling<S, kN>::RW;
        const dim3 grid((a.rows + rows_per_block - 1) / rows_per_block, a.batch);
        prefill_refresh_kernel<S, R, kN><<<grid, kPrefillRefreshWarps * 32, 0, stream>>>(a);
        return cudaGetLastError();
      });
    };
    if constexpr (std::is_same_v<S, float>) {
      if (fmt == RSSM_READ_FP16) return launch(TypeTag<__half>{});
      if (fmt == RSSM_READ_BF16) return launch(TypeTag<__nv_bfloat16>{});
      if (fmt == RSSM_READ_NVFP4) return launch(TypeTag<nvfp4x2>{});
    }
    return launch(TypeTag<__nv_fp8_e4m3>{});
  });
  if (err == cudaSuccess) return RSSM_OK;
  return fail(RSSM_ERR_CUDA, "%s read-copy refresh launch failed: %s", what, cudaGetErrorString(err));
}

// ---- Mamba-2 ----

// The conventional step of token t: inputs and output advanced by t tokens, the token's slot indices, no copy.
static rssm_mamba2_decode_params mamba2_step(const rssm_mamba2_prefill_params& p, int t) {
  rssm_mamba2_decode_params s = p.step;
  const int64_t e = dtype_bytes(s.act_dtype);
  s.x = advance(s.x, t * p.x_token_stride, e);
  s.dt = advance(s.dt, t * p.dt_token_stride, e);
  s.B = advance(s.B, t * p.B_token_stride, e);
  s.C = advance(s.C, t * p.C_token_stride, e);
  s.z = advance(s.z, t * p.z_token_stride, e);
  s.y = advance(s.y, t * p.y_token_stride, e);
  s.slot_idx = p.workspace + static_cast<int64_t>(t) * s.batch;
  s.read_format = RSSM_READ_NONE;
  s.read_state = s.read_block_scale = nullptr;
  s.read_scale = nullptr;
  return s;
}

static rssm_status validate_mamba2(const rssm_mamba2_prefill_params& p) {
  const rssm_mamba2_decode_params& s = p.step;
  if (s.mode != RSSM_MAMBA2_CONVENTIONAL)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "step.mode=%d must be 0: a prefill runs the conventional step", s.mode);
  if (s.latency_route_bytes)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "step.latency_route_bytes=%lld must be 0 (a conventional step)",
                static_cast<long long>(s.latency_route_bytes));
  if (const rssm_status st = check_prompt(s.batch, p.num_tokens, p.lengths, p.workspace, s.slot_idx))
    return st;
  const int64_t e = dtype_bytes(s.act_dtype);
  const TokenStride strides[] = {{s.x, p.x_token_stride, e, "x_token_stride", true},
                                 {s.dt, p.dt_token_stride, e, "dt_token_stride", false},
                                 {s.B, p.B_token_stride, e, "B_token_stride", true},
                                 {s.C, p.C_token_stride, e, "C_token_stride", true},
                                 {s.z, p.z_token_stride, e, "z_token_stride", true},
                                 {s.y, p.y_token_stride, e, "y_token_stride", false}};
  if (const rssm_status st = check_token_strides(strides)) return st;
  const rssm_mamba2_decode_params first = mamba2_step(p, 0);
  if (const rssm_status st = rssm_mamba2_decode_validate(&first, sizeof(first))) return st;
  return check_refresh(s.state_dtype, s.read_format, s.read_state, s.read_scale, s.read_block_scale, kMamba2Copies,
                       kMamba2CopiesText);
}

static rssm_status run_mamba2(const rssm_mamba2_prefill_params& p, cudaStream_t stream) {
  const rssm_mamba2_decode_params& s = p.step;
  if (s.batch == 0) return RSSM_OK;
  const int64_t state_bytes = static_cast<int64_t>(s.nheads) * s.head_dim * s.dstate * dtype_bytes(s.state_dtype);
  const PrefillStartArgs a = pool_start(s.slot_idx, p.lengths, p.workspace, s.batch, p.num_tokens, s.num_slots,
                                        s.pad_slot_id, s.state, state_bytes, s.cursor, s.nheads);
  if (const rssm_status st = start(a, stream, "mamba2 prefill")) return st;
  for (int t = 0; t < p.num_tokens; ++t) {
    const rssm_mamba2_decode_params step = mamba2_step(p, t);
    if (const rssm_status st = rssm_mamba2_decode(&step, sizeof(step), stream)) return st;
  }
  const PrefillRefreshArgs r{s.state,     s.read_state, s.read_scale,  s.read_block_scale,
                             s.slot_idx,  s.batch,      s.num_slots,   s.pad_slot_id,
                             s.nheads * s.head_dim};
  return refresh(r, s.state_dtype, s.read_format, s.dstate, stream, "mamba2 prefill");
}

// ---- Gated DeltaNet / KDA ----

static rssm_gdn_decode_params gdn_step(const rssm_gdn_prefill_params& p, int t) {
  rssm_gdn_decode_params s = p.step;
  const int64_t e = dtype_bytes(s.act_dtype), ge = dtype_bytes(s.gate_dtype);
  s.q = advance(s.q, t * p.q_token_stride, e);
  s.k = advance(s.k, t * p.k_token_stride, e);
  s.v = advance(s.v, t * p.v_token_stride, e);
  s.y = advance(s.y, t * p.y_token_stride, e);
  s.g = advance(s.g, t * p.g_token_stride, 4);
  s.beta = advance(s.beta, t * p.beta_token_stride, 4);
  s.a = advance(s.a, t * p.a_token_stride, ge);
  s.b = advance(s.b, t * p.b_token_stride, ge);
  s.slot_idx = p.workspace + static_cast<int64_t>(t) * s.batch;
  s.read_format = RSSM_READ_NONE;
  s.read_state = nullptr;
  s.read_scale = nullptr;
  return s;
}

static rssm_status validate_gdn(const rssm_gdn_prefill_params& p) {
  const rssm_gdn_decode_params& s = p.step;
  if (s.mode != RSSM_GDN_CONVENTIONAL)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "step.mode=%d must be 0: a prefill runs the conventional step", s.mode);
  if (s.latency_route_bytes)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "step.latency_route_bytes=%lld must be 0 (a conventional step)",
                static_cast<long long>(s.latency_route_bytes));
  if (const rssm_status st = check_prompt(s.batch, p.num_tokens, p.lengths, p.workspace, s.slot_idx))
    return st;
  const bool raw = s.gate_mode == RSSM_GDN_GATES_RAW;
  const int64_t e = dtype_bytes(s.act_dtype), ge = dtype_bytes(s.gate_dtype);
  const TokenStride strides[] = {{s.q, p.q_token_stride, e, "q_token_stride", true},
                                 {s.k, p.k_token_stride, e, "k_token_stride", true},
                                 {s.v, p.v_token_stride, e, "v_token_stride", true},
                                 {s.y, p.y_token_stride, e, "y_token_stride", false},
                                 {raw ? nullptr : s.g, p.g_token_stride, 4, "g_token_stride", false},
                                 {raw ? nullptr : s.beta, p.beta_token_stride, 4, "beta_token_stride", false},
                                 {raw ? s.a : nullptr, p.a_token_stride, ge, "a_token_stride", false},
                                 {raw ? s.b : nullptr, p.b_token_stride, ge, "b_token_stride", false}};
  if (const rssm_status st = check_token_strides(strides)) return st;
  const rssm_gdn_decode_params first = gdn_step(p, 0);
  if (const rssm_status st = rssm_gdn_decode_validate(&first, sizeof(first))) return st;
  if (s.read_format != RSSM_READ_NONE && s.per_channel_decay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) with per_channel_decay=1 is not supported; %s",
                s.read_format, read_format_name(s.read_format), kGdnCopiesText);
  return check_refresh(s.state_dtype, s.read_format, s.read_state, s.read_scale, nullptr, kGdnCopies,
                       kGdnCopiesText);
}

static rssm_status run_gdn(const rssm_gdn_prefill_params& p, cudaStream_t stream) {
  const rssm_gdn_decode_params& s = p.step;
  if (s.batch == 0) return RSSM_OK;
  const int64_t state_bytes =
      static_cast<int64_t>(s.num_v_heads) * s.head_v_dim * s.head_k_dim * dtype_bytes(s.state_dtype);
  const PrefillStartArgs a = pool_start(s.slot_idx, p.lengths, p.workspace, s.batch, p.num_tokens, s.num_slots,
                                        s.pad_slot_id, s.state, state_bytes, s.cursor, s.num_v_heads);
  if (const rssm_status st = start(a, stream, "gdn prefill")) return st;
  for (int t = 0; t < p.num_tokens; ++t) {
    const rssm_gdn_decode_params step = gdn_step(p, t);
    if (const rssm_status st = rssm_gdn_decode(&step, sizeof(step), stream)) return st;
  }
  const PrefillRefreshArgs r{s.state,    s.read_state, s.read_scale,  nullptr,
                             s.slot_idx, s.batch,      s.num_slots,   s.pad_slot_id,
                             s.num_v_heads * s.head_v_dim};
  return refresh(r, s.state_dtype, s.read_format, s.head_k_dim, stream, "gdn prefill");
}

// ---- conv1d ----

static rssm_conv1d_params conv1d_step(const rssm_conv1d_prefill_params& p, int t) {
  rssm_conv1d_params s = p.step;
  const int64_t e = dtype_bytes(s.act_dtype);
  s.x = advance(s.x, t * s.x_token_stride, e);
  s.y = advance(s.y, t * s.y_token_stride, e);
  s.slot_idx = p.workspace + static_cast<int64_t>(t) * s.batch;
  return s;
}

static rssm_status validate_conv1d(const rssm_conv1d_prefill_params& p) {
  const rssm_conv1d_params& s = p.step;
  if (s.mode != RSSM_CONV1D_UPDATE)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "step.mode=%d must be 0: a prefill runs the update step", s.mode);
  if (const rssm_status st = check_prompt(s.batch, p.num_tokens, p.lengths, p.workspace, s.slot_idx))
    return st;
  const int64_t e = dtype_bytes(s.act_dtype);
  const TokenStride strides[] = {{s.x, s.x_token_stride, e, "step.x_token_stride", false},
                                 {s.y, s.y_token_stride, e, "step.y_token_stride", false}};
  if (const rssm_status st = check_token_strides(strides)) return st;
  const rssm_conv1d_params first = conv1d_step(p, 0);
  return rssm_conv1d_validate(&first, sizeof(first));
}

static rssm_status run_conv1d(const rssm_conv1d_prefill_params& p, cudaStream_t stream) {
  const rssm_conv1d_params& s = p.step;
  if (s.batch == 0) return RSSM_OK;
  const int64_t e = dtype_bytes(s.state_dtype);
  PrefillStartArgs a{s.slot_idx, p.lengths, p.workspace, s.batch, p.num_tokens, s.num_slots, s.pad_slot_id, 1, {}};
  a.zero[0] = {static_cast<char*>(s.state), s.state_slot_stride * e, s.channels, (s.kernel_size - 1) * e,
               s.state_channel_stride * e};
  if (const rssm_status st = start(a, stream, "conv1d prefill")) return st;
  for (int t = 0; t < p.num_tokens; ++t) {
    const rssm_conv1d_params step = conv1d_step(p, t);
    if (const rssm_status st = rssm_conv1d(&step, sizeof(step), stream)) return st;
  }
  return RSSM_OK;
}

}  // namespace prefill
}  // namespace replayssm

extern "C" size_t rssm_prefill_workspace_size(int32_t batch, int32_t num_tokens) {
  return batch > 0 && num_tokens > 0 ? static_cast<size_t>(batch) * static_cast<size_t>(num_tokens) * 4 : 0;
}

// NAME_params_size, NAME_validate and NAME: as RSSM_DEFINE_ENTRY_POINTS, with a run function that returns a status
// (the per-token steps report their own errors).
#define RSSM_DEFINE_PREFILL_ENTRY_POINTS(NAME, PARAMS, VALIDATE, RUN)                                         \
  extern "C" size_t NAME##_params_size(void) { return sizeof(PARAMS); }                                      \
  extern "C" rssm_status NAME##_validate(const PARAMS* params, size_t params_size) {                         \
    const rssm_status st = replayssm::check_params(params, params_size);                                     \
    return st != RSSM_OK ? st : VALIDATE(*params);                                                           \
  }                                                                                                          \
  extern "C" rssm_status NAME(const PARAMS* params, size_t params_size, void* stream) {                      \
    rssm_status st = replayssm::check_params(params, params_size);                                           \
    if (st == RSSM_OK) st = VALIDATE(*params);                                                               \
    return st != RSSM_OK ? st : RUN(*params, static_cast<cudaStream_t>(stream));                             \
  }

RSSM_DEFINE_PREFILL_ENTRY_POINTS(rssm_mamba2_prefill, rssm_mamba2_prefill_params, replayssm::prefill::validate_mamba2,
                                 replayssm::prefill::run_mamba2)
RSSM_DEFINE_PREFILL_ENTRY_POINTS(rssm_gdn_prefill, rssm_gdn_prefill_params, replayssm::prefill::validate_gdn,
                                 replayssm::prefill::run_gdn)
RSSM_DEFINE_PREFILL_ENTRY_POINTS(rssm_conv1d_prefill, rssm_conv1d_prefill_params, replayssm::prefill::validate_conv1d,
                                 replayssm::prefill::run_conv1d)
