// Gated DeltaNet conventional decode (load, update, store) with one warp per tile of state rows: the tile
// goes straight from global memory into registers (no shared-memory staging, no pipeline) and the many small
// independent warps hide the memory latency by occupancy. Same thread-to-state mapping (common/decode_tiling.cuh)
// and the same operations in the same order as the conventional mode of gdn/decode.cuh, so the two agree bit
// for bit; this one only moves the bytes differently.
//
// Per value head hv (key head hv / (HV / H)), state S is V x K (K contiguous); a warp owns RW rows:
//   S <- e^g S ;  u = beta (v - S k) ;  S <- S + u kᵀ ;  y = S q ;  store S
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/gdn/params.h"

namespace replayssm {
namespace gdn {

constexpr int kConventionalWarpsPerBlock = 4;

template <typename StateT, typename ActT, int K>
__global__ void __launch_bounds__(kConventionalWarpsPerBlock * 32)
    conventional_warp_kernel(const __grid_constant__ rssm_gdn_decode_params p) {
  using Tl = Tiling<StateT, K>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  __shared__ float s_urow[kConventionalWarpsPerBlock][RW];  // u of each row of a warp

  const int HV = p.num_v_heads, V = p.head_v_dim, tiles = V / RW;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int unit = blockIdx.x * kConventionalWarpsPerBlock + warp;  // (value head, tile) of this warp
  const int hv = unit / tiles, tile = unit - hv * tiles;
  const int b = blockIdx.y;
  if (hv >= HV) return;
  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing
  const int kh = hv / (HV / p.num_k_heads);
  const int seg = lane / LPR, col_lane = lane % LPR;

  // This thread's vectors of the tile: vector (i, c) at row tile * RW + i * RPI + seg, columns
  // (c * LPR + col_lane) * VEC .. + VEC - 1.
  StateT* const st = static_cast<StateT*>(p.state) +
                     ((static_cast<int64_t>(slot) * HV + hv) * V + tile * RW + seg) * K + col_lane * VEC;
  auto vec_off = [](int i, int c) { return i * RPI * K + c * LPR * VEC; };
  float s[KI][NV][VEC];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int c = 0; c < NV; ++c) load_vec<StateT, VEC>(st + vec_off(i, c), s[i][c]);

  const ActT* kg = static_cast<const ActT*>(p.k) + b * p.k_batch_stride + kh * p.k_head_stride;
  const ActT* qg = static_cast<const ActT*>(p.q) + b * p.q_batch_stride + kh * p.q_head_stride;
  float Kc[NV][VEC], Qc[NV][VEC];
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    load_vec<ActT, VEC>(kg + (c * LPR + col_lane) * VEC, Kc[c]);
    load_vec<ActT, VEC>(qg + (c * LPR + col_lane) * VEC, Qc[c]);
  }
  const float g = p.g[b * p.g_batch_stride + hv], beta = p.beta[b * p.beta_batch_stride + hv];
  const float abar = expf(g);
  auto lane_dot = [&](const float (&sv)[NV][VEC], const float (&x)[NV][VEC]) {
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc = fmaf(sv[c][e], x[c][e], acc);
    return acc;
  };
  const int my_row = scattered_instr<KI, LPR>(lane) * RPI + seg;  // row of the tile this lane finishes
  const int q = lane % SHARE;

  // S' = e^g S;  u = beta (v - S'k)
  float part[KI];
#pragma unroll
  for (int i = 0; i < KI; ++i) {
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[i][c][e] *= abar;
    part[i] = lane_dot(s[i], Kc);
  }
  const float sk = group_sum<SHARE>(reduce_scatter<KI, LPR>(part));
  const int64_t vy_row = tile * RW + my_row;
  const ActT* vg = static_cast<const ActT*>(p.v) + b * p.v_batch_stride + hv * p.v_head_stride;
  const float uv = beta * (to_float(vg[vy_row]) - sk);
  // Every lane of a row needs its u: through shared memory, within the warp.
  if (q == 0) s_urow[warp][my_row] = uv;
  __syncwarp();
  // S = S' + u kᵀ;  y = S q;  store S
#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const float ui = s_urow[warp][i * RPI + seg];
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(ui, Kc[c][e], s[i][c][e]);
    part[i] = lane_dot(s[i], Qc);
#pragma unroll
    for (int c = 0; c < NV; ++c) store_stream(st + vec_off(i, c), pack<StateT, VEC>(s[i][c]));  // WRITES state
  }
  const float yv = group_sum<SHARE>(reduce_scatter<KI, LPR>(part));
  if (q == 0) {
    ActT* yg = static_cast<ActT*>(p.y) + b * p.y_batch_stride + hv * p.y_head_stride;
    yg[vy_row] = from_float<ActT>(yv);  // WRITES y[b, hv, row]
  }
}

// Host launch of the conventional step (params already validated): one warp per (value head, tile of RW
// rows), kConventionalWarpsPerBlock warps per block, one grid row per batch row.
template <typename StateT, typename ActT, int K>
cudaError_t launch_conventional_warp(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, K>;
  const int units = p.num_v_heads * (p.head_v_dim / Tl::RW);
  const dim3 grid((units + kConventionalWarpsPerBlock - 1) / kConventionalWarpsPerBlock, p.batch);
  conventional_warp_kernel<StateT, ActT, K><<<grid, kConventionalWarpsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace gdn
}  // namespace replayssm
