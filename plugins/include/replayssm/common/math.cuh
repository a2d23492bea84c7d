// Device helpers shared by every kernel family: conversions, vector loads, warp reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace replayssm {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// e4m3 round to nearest even, saturating to +-448 (what torch's float8_e4m3fn cast gives below 480, the only
// range the read-copy quantiser produces).
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  return r;
}

// Two e2m1 codes in one byte (common/nvfp4.cuh pack_e2m1x2's bit order): the element type naming nvfp4 read
// copies (decode.cuh encodes and decodes the codes with integer and fp16 operations, so cuda_fp4.h is not needed).
struct nvfp4x2 {
  uint8_t bits;
};

// Raw storage of VEC elements of T as one aligned access (VEC * sizeof(T) is 4, 8 or 16 bytes).
template <typename T, int VEC>
struct alignas(VEC * sizeof(T)) Packed {
  T v[VEC];
};

// Elements of T in one access of at most 16 bytes when VEC elements are wanted.
template <typename T, int VEC>
__host__ __device__ constexpr int access_elems() {
  return VEC * sizeof(T) <= 16 ? VEC : 16 / sizeof(T);
}

// Loads VEC consecutive elements (ptr aligned to the access size) and widens them to fp32;
// split into 16-byte accesses when VEC * sizeof(T) exceeds 16.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* ptr, float (&out)[VEC]) {
  constexpr int A = access_elems<T, VEC>();
#pragma unroll
  for (int a = 0; a < VEC / A; ++a) {
    Packed<T, A> p = *reinterpret_cast<const Packed<T, A>*>(ptr + a * A);
#pragma unroll
    for (int e = 0; e < A; ++e) out[a * A + e] = to_float(p.v[e]);
  }
}

// Narrows VEC fp32 values to T (round to nearest even) and stores them, 16 bytes at most per access.
template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* ptr, const float (&in)[VEC]) {
  constexpr int A = access_elems<T, VEC>();
#pragma unroll
  for (int a = 0; a < VEC / A; ++a) {
    Packed<T, A> p;
#pragma unroll
    for (int e = 0; e < A; ++e) p.v[e] = from_float<T>(in[a * A + e]);
    *reinterpret_cast<Packed<T, A>*>(ptr + a * A) = p;
  }
}

// Sum over groups of WIDTH consecutive lanes (WIDTH a power of two <= 32); every lane gets its group's sum.
template <int WIDTH>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset, WIDTH);
  return v;
}

// Maximum over groups of WIDTH consecutive lanes (WIDTH a power of two <= 32); every lane gets its group's max.
template <int WIDTH>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset, WIDTH));
  return v;
}

// Multiplies each element of a thread's tile vectors (rows x vectors x elements) by a: the checkpoint's decay
// before a fold or a flush adds the ring's records.
template <int KI, int NV, int VEC>
__device__ __forceinline__ void scale_each(float (&s)[KI][NV][VEC], float a) {
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[i][v][e] *= a;
}

// The same for a thread's state vectors held as float4 (the output-only kernels' rows: 8 vectors of 4 columns).
template <int N>
__device__ __forceinline__ void scale_each(float4 (&v)[N], float a) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i].x *= a;
    v[i].y *= a;
    v[i].z *= a;
    v[i].w *= a;
  }
}

// A compiler barrier for memory accesses (emits no instruction): the loads written before it are issued before
// anything after it. Without it the compiler may sink a load below a branch on another load's value, chaining
// the two latencies (the state loads of a decode step below the softplus threshold's branch on dt).
__device__ __forceinline__ void issue_loads_here() { asm volatile("" ::: "memory"); }

// softplus(v) for v <= 20, identity above, as every Mamba-2 reference kernel computes processed dt.
__device__ __forceinline__ float softplus_thresholded(float v) { return v <= 20.f ? log1pf(expf(v)) : v; }

// z * sigmoid(z) with the fast exponential and division (relative error ~2e-7, well inside the bf16/fp16
// rounding of y; fp32 outputs are compared with a matching tolerance). Very negative z: the denominator
// overflows and the result is 0, the limit.
__device__ __forceinline__ float silu_gate(float z) { return __fdividef(z, 1.f + __expf(-z)); }

// z * sigmoid(z) as PyTorch's CUDA silu computes it in fp32 (accurate expf, IEEE division): bit-identical to
// F.silu on the GPU, for outputs that must equal a module's up to the roundings it makes (the gated RMSNorm).
__device__ __forceinline__ float silu_ieee(float z) { return z / (1.f + expf(-z)); }

}  // namespace replayssm
