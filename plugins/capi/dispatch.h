// What every dispatch and validation table of the C ABI (plugins/capi/*_dispatch.cu) shares: the jump from
// runtime codes to compiled specialisations, the common checks with their messages, and the shape of the three
// C entry points of a kernel family.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "error.h"

namespace replayssm {

// A C++ type passed as a value: f(TypeTag<T>{}), then `typename decltype(tag)::type`.
template <typename T>
struct TypeTag {
  using type = T;
};

// The type a TypeTag carries: tag_type<decltype(tag)>.
template <typename Tag>
using tag_type = typename Tag::type;

// Calls f with the element type of a validated rssm_dtype code.
template <typename F>
cudaError_t with_dtype(int dtype, F&& f) {
  switch (dtype) {
    case RSSM_DTYPE_FP32: return f(TypeTag<float>{});
    case RSSM_DTYPE_FP16: return f(TypeTag<__half>{});
    default: return f(TypeTag<__nv_bfloat16>{});
  }
}

// Calls f with a validated value of the list as a compile-time constant (std::integral_constant<int, V>); the
// last value of the list is the fallback, as validation has excluded anything else.
template <int First, int... Rest, typename F>
cudaError_t with_value(int v, F&& f) {
  if constexpr (sizeof...(Rest) == 0) {
    (void)v;
    return f(std::integral_constant<int, First>{});
  } else {
    if (v == First) return f(std::integral_constant<int, First>{});
    return with_value<Rest...>(v, static_cast<F&&>(f));
  }
}

template <size_t K>
bool in_list(int v, const int (&list)[K]) {
  for (int x : list)
    if (x == v) return true;
  return false;
}

// The name of an rssm_read_format value, for error messages.
inline const char* read_format_name(int f) {
  switch (f) {
    case RSSM_READ_NONE: return "none";
    case RSSM_READ_FP16: return "fp16";
    case RSSM_READ_BF16: return "bf16";
    case RSSM_READ_FP8: return "fp8";
    case RSSM_READ_NVFP4: return "nvfp4";
    default: return "unknown";
  }
}

inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// "<name>=<code> is not supported (supported: fp32, fp16, bf16)" for anything else than the three codes.
inline rssm_status check_dtype(const char* name, int dtype) {
  if (dtype_supported(dtype)) return RSSM_OK;
  return fail(RSSM_ERR_INVALID_ARGUMENT, "%s=%d is not supported (supported: fp32, fp16, bf16)", name, dtype);
}

// The batch and the slots: "batch=<b> is out of range (0..65535)", "num_slots=<n> is negative", "batch=<b>
// exceeds num_slots=<n> and no slot_idx was given".
inline rssm_status check_batch(int batch, int num_slots, const void* slot_idx) {
  if (batch < 0 || batch > 65535) return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", batch);
  if (num_slots < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_slots=%d is negative", num_slots);
  if (!slot_idx && batch > num_slots)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d exceeds num_slots=%d and no slot_idx was given", batch,
                num_slots);
  return RSSM_OK;
}

// The Mamba-2 layer fields both Mamba-2 entry points share (decode and verify params), in this order: head_dim and
// dstate from the family's closed lists, the two dtypes, nheads, ngroups, the batch and the slots.
template <typename Params, size_t KP, size_t KN>
rssm_status check_mamba2_layer(const Params& p, const int (&head_dims)[KP], const int (&dstates)[KN]) {
  if (!in_list(p.head_dim, head_dims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_dim=%d is not supported (supported: 64, 80, 128)", p.head_dim);
  if (!in_list(p.dstate, dstates))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "dstate=%d is not supported (supported: 64, 128, 256)", p.dstate);
  if (const rssm_status st = check_dtype("state_dtype", p.state_dtype)) return st;
  if (const rssm_status st = check_dtype("act_dtype", p.act_dtype)) return st;
  if (p.nheads < 1 || p.nheads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads=%d is out of range (1..65535)", p.nheads);
  if (p.ngroups < 1 || p.nheads % p.ngroups != 0)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "ngroups=%d must be >= 1 and divide nheads=%d", p.ngroups, p.nheads);
  return check_batch(p.batch, p.num_slots, p.slot_idx);
}

// The GDN layer checks that decode and verify validation share: head_k_dim and head_v_dim in the closed list,
// the dtypes, num_k_heads in 1..65535 and num_v_heads a positive multiple of it (each family adds its own bound on
// num_v_heads after these).
template <typename Params, size_t KH>
rssm_status check_gdn_layer(const Params& p, const int (&head_dims)[KH]) {
  if (!in_list(p.head_k_dim, head_dims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_k_dim=%d is not supported (supported: 64, 128, 256)", p.head_k_dim);
  if (!in_list(p.head_v_dim, head_dims))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "head_v_dim=%d is not supported (supported: 64, 128, 256)", p.head_v_dim);
  if (const rssm_status st = check_dtype("state_dtype", p.state_dtype)) return st;
  if (const rssm_status st = check_dtype("act_dtype", p.act_dtype)) return st;
  if (p.num_k_heads < 1 || p.num_k_heads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_k_heads=%d is out of range (1..65535)", p.num_k_heads);
  if (p.num_v_heads < 1 || p.num_v_heads % p.num_k_heads != 0)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads=%d must be a positive multiple of num_k_heads=%d",
                p.num_v_heads, p.num_k_heads);
  return RSSM_OK;
}

// Speculative window and ring: "window=<T> is out of range (<min>..<max> tokens per row)"; with a ring (replay),
// "buffer_len=<L> is out of range for window=<T> (<2T>..<max>: ...)".
inline rssm_status check_window(int window, int min_window, int max_window, int buffer_len, bool replay,
                                int max_buffer_len) {
  if (window < min_window || window > max_window)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (%d..%d tokens per row)", window, min_window,
                max_window);
  if (replay && (buffer_len < 2 * window || buffer_len > max_buffer_len))
    return fail(RSSM_ERR_INVALID_ARGUMENT,
                "buffer_len=%d is out of range for window=%d (%d..%d: the ring holds the committed history and a "
                "window of drafts)",
                buffer_len, window, 2 * window, max_buffer_len);
  return RSSM_OK;
}

// A pointer of the params with its name, for the checks below.
struct NamedPtr {
  const void* ptr;
  const char* name;
};

// Every pointer set ("<name> is NULL", then " (<why>)" when `why` is given); with `aligned`, then every pointer
// on 16 bytes ("<name> is not 16-byte aligned").
template <size_t K>
rssm_status check_pointers(const NamedPtr (&ptrs)[K], const char* why = nullptr, bool aligned = false) {
  for (const NamedPtr& r : ptrs) {
    if (r.ptr) continue;
    if (why) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL (%s)", r.name, why);
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", r.name);
  }
  if (aligned)
    for (const NamedPtr& r : ptrs)
      if (!aligned16(r.ptr)) return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is not 16-byte aligned", r.name);
  return RSSM_OK;
}

// An activation tensor whose rows start on 16 bytes: its pointer and its NS outer strides (in elements).
template <int NS>
struct RowsOf {
  const void* ptr;
  int64_t strides[NS];
  const char* name;
};

// Pointer and strides of every tensor a multiple of 16 bytes (elements of elem_bytes): "<name> rows must be
// 16-byte aligned (pointer ..., strides ... elements of ... bytes)". NULL tensors (optional inputs) pass.
template <int NS, size_t K>
rssm_status check_rows16(const RowsOf<NS> (&rows)[K], int64_t elem_bytes) {
  static_assert(NS == 2 || NS == 3, "2 or 3 outer strides");
  for (const RowsOf<NS>& t : rows) {
    bool ok = !t.ptr || aligned16(t.ptr);
    for (int i = 0; i < NS; ++i) ok = ok && (!t.ptr || (t.strides[i] * elem_bytes) % 16 == 0);
    if (ok) continue;
    const long long s0 = t.strides[0], s1 = t.strides[1], eb = elem_bytes;
    if constexpr (NS == 2)
      return fail(RSSM_ERR_INVALID_ARGUMENT,
                  "%s rows must be 16-byte aligned (pointer %p, strides %lld, %lld elements of %lld bytes)", t.name,
                  t.ptr, s0, s1, eb);
    else
      return fail(RSSM_ERR_INVALID_ARGUMENT,
                  "%s rows must be 16-byte aligned (pointer %p, strides %lld, %lld, %lld elements of %lld bytes)",
                  t.name, t.ptr, s0, s1, static_cast<long long>(t.strides[NS - 1]), eb);
  }
  return RSSM_OK;
}

// The read-copy fields of a step whose kernel reads fp16 / bf16 / fp8 copies (GDN decode, both families' verify):
// a format the entry point compiled (`formats`, described by `text`), the family's replay mode, an fp32
// checkpoint, 16-bit activations, and the copy's buffers (fp8: its row scales).
template <typename Params, size_t K>
rssm_status check_read_copy(const Params& p, int replay_mode, const int (&formats)[K], const char* text) {
  if (p.read_format == RSSM_READ_NONE) return RSSM_OK;
  const char* name = read_format_name(p.read_format);
  if (!in_list(p.read_format, formats))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) is not supported; %s", p.read_format, name, text);
  if (p.mode != replay_mode)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) needs mode=%d (replay), got mode=%d", p.read_format,
                name, replay_mode, p.mode);
  if (p.state_dtype != RSSM_DTYPE_FP32)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) with state_dtype=%d is not supported; %s",
                p.read_format, name, p.state_dtype, text);
  if (p.act_dtype == RSSM_DTYPE_FP32)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) with act_dtype=0 (fp32) is not supported; %s",
                p.read_format, name, text);
  if (!p.read_state)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_state is NULL (required by read_format=%d, %s)", p.read_format, name);
  if (!aligned16(p.read_state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "read_state is not 16-byte aligned");
  if (p.read_format == RSSM_READ_FP8) {
    if (!p.read_scale)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_scale is NULL (required by read_format=3, fp8)");
    if (reinterpret_cast<uintptr_t>(p.read_scale) & 3u)
      return fail(RSSM_ERR_INVALID_ARGUMENT, "read_scale is not 4-byte aligned");
  }
  return RSSM_OK;
}

