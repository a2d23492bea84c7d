// Gated RMSNorm, the output norm of the SSM mixers, in one kernel: gate first (Nemotron-H) or norm first
// (Qwen3.5), a template flag (params.h gives the equations; trtllm_replayssm/ops/norm.py is the specification).
// Framework-free; instantiated per (activation dtype, weight dtype, order) in plugins/capi/norm_dispatch.cu.
//
// The op is memory-bound: each element of y and gate is read once, out written once, weight read per group.
// A team of threads (a power of two, at most kMaxTeam) owns one (row, group). Each thread loads up to
// kChunksPerThread chunks of 16 bytes of y and of the gate into registers (a chunk is 8 elements of a 16-bit
// row, 4 of an fp32 row; group sizes are multiples of 8, so a group is whole chunks), accumulates the sum of
// squares in fp32, the team reduces it (warp shuffles; shared memory across the warps of a larger team), and
// each thread writes its chunks of out. Rows whose start or stride is not 16-byte aligned are moved element by
// element (each tensor decides on its own).
//
// Roundings: the kernel rounds to the activation dtype exactly where the modules do, and its fp32 arithmetic is
// theirs (silu with an accurate exp and an IEEE division, rsqrtf as PyTorch's rsqrt) except in the mean: the
// order of its sum, and the kernel divides the sum by the group size where PyTorch multiplies by a rounded
// 1/N (the same result for the power-of-two groups of the supported models, one more rounding otherwise).
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "replayssm/common/math.cuh"
#include "replayssm/norm/params.h"

namespace replayssm {
namespace norm {

constexpr int kGroupMultiple = 8;
constexpr int kMaxGroupSize = 8192;
constexpr int kChunksPerThread = 2;
constexpr int kMaxTeam = 1024;
constexpr int kMinBlock = 128;  // teams smaller than this share a block

// Threads per (row, group): one chunk per thread up to 128 chunks, then two per thread. Worked examples, 16-bit
// activations (8 elements a chunk): Qwen3.5's value head of 128 -> 16 chunks -> teams of 16, 8 groups per
// 128-thread block; Nemotron-3 Super's group of 1024 -> 128 chunks -> one 128-thread block per group; a group of
// 8192 -> 1024 chunks -> 512 threads of 2 chunks. fp32 has 4 elements a chunk: 8192 -> 2048 chunks -> 1024.
inline int team_threads(int group_size, int elem_bytes) {
  const int chunks = group_size / (16 / elem_bytes);
  const int want = chunks <= 128 ? chunks : (chunks + kChunksPerThread - 1) / kChunksPerThread;
  int team = 1;
  while (team < want) team *= 2;
  return team;
}

__device__ __forceinline__ bool rows_aligned16(const void* base, int64_t row_stride, int elem_bytes) {
  return (reinterpret_cast<uintptr_t>(base) & 15u) == 0 && (row_stride * elem_bytes) % 16 == 0;
}

// N consecutive elements widened to fp32: 16-byte accesses when `vec`, element by element otherwise.
template <typename T, int N>
__device__ __forceinline__ void load_chunk(const T* src, bool vec, float (&out)[N]) {
  if (vec) {
    load_vec<T, N>(src, out);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) out[e] = to_float(src[e]);
  }
}

// N fp32 values rounded to T and stored: 16-byte accesses when `vec`, element by element otherwise.
template <typename T, int N>
__device__ __forceinline__ void store_chunk(T* dst, bool vec, const float (&in)[N]) {
  if (vec) {
    store_vec<T, N>(dst, in);
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) dst[e] = from_float<T>(in[e]);
  }
}

// The sum of v over the calling thread's team (team a power of two, the same for the whole block; teams of more
// than 32 threads are whole warps). Every thread of the block must call it (it may synchronise the block).
__device__ __forceinline__ float team_sum(float v, int team, float* partial) {
  const int width = team < 32 ? team : 32;
  for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset, width);
  if (team <= 32) return v;
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  const int warps = team / 32, first = (threadIdx.x / team) * warps;
  float s = 0.f;
  for (int i = 0; i < warps; ++i) s += partial[first + i];  // the same order in every thread of the team
  return s;
}

