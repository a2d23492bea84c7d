// Mamba-2 conventional decode (load, update, store) with one warp per tile of state rows: the tile goes
// straight from global memory into registers (no shared-memory staging, no pipeline) and the many small
// independent warps hide the memory latency by occupancy. Same thread-to-state mapping (common/decode_tiling.cuh)
// and the same operations in the same order as the conventional mode of mamba2/decode.cuh, so the two agree
// bit for bit; this one only moves the bytes differently.
//
// Per head (state S is P x N); a warp owns RW rows of P:
//   dt = softplus(dt + dt_bias);  S <- exp(A dt) S + (dt x) Bᵀ;  y = S C + D x;  y *= silu(z);  store S
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kConventionalWarpsPerBlock = 4;

template <typename StateT, typename ActT, int N>
__global__ void __launch_bounds__(kConventionalWarpsPerBlock * 32)
    conventional_warp_kernel(const __grid_constant__ rssm_mamba2_decode_params p) {
  using Tl = Tiling<StateT, N>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;

  const int H = p.nheads, P = p.head_dim, tiles = P / RW;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int unit = blockIdx.x * kConventionalWarpsPerBlock + warp;  // (head, tile) of this warp
  const int head = unit / tiles, tile = unit - head * tiles;
  const int b = blockIdx.y;
  if (head >= H) return;
  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing
  const int group = head / (H / p.ngroups);
  const int seg = lane / LPR, col_lane = lane % LPR;

  // This thread's vectors of the tile: vector (i, v) at row tile * RW + i * RPI + seg, columns
  // (v * LPR + col_lane) * VEC .. + VEC - 1.
  StateT* const st = static_cast<StateT*>(p.state) +
                     ((static_cast<int64_t>(slot) * H + head) * P + tile * RW + seg) * N + col_lane * VEC;
  auto vec_off = [](int i, int v) { return i * RPI * N + v * LPR * VEC; };
  float s[KI][NV][VEC];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int v = 0; v < NV; ++v) load_vec<StateT, VEC>(st + vec_off(i, v), s[i][v]);

  const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  float Bc[NV][VEC], Cc[NV][VEC];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    load_vec<ActT, VEC>(Bg + (v * LPR + col_lane) * VEC, Bc[v]);
    load_vec<ActT, VEC>(Cg + (v * LPR + col_lane) * VEC, Cc[v]);
  }
  float dt = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + head * p.dt_head_stride]);
  dt += p.dt_bias ? p.dt_bias[head] : 0.f;
  dt = p.dt_softplus ? softplus_thresholded(dt) : dt;
  const float abar = expf(p.A[head] * dt);
  const ActT* xg = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head * p.x_head_stride + tile * RW;

  // S = abar S0 + (dt x) Bᵀ at this thread's rows
  float xv[KI];
  if (RPI == 1) {
    load_vec<ActT, KI>(xg + seg, xv);  // the thread's rows are consecutive
  } else {
#pragma unroll
    for (int i = 0; i < KI; ++i) xv[i] = to_float(xg[seg + i * RPI]);
  }
  float part[KI];
#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const float cx = dt * xv[i];
    float acc = 0.f;
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        s[i][v][e] *= abar;  // rounded, then the update: the order of mamba2/decode.cuh
        s[i][v][e] = fmaf(cx, Bc[v][e], s[i][v][e]);
      }
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc = fmaf(s[i][v][e], Cc[v][e], acc);
    part[i] = acc;
#pragma unroll
    for (int v = 0; v < NV; ++v) store_stream(st + vec_off(i, v), pack<StateT, VEC>(s[i][v]));  // WRITES state
  }
  const float yv = group_sum<SHARE>(reduce_scatter<KI, LPR>(part));
  const int my_row = scattered_instr<KI, LPR>(lane) * RPI + seg;  // row of the tile this lane finishes
  if (lane % SHARE == 0) {
    const float x = to_float(xg[my_row]);
    float out = fmaf(p.D ? p.D[head] : 0.f, x, yv);
    if (p.z) out *= silu_gate(to_float(static_cast<const ActT*>(p.z)[b * p.z_batch_stride + head * p.z_head_stride +
                                                                   tile * RW + my_row]));
    ActT* yg = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head * p.y_head_stride + tile * RW;
    yg[my_row] = from_float<ActT>(out);  // WRITES y[b, head, row]
  }
}

// Host launch of the conventional step (params already validated): one warp per (head, tile of RW rows),
// kConventionalWarpsPerBlock warps per block, one grid row per batch row.
template <typename StateT, typename ActT, int N>
cudaError_t launch_conventional_warp(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  const int units = p.nheads * (p.head_dim / Tl::RW);
  const dim3 grid((units + kConventionalWarpsPerBlock - 1) / kConventionalWarpsPerBlock, p.batch);
  conventional_warp_kernel<StateT, ActT, N><<<grid, kConventionalWarpsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mamba2
}  // namespace replayssm