// The compiled specialisations of those families: every (state, activation) dtype pair without a copy, and each
// copy (fp16, bf16, fp8) with an fp32 checkpoint and fp16 / bf16 activations; each at the head sizes 64, 128, 256.
// RSSM_FOR_COPY_FAMILY_TYPES(DECL) expands DECL(S, A, D, R) once per specialisation (R void: no copy), for the
// extern declarations beside the one dispatch point; with_copy_family_types is that dispatch.
#define RSSM_COPY_FAMILY_D(DECL, S, A, R) DECL(S, A, 64, R) DECL(S, A, 128, R) DECL(S, A, 256, R)
#define RSSM_COPY_FAMILY_ACT(DECL, S)                                                                          \
  RSSM_COPY_FAMILY_D(DECL, S, float, void) RSSM_COPY_FAMILY_D(DECL, S, __half, void)                         \
  RSSM_COPY_FAMILY_D(DECL, S, __nv_bfloat16, void)
#define RSSM_COPY_FAMILY_COPY(DECL, R) \
  RSSM_COPY_FAMILY_D(DECL, float, __half, R) RSSM_COPY_FAMILY_D(DECL, float, __nv_bfloat16, R)
#define RSSM_FOR_COPY_FAMILY_TYPES(DECL)                                                                       \
  RSSM_COPY_FAMILY_ACT(DECL, float)                                                                            \
  RSSM_COPY_FAMILY_ACT(DECL, __half)                                                                           \
  RSSM_COPY_FAMILY_ACT(DECL, __nv_bfloat16)                                                                    \
  RSSM_COPY_FAMILY_COPY(DECL, __half)                                                                          \
  RSSM_COPY_FAMILY_COPY(DECL, __nv_bfloat16)                                                                   \
  RSSM_COPY_FAMILY_COPY(DECL, __nv_fp8_e4m3)