// One team per (row, group); teams past the last group (the last block's) compute on nothing and write nothing,
// but take part in the block's reductions.
template <typename A, typename W, bool NORM_FIRST>
__global__ void __launch_bounds__(kMaxTeam)
    gated_rmsnorm_kernel(const __grid_constant__ rssm_gated_rmsnorm_params p, const int team) {
  constexpr int V = 16 / sizeof(A);  // elements per chunk
  __shared__ float partial[kMaxTeam / 32];
  const int lane = threadIdx.x % team;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * (blockDim.x / team) + threadIdx.x / team;
  const bool active = unit < static_cast<int64_t>(p.rows) * p.num_groups;
  const int64_t row = active ? unit / p.num_groups : 0;
  const int64_t col0 = active ? (unit % p.num_groups) * p.group_size : 0;
  const int chunks = p.group_size / V;
  const A* y = static_cast<const A*>(p.y) + row * p.y_row_stride + col0;
  const A* gate = static_cast<const A*>(p.gate) + row * p.gate_row_stride + col0;
  const bool vy = rows_aligned16(p.y, p.y_row_stride, sizeof(A));
  const bool vg = rows_aligned16(p.gate, p.gate_row_stride, sizeof(A));

  // Gate first: x holds h = y * silu(gate); norm first: x holds y and g the gate's silu for the second pass.
  float x[kChunksPerThread][V], g[kChunksPerThread][V];
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = lane + k * team;
    if (!active || c >= chunks) continue;
    load_chunk(y + c * V, vy, x[k]);
    load_chunk(gate + c * V, vg, g[k]);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      g[k][e] = silu_ieee(g[k][e]);
      if constexpr (!NORM_FIRST) x[k][e] = x[k][e] * g[k][e];
      ss += __fmul_rn(x[k][e], x[k][e]);  // the square rounded, then summed, as pow(2).mean() does
    }
  }
  const float r = rsqrtf(team_sum(ss, team, partial) / static_cast<float>(p.group_size) + p.eps);

  // WRITES out: this team's group of its row.
  A* out = static_cast<A*>(p.out) + row * p.out_row_stride + col0;
  const W* weight = static_cast<const W*>(p.weight) + col0;
  const bool vo = rows_aligned16(p.out, p.out_row_stride, sizeof(A));
  const bool vw = (reinterpret_cast<uintptr_t>(p.weight) & 15u) == 0;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = lane + k * team;
    if (!active || c >= chunks) continue;
    float w[V], o[V];
    load_chunk(weight + c * V, vw, w);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float n = to_float(from_float<A>(x[k][e] * r));  // normalised, rounded to A as the modules do
      if constexpr (NORM_FIRST) {
        float wn = w[e] * n;  // weight * n: in A when the weight is in A (one rounding), else in fp32
        if constexpr (std::is_same_v<W, A>) wn = to_float(from_float<A>(wn));
        o[e] = wn * g[k][e];
      } else {
        o[e] = w[e] * n;
      }
    }
    store_chunk(out + c * V, vo, o);
  }
}

// Host launch of one (activation dtype, weight dtype, order) specialisation; params already validated.
template <typename A, typename W, bool NORM_FIRST>
cudaError_t launch_gated_rmsnorm(const rssm_gated_rmsnorm_params& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  const int team = team_threads(p.group_size, sizeof(A));
  const int block = team < kMinBlock ? kMinBlock : team;
  const int64_t units = static_cast<int64_t>(p.rows) * p.num_groups, per_block = block / team;
  const unsigned grid = static_cast<unsigned>((units + per_block - 1) / per_block);
  gated_rmsnorm_kernel<A, W, NORM_FIRST><<<grid, block, 0, stream>>>(p, team);
  return cudaGetLastError();
}

}  // namespace norm
}  // namespace replayssm
