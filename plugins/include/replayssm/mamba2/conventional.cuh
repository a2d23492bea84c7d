// Mamba-2 conventional decode (load, update, store) with one warp per tile of state rows: the tile goes
// straight from global memory into registers (no shared-memory staging, no pipeline) and the many small
// independent warps hide the memory latency by occupancy. Same thread-to-state mapping (common/decode_tiling.cuh)
// and the same operations in the same order as the conventional mode of mamba2/decode.cuh, so the two agree
// bit for bit; this one only moves the bytes differently.
//
// Per head (state S is P x N); a warp owns RW rows of P:
//   dt = softplus(dt + dt_bias);  S <- exp(A dt) S + (dt x) Bᵀ;  y = S C + D x;  y *= silu(z);  store S
//
// Replay (the latency route; params.h latency_route_bytes, chosen in mamba2/decode.cuh): the same kernel on a
// ReplaySSM pool, every row flushing. A row whose cursor holds no record (history 0) takes exactly the step
// above, so it matches the conventional kernel bit for bit and writes no cursor. A row with h > 0 records first
// folds them, as the flush route of decode.cuh does (the same fp32 operations in the same order):
//   w_j = dt_j exp(A sum_{i>j} dt_i) over the window (records 0 .. h-1, the current token h), abar = exp(A sum dt)
//   S <- abar S0 + sum_{j<h} (w_j x_j) B_jᵀ, then the current token as above with its weight w_h = dt, exp(0) = 1
// and sets history 0 in the cursor replicas it owns, each replica having one owner that no other warp or block
// reads: a head of at most 8 tiles (P N / 1024) gives each tile its replica (tile, tile + tiles, ...); a head of
// 12 to 32 tiles, a multiple of four (its blocks of four warps never straddle heads), gives each block its
// replica (block t / 4 of the head), which all four warps read before a block barrier and warp 0 writes after
// it (latency_route_fits; gdn/conventional.cuh does the same); a block whose replica holds no record (the steady
// state of the route) writes nothing and skips the barrier. The replica is the first load a warp issues.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/head_inputs.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kConventionalWarpsPerBlock = 4;

// The latency route's limit: a head's fp32 tiles (P * N / 1024 of them, Tiling<float, N>::RW = 1024 / N rows
// each) own the cursor replicas one per tile (at most 8 tiles) or one per block of four (a multiple of four, at
// most 32 tiles). Of the supported shapes only P = 80, N = 128 (10 tiles) does not fit.
__host__ __device__ inline bool latency_route_fits(int head_dim, int dstate) {
  const int tiles = head_dim * dstate / 1024;
  return tiles <= RSSM_CURSOR_REPLICAS ||
         (tiles % kConventionalWarpsPerBlock == 0 && tiles <= RSSM_CURSOR_REPLICAS * kConventionalWarpsPerBlock);
}

// The latency route's fold of a row's h > 0 ring records into the thread's fp32 checkpoint vectors s (the
// tiling of Tiling<float, N>; rows row0 + i * RPI): the window weights from the ring dt and the current dt (one
// or two records per lane, warp_suffix_sums as decode.cuh), S <- abar_window S0, then S += (w_j x_j) B_jᵀ for
// j = 0 .. h-1 in that order. Leaves the current token (weight dt) to the caller.
template <typename ActT, int N>
__device__ __forceinline__ void fold_records(const rssm_mamba2_decode_params& p,
                                             float (&s)[Tiling<float, N>::KI][Tiling<float, N>::NV][Tiling<float, N>::VEC],
                                             int slot, int head, int group, int row0, int hist, int origin, float dt,
                                             float& abar, int lane) {
  using Tl = Tiling<float, N>;
  constexpr int LPR = Tl::LPR;
  const int L = p.buffer_len, H = p.nheads, P = p.head_dim, col_lane = lane % LPR;
  const float A = p.A[head];
  const float* rdt = p.ring_dt + (static_cast<int64_t>(slot) * H + head) * round_up(L, 4);
  auto dt_of = [&](int j) { return j < hist ? rdt[ring_pos(origin, j, L)] : (j == hist ? dt : 0.f); };
  const float d0 = dt_of(lane), d1 = dt_of(lane + 32);
  float ex0, ex1, total;
  warp_suffix_sums(d0, d1, ex0, ex1, total);
  const float w0 = d0 * expf(A * ex0), w1 = d1 * expf(A * ex1);
  abar = expf(A * total);
  scale_each(s, abar);
  const ActT* const rx = static_cast<const ActT*>(p.ring_x) + (static_cast<int64_t>(slot) * H + head) * L * P + row0;
  const ActT* const rB = static_cast<const ActT*>(p.ring_B) + (static_cast<int64_t>(slot) * p.ngroups + group) * L * N;
  fold_ring_records<Tl>(s, hist, origin, L, w0, w1, rx, P, rB, N, col_lane);
}