// Calls f(TypeTag<S>{}, TypeTag<A>{}, std::integral_constant<int, D>{}, TypeTag<R>{}) for validated codes (the
// state and activation dtypes, the read format, the head size D): a combination check_read_copy has admitted.
template <typename F>
cudaError_t with_copy_family_types(int state_dtype, int act_dtype, int read_format, int head_dim, F&& f) {
  return with_dtype(state_dtype, [&](auto state_tag) {
    return with_dtype(act_dtype, [&](auto act_tag) {
      using S = tag_type<decltype(state_tag)>;
      using A = tag_type<decltype(act_tag)>;
      auto with_copy = [&](auto read_tag) {
        return with_value<64, 128, 256>(head_dim, [&](auto d) { return f(state_tag, act_tag, d, read_tag); });
      };
      if constexpr (std::is_same_v<S, float> && !std::is_same_v<A, float>) {
        if (read_format == RSSM_READ_FP16) return with_copy(TypeTag<__half>{});
        if (read_format == RSSM_READ_BF16) return with_copy(TypeTag<__nv_bfloat16>{});
        if (read_format == RSSM_READ_FP8) return with_copy(TypeTag<__nv_fp8_e4m3>{});
      }
      return with_copy(TypeTag<void>{});
    });
  });
}

// The latency route's limit (both families' decode params, latency_route_bytes): 0, or a replay step on an fp32
// checkpoint without read copy. The family checks its shape limit after this.
template <typename Params>
rssm_status check_latency_route(const Params& p, int replay_mode) {
  if (p.latency_route_bytes == 0) return RSSM_OK;
  const long long v = static_cast<long long>(p.latency_route_bytes);
  if (v < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "latency_route_bytes=%lld is negative", v);
  if (p.mode != replay_mode)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "latency_route_bytes=%lld needs mode=%d (replay), got mode=%d", v,
                replay_mode, p.mode);
  if (p.state_dtype != RSSM_DTYPE_FP32 || p.read_format != RSSM_READ_NONE)
    return fail(RSSM_ERR_INVALID_ARGUMENT,
                "latency_route_bytes=%lld needs an fp32 checkpoint without read copy (state_dtype=%d, read_format=%d)",
                v, p.state_dtype, p.read_format);
  return RSSM_OK;
}

