// What every dispatch and validation table of the C ABI (plugins/capi/*_dispatch.cu) shares: the jump from
// runtime codes to compiled specialisations, the common checks with their messages, and the shape of the three
// C entry points of a kernel family.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

// "<name>=<code> is not supported (supported: fp32, fp16, bf16)" for anything else than the three codes.
inline rssm_status check_dtype(const char* name, int dtype) {
  if (dtype_supported(dtype)) return RSSM_OK;
  return fail(RSSM_ERR_INVALID_ARGUMENT, "%s=%d is not supported (supported: fp32, fp16, bf16)", name, dtype);
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
