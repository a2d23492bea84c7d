// Gated DeltaNet speculative verify, the conventional snapshot path (what serving engines run today, and the
// benchmark's baseline): the state is read once, the T tokens are applied one after another, and the state after
// every token is stored as a snapshot; the commit then copies the snapshot of the accepted token back
// (common/spec_commit.cuh). Specification: snapshot_verify_reference in trtllm_replayssm/ops/gdn/spec_reference.py.
//
// Work split: one block per (batch row, value head, tile of rows), the decode kernel's thread-to-state mapping
// (common/decode_tiling.cuh Tiling). The kernel is bound by its T snapshot stores, so the checkpoint tile goes
// straight to registers; the tokens' k, q (fp32) and v are staged in shared memory once. Each token repeats the
// decode kernel's conventional step: S = e^g S, u = beta (v - S k), S = S + u kᵀ, y = S q. The state is rounded to
// its dtype after every token (after y), as a stored-and-reloaded snapshot would be.
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/gdn/spec_params.h"

namespace replayssm {
namespace gdn {

constexpr int kMaxSnapshotWindow = 8;

// VEC elements of T packed in a 16-byte register value, widened to fp32.
template <typename T, int VEC>
__device__ __forceinline__ void unpack(const uint4& raw, float (&out)[VEC]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = to_float(e[i]);
}

template <typename StateT, typename ActT, int K>
__global__ void __launch_bounds__(kMaxWarps * 32)
    snapshot_kernel(const __grid_constant__ rssm_gdn_verify_params p, const int tiles, const int tiles_log2) {
  using Tl = Tiling<StateT, K>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  constexpr int kMaxTileRows = kMaxWarps * 16;

  __shared__ __align__(16) float s_k[kMaxSnapshotWindow][K], s_q[kMaxSnapshotWindow][K];
  __shared__ float s_v[kMaxSnapshotWindow][kMaxTileRows];
  __shared__ float s_g[kMaxSnapshotWindow], s_beta[kMaxSnapshotWindow];
  __shared__ float s_urow[kMaxWarps][16];

  const int HV = p.num_v_heads, V = p.head_v_dim, T = p.window;
  const int b = blockIdx.y, hv = blockIdx.x >> tiles_log2, tile = blockIdx.x & (tiles - 1);
  const int kh = hv / (HV / p.num_k_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seg = lane / LPR, col_lane = lane % LPR;
  const int TR = blockDim.x / 32 * RW, row0 = tile * TR;

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  // ---- The tokens' k, q, v, g, beta into shared memory.
  for (int i = threadIdx.x; i < 2 * T * (K / 4); i += blockDim.x) {
    const int vec = i / (K / 4), col = (i - vec * (K / 4)) * 4, t = vec % T;
    const bool is_q = vec >= T;
    const ActT* src = is_q ? static_cast<const ActT*>(p.q) + b * p.q_batch_stride + t * p.q_token_stride +
                                 kh * p.q_head_stride
                           : static_cast<const ActT*>(p.k) + b * p.k_batch_stride + t * p.k_token_stride +
                                 kh * p.k_head_stride;
    float x[4];
    load_vec<ActT, 4>(src + col, x);
    *reinterpret_cast<float4*>((is_q ? s_q[t] : s_k[t]) + col) = make_float4(x[0], x[1], x[2], x[3]);
  }
  for (int i = threadIdx.x; i < T * TR; i += blockDim.x) {
    const int t = i / TR, r = i - t * TR;
    s_v[t][r] = to_float(static_cast<const ActT*>(p.v)[b * p.v_batch_stride + t * p.v_token_stride +
                                                       hv * p.v_head_stride + row0 + r]);
  }
  if (threadIdx.x < T) {
    s_g[threadIdx.x] = p.g[b * p.g_batch_stride + threadIdx.x * p.g_token_stride + hv];
    s_beta[threadIdx.x] = p.beta[b * p.beta_batch_stride + threadIdx.x * p.beta_token_stride + hv];
  }

  // ---- The checkpoint tile into registers (read once).
  const int64_t head_elems = static_cast<int64_t>(V) * K;
  const int thread_off = (warp * RW + seg) * K + col_lane * VEC;
  auto vec_step = [](int i, int c) { return i * RPI * K + c * LPR * VEC; };
  const StateT* src = static_cast<const StateT*>(p.state) + (static_cast<int64_t>(slot) * HV + hv) * head_elems +
                      row0 * K + thread_off;
  float s[KI][NV][VEC];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int c = 0; c < NV; ++c) load_vec<StateT, VEC>(src + vec_step(i, c), s[i][c]);
  __syncthreads();

  // snapshots[slot, t, hv, row0 + ., .]
  StateT* const snap0 = static_cast<StateT*>(p.snapshots) +
                        ((static_cast<int64_t>(slot) * T * HV + hv) * V + row0) * K + thread_off;
  const int64_t snap_token = static_cast<int64_t>(HV) * head_elems;
  ActT* const y0 = static_cast<ActT*>(p.y) + b * p.y_batch_stride + hv * p.y_head_stride + row0;
  const int my_row = warp * RW + scattered_instr<KI, LPR>(lane) * RPI + seg;  // tile row this lane finishes
  const int q = lane % SHARE;

  for (int t = 0; t < T; ++t) {
    float kc[NV][VEC], qc[NV][VEC];
#pragma unroll
    for (int c = 0; c < NV; ++c) {
      load_vec<float, VEC>(s_k[t] + (c * LPR + col_lane) * VEC, kc[c]);
      load_vec<float, VEC>(s_q[t] + (c * LPR + col_lane) * VEC, qc[c]);
    }
    const float decay = expf(s_g[t]);
    float part[KI];
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      part[i] = 0.f;
#pragma unroll
      for (int c = 0; c < NV; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          s[i][c][e] *= decay;
          part[i] = fmaf(s[i][c][e], kc[c][e], part[i]);
        }
    }
    const float sk = group_sum<SHARE>(reduce_scatter<KI, LPR>(part));
    const float uv = s_beta[t] * (s_v[t][my_row] - sk);
    if (q == 0) s_urow[warp][my_row - warp * RW] = uv;  // every lane of a row needs its u
    __syncwarp();
    StateT* snap = snap0 + t * snap_token;
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      const float ui = s_urow[warp][i * RPI + seg];
      part[i] = 0.f;
#pragma unroll
      for (int c = 0; c < NV; ++c) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          s[i][c][e] = fmaf(ui, kc[c][e], s[i][c][e]);
          part[i] = fmaf(s[i][c][e], qc[c][e], part[i]);
        }
        const uint4 stored = pack<StateT, VEC>(s[i][c]);
        store_stream(snap + vec_step(i, c), stored);  // WRITES snapshots[slot, t, hv, rows]
        unpack<StateT, VEC>(stored, s[i][c]);  // continue from the stored (rounded) state
      }
    }
    __syncwarp();  // s_urow is rewritten by the next token
    const float yv = group_sum<SHARE>(reduce_scatter<KI, LPR>(part));
    if (q == 0) y0[t * p.y_token_stride + my_row] = from_float<ActT>(yv);  // WRITES y[b, t, hv, row]
  }
}

// Host launch of the snapshot path; params already validated. Tiles: the fewest with at most kMaxWarps warps,
// split further while the grid has fewer than two blocks per SM.
template <typename StateT, typename ActT, int K>
cudaError_t launch_snapshot(const rssm_gdn_verify_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  using Tl = Tiling<StateT, K>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const int head_warps = p.head_v_dim / Tl::RW;
  int tiles = 1, tiles_log2 = 0;
  while (head_warps / tiles > kMaxWarps) tiles *= 2, ++tiles_log2;
  while (tiles * 2 <= head_warps && static_cast<long long>(p.batch) * p.num_v_heads * tiles < 2LL * sms)
    tiles *= 2, ++tiles_log2;
  const dim3 grid(p.num_v_heads * tiles, p.batch);
  snapshot_kernel<StateT, ActT, K><<<grid, head_warps / tiles * 32, 0, stream>>>(p, tiles, tiles_log2);
  return cudaGetLastError();
}

}  // namespace gdn
}  // namespace replayssm