template <typename StateT, typename ActT, int N, bool kReplay>
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

  // Every load the step needs is issued before any branch on a loaded value (issue_loads_here): the compiler
  // would otherwise sink the state loads below the softplus threshold's branch on dt or the cursor's, and the
  // step would wait for two memory round trips in a row instead of one (the latency of a batch-1 step).
  // Replay: the raw words of the cursor replica this warp reads.
  [[maybe_unused]] int32_t* cur = nullptr;
  [[maybe_unused]] int hist_word = 0, origin_word = 0, rep = 0, owners = 0;
  [[maybe_unused]] bool per_block = false, writer = false;
  if constexpr (kReplay) {
    cur = p.cursor + (static_cast<int64_t>(slot) * H + head) * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
    per_block = tiles > RSSM_CURSOR_REPLICAS;  // the same for the whole grid (header comment)
    rep = per_block ? tile / kConventionalWarpsPerBlock : tile;
    owners = per_block ? tiles / kConventionalWarpsPerBlock : tiles;
    writer = !per_block || tile % kConventionalWarpsPerBlock == 0;
    hist_word = cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY];
    origin_word = cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_ORIGIN];
  }

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
  const HeadInputs head_in = load_head_inputs<ActT>(p, b * p.dt_batch_stride + head * p.dt_head_stride, head);
  const ActT* xg = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head * p.x_head_stride + tile * RW;
  float xv[KI];
  if (RPI == 1) {
    load_vec<ActT, KI>(xg + seg, xv);  // the thread's rows are consecutive
  } else {
#pragma unroll
    for (int i = 0; i < KI; ++i) xv[i] = to_float(xg[seg + i * RPI]);
  }
  const int my_row = scattered_instr<KI, LPR>(lane) * RPI + seg;  // row of the tile this lane finishes
  const bool finisher = lane % SHARE == 0;
  const float x_out = finisher ? to_float(xg[my_row]) : 0.f;
  const float z_out = finisher && p.z ? to_float(static_cast<const ActT*>(p.z)[b * p.z_batch_stride +
                                                                             head * p.z_head_stride + tile * RW + my_row])
                                      : 0.f;
  issue_loads_here();

  const float dt = processed_dt(p, head_in);
  float abar = expf(head_in.A * dt);
  if constexpr (kReplay) {
    static_assert(std::is_same_v<StateT, float>, "the latency route keeps an fp32 checkpoint");
    const int L = p.buffer_len, hist = clamp_history(hist_word, L);
    if (hist > 0) {  // warp-uniform (block-uniform per_block): fold the window's records (S0 scaled by their abar)
      // per_block: the block's warps have read their replica before warp 0 rewrites it. A block whose replica
      // holds no record writes nothing and skips the barrier (all its warps read the one replica).
      if (per_block) __syncthreads();
      fold_records<ActT, N>(p, s, slot, head, group, tile * RW + seg, hist, wrap_origin(origin_word, L), dt, abar,
                            lane);
      abar = 1.f;  // the current token below: S * 1 (exact), then its update with w_h = dt
      // WRITES history 0 into the replicas this warp owns (no other warp or block of this launch reads them)
      if (writer && lane == 0)
        for (int r = rep; r < RSSM_CURSOR_REPLICAS; r += owners) cur[r * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = 0;
    }
  }

  // S = abar S0 + (dt x) Bᵀ at this thread's rows
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
  if (finisher) {
    float out = fmaf(head_in.D, x_out, yv);
    if (p.z) out *= silu_gate(z_out);
    ActT* yg = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head * p.y_head_stride + tile * RW;
    yg[my_row] = from_float<ActT>(out);  // WRITES y[b, head, row]
  }
}

// Host launch of the conventional step (params already validated): one warp per (head, tile of RW rows),
// kConventionalWarpsPerBlock warps per block, one grid row per batch row. kReplay: the latency route over a
// ReplaySSM pool (fp32 checkpoint; see the header comment).
template <typename StateT, typename ActT, int N, bool kReplay = false>
cudaError_t launch_conventional_warp(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  const int units = p.nheads * (p.head_dim / Tl::RW);
  const dim3 grid((units + kConventionalWarpsPerBlock - 1) / kConventionalWarpsPerBlock, p.batch);
  conventional_warp_kernel<StateT, ActT, N, kReplay><<<grid, kConventionalWarpsPerBlock * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mamba2
}  // namespace replayssm