// The first check of every entry point: a params pointer of the library's struct size.
template <typename Params>
rssm_status check_params(const Params* params, size_t params_size) {
  clear_error();
  if (!params) return fail(RSSM_ERR_INVALID_ARGUMENT, "params is NULL");
  if (params_size != sizeof(Params))
    return fail(RSSM_ERR_ABI_MISMATCH, "params size %zu differs from the library's %zu", params_size, sizeof(Params));
  return RSSM_OK;
}

// Validates (validate_fn: const Params& -> rssm_status), then launches (launch_fn: const Params&, cudaStream_t
// -> cudaError_t); a launch error becomes RSSM_ERR_CUDA with `what` in the message.
template <typename Params, typename Validate, typename Launch>
rssm_status validate_and_launch(const Params* params, size_t params_size, void* stream, Validate validate_fn,
                                Launch launch_fn, const char* what) {
  rssm_status st = check_params(params, params_size);
  if (st == RSSM_OK) st = validate_fn(*params);
  if (st != RSSM_OK) return st;
  const cudaError_t err = launch_fn(*params, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return fail(RSSM_ERR_CUDA, "%s launch failed: %s", what, cudaGetErrorString(err));
  return RSSM_OK;
}

}  // namespace replayssm

// The three C entry points of a kernel family: NAME_params_size, NAME_validate and NAME itself.
#define RSSM_DEFINE_ENTRY_POINTS(NAME, PARAMS, VALIDATE, LAUNCH, WHAT)                                        \
  extern "C" size_t NAME##_params_size(void) { return sizeof(PARAMS); }                                      \
  extern "C" rssm_status NAME##_validate(const PARAMS* params, size_t params_size) {                         \
    const rssm_status st = replayssm::check_params(params, params_size);                                     \
    return st != RSSM_OK ? st : VALIDATE(*params);                                                           \
  }                                                                                                          \
  extern "C" rssm_status NAME(const PARAMS* params, size_t params_size, void* stream) {                      \
    return replayssm::validate_and_launch(params, params_size, stream, VALIDATE, LAUNCH, WHAT);              \
  }
