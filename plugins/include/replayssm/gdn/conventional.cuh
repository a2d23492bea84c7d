// Gated DeltaNet conventional decode (load, update, store) with one warp per tile of state rows: the tile
// goes straight from global memory into registers (no shared-memory staging, no pipeline) and the many small
// independent warps hide the memory latency by occupancy. Same thread-to-state mapping (common/decode_tiling.cuh)
// and the same operations in the same order as the conventional mode of gdn/decode.cuh, so the two agree bit
// for bit; this one only moves the bytes differently.
//
// Per value head hv (key head hv / (HV / H)), state S is V x K (K contiguous); a warp owns RW rows:
//   S <- e^g S ;  u = beta (v - S k) ;  S <- S + u kᵀ ;  y = S q ;  store S
//
// Replay (the latency route; params.h latency_route_bytes, chosen in gdn/decode.cuh): the same kernel on a
// ReplaySSM pool, every row flushing, with the replay step's input options (in-kernel q / k preparation and raw
// gates, gdn/gates.cuh). A row whose cursor holds no record (history 0) takes exactly the step above. A row with
// h > 0 records first folds them as the flush route does (same fp32 operations in the same order):
//   w_j = e^{sum_{i>j} g_i} over the window (records 0 .. h-1, the current token h), S' = e^{sum g} S0 +
//   sum_{j<h} (w_j u_j) k_jᵀ, then the current token's correction and update on S' (its decay is in S')
// and sets history 0 in the cursor replicas its block owns. A head has V K / 1024 tiles, a multiple of four, so
// its blocks of four warps never straddle heads: block t / 4 of the head reads replica t / 4, every warp of the
// block reads it before a block barrier, and after it warp 0 writes replicas t / 4, t / 4 + tiles / 4, ... (at
// most 8 blocks per head: latency_route_fits); a block whose replica holds no record (the steady state of the
// route) writes nothing and skips the barrier. The replica's words are loaded right after the padding check, with
// the state.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/gdn/gates.cuh"
#include "replayssm/gdn/params.h"

namespace replayssm {
namespace gdn {

// Warps per block: the latency route's blocks have four (a cursor replica per block, below); the conventional step's
// have one, bounded to 64 registers (32 resident warps per multiprocessor, each with one tile of RW rows in flight),
// so that a multiprocessor's slot takes the next tile as soon as its warp is done. H200, one run,
// Qwen3.5-122B (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200 section 3): b256 526.8 / 525.7 us against 531.4 / 530.0 with blocks of
// four warps holding two tiles each (116 registers, 16 resident warps), b512 1047.8 / 1049.1 against 1056.8 /
// 1056.1, b1 4.4 against 4.6; four or two one-tile warps per block (also 64 registers) lose 1.5 % at b256.
constexpr int kConventionalWarpsPerBlock = 4;
// (K = 256 spills at 64 registers: no bound there.)
template <int K>
constexpr int kConventionalStepMinBlocksPerSm = K <= 128 ? 32 : 0;

// The latency route's limit: a head's fp32 tiles (V K / 1024 of them) in blocks of four, each block owning a
// cursor replica.
constexpr int kLatencyRouteMaxHeadElems = RSSM_CURSOR_REPLICAS * kConventionalWarpsPerBlock * 1024;
__host__ __device__ inline bool latency_route_fits(int head_v_dim, int head_k_dim) {
  return head_v_dim * head_k_dim <= kLatencyRouteMaxHeadElems;
}

// The latency route's fold of a row's h > 0 ring records into the thread's fp32 checkpoint vectors s (the tiling
// of Tiling<float, K>; rows row0 + i * RPI): window weights from the ring g and the current g (one or two records
// per lane, warp_suffix_sums), S <- e^{sum g} S0, then S += (w_j u_j) k_jᵀ for j = 0 .. h-1 in that order.
template <typename ActT, int K>
__device__ __forceinline__ void fold_records(const rssm_gdn_decode_params& p,
                                             float (&s)[Tiling<float, K>::KI][Tiling<float, K>::NV][Tiling<float, K>::VEC],
                                             int slot, int hv, int kh, int row0, int hist, int origin, float g,
                                             int lane) {
  using Tl = Tiling<float, K>;
  constexpr int LPR = Tl::LPR;
  const int L = p.buffer_len, HV = p.num_v_heads, V = p.head_v_dim, col_lane = lane % LPR;
  const float* rg = p.ring_g + (static_cast<int64_t>(slot) * HV + hv) * round_up(L, 4);
  auto g_of = [&](int j) { return j < hist ? rg[ring_pos(origin, j, L)] : (j == hist ? g : 0.f); };
  const float g0 = g_of(lane), g1 = g_of(lane + 32);
  float ex0, ex1, total;
  warp_suffix_sums(g0, g1, ex0, ex1, total);
  const float w0 = expf(ex0), w1 = expf(ex1), abar = expf(total);
  scale_each(s, abar);
  const ActT* const ru = static_cast<const ActT*>(p.ring_u) + (static_cast<int64_t>(slot) * HV + hv) * L * V + row0;
  const ActT* const rk = static_cast<const ActT*>(p.ring_k) + (static_cast<int64_t>(slot) * p.num_k_heads + kh) * L * K;
  fold_ring_records<Tl>(s, hist, origin, L, w0, w1, ru, V, rk, K, col_lane);
}

// One warp's (batch row b, value head hv, tile of RW rows) of the step; slot_word the row's slot (or
// padding; the latency route's load of it may still be in flight), s_urow the warp's RW floats of shared memory.
// What does not depend on the slot is computed first: the key head (an integer division; head and tile come from
// the grid), the addresses of k, q and v (their loads stand before the padding check in the source, so that this
// arithmetic does too: a padding row may read its inputs, never the pool). Then the padding check, the cursor's
// words and the state, then the gates. Every load is issued before any branch on a loaded value but the padding check
// (issue_loads_here, as mamba2/conventional.cuh). kPreparedInputs: precomputed gates and q / k used as given (the
// conventional step; the latency route's instance for such calls), else either kind, as params say (gates.cuh).
// kStreamStores: the state stored with streaming stores (the latency route) instead of plain ones (the conventional
// step; conventional_step_kernel below).
template <typename StateT, typename ActT, int K, bool kReplay, bool kPreparedInputs = !kReplay,
          bool kStreamStores = false>
__device__ __forceinline__ void conventional_tile(const rssm_gdn_decode_params& p, int b, int hv, int tile,
                                                  int slot_word, int warp, int lane, float* s_urow) {
  using Tl = Tiling<StateT, K>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  const int HV = p.num_v_heads, V = p.head_v_dim, tiles = V / RW;
  if (hv >= HV) return;
  const int kh = hv / (HV / p.num_k_heads);
  const int seg = lane / LPR, col_lane = lane % LPR;
  float Kc[NV][VEC], Qc[NV][VEC];
  load_qk<ActT, NV, VEC, LPR>(p, b, kh, col_lane, Kc, Qc);
  const int my_row = scattered_instr<KI, LPR>(lane) * RPI + seg;  // row of a tile this lane finishes
  const float v_row =
      to_float(static_cast<const ActT*>(p.v)[b * p.v_batch_stride + hv * p.v_head_stride + tile * RW + my_row]);
  issue_loads_here();
  const int slot = slot_word;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch no pool buffer

  // Replay: the raw words of the block's cursor replica (its warps are tiles 4 rep .. + 3).
  [[maybe_unused]] int32_t* cur = nullptr;
  [[maybe_unused]] int hist_word = 0, origin_word = 0;
  const int rep = tile / kConventionalWarpsPerBlock;
  if constexpr (kReplay) {
    cur = p.cursor + (static_cast<int64_t>(slot) * HV + hv) * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
    hist_word = cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY];
    origin_word = cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_ORIGIN];
  }

  // This thread's vectors of the warp's tile: vector (i, c) at row tile * RW + i * RPI + seg, columns
  // (c * LPR + col_lane) * VEC .. + VEC - 1.
  StateT* const st = static_cast<StateT*>(p.state) +
                     ((static_cast<int64_t>(slot) * HV + hv) * V + tile * RW + seg) * K + col_lane * VEC;
  auto vec_off = [](int i, int c) { return i * RPI * K + c * LPR * VEC; };
  float s[KI][NV][VEC];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int c = 0; c < NV; ++c) load_vec<StateT, VEC>(st + vec_off(i, c), s[i][c]);
  // The gates last: the latency route's raw-or-precomputed loads are ~100 instructions of branches on the
  // parameters, which ahead of the padding check delayed the state loads (b1 4.5-4.6 us against 4.4).
  HeadGateInputs gates_in;  // precomputed gates (kPreparedInputs), else either kind
  if constexpr (kPreparedInputs) {
    gates_in.a_or_g = p.g[b * p.g_batch_stride + hv];
    gates_in.b_or_beta = p.beta[b * p.beta_batch_stride + hv];
  } else {
    gates_in = load_head_gates(p, b, hv);
  }
  issue_loads_here();

  float g, beta, abar;
  if constexpr (kPreparedInputs) {
    g = gates_in.a_or_g, beta = gates_in.b_or_beta;
  } else {
    prepare_qk<ActT, NV, VEC, LPR>(p, Kc, Qc);
    head_gates(p, gates_in, g, beta);
  }
  abar = expf(g);
  if constexpr (kReplay) {
    static_assert(std::is_same_v<StateT, float>, "the latency route keeps an fp32 checkpoint");
    const int L = p.buffer_len, hist = clamp_history(hist_word, L);
    if (hist > 0) {  // block-uniform (one replica per block): fold the window's records (S0 scaled by their decay)
      // Every warp of the block has read the replica before warp 0 rewrites it. A block whose replica holds no
      // record writes nothing and skips the barrier.
      __syncthreads();
      fold_records<ActT, K>(p, s, slot, hv, kh, tile * RW + seg, hist, wrap_origin(origin_word, L), g, lane);
      abar = 1.f;  // the current token's decay is in S'
      // WRITES history 0 into the replicas this block owns (no other block of this launch reads them)
      if (warp == 0 && lane == 0)
        for (int r = rep; r < RSSM_CURSOR_REPLICAS; r += tiles / kConventionalWarpsPerBlock)
          cur[r * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = 0;
    }
  }
  auto lane_dot = [&](const float (&sv)[NV][VEC], const float (&x)[NV][VEC]) {
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc = fmaf(sv[c][e], x[c][e], acc);
    return acc;
  };
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
  const float uv = beta * (v_row - sk);
  // Every lane of a row needs its u: through shared memory, within the warp.
  if (q == 0) s_urow[my_row] = uv;
  __syncwarp();
  // S = S' + u kᵀ;  y = S q;  store S
#pragma unroll
  for (int i = 0; i < KI; ++i) {
    const float ui = s_urow[i * RPI + seg];
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(ui, Kc[c][e], s[i][c][e]);
    part[i] = lane_dot(s[i], Qc);
#pragma unroll
    for (int c = 0; c < NV; ++c) {
      if constexpr (!kStreamStores)  // plain stores (see the comment above)
        *reinterpret_cast<uint4*>(st + vec_off(i, c)) = pack<StateT, VEC>(s[i][c]);  // WRITES state
      else
        store_stream(st + vec_off(i, c), pack<StateT, VEC>(s[i][c]));  // WRITES state
    }
  }
  const float yv = group_sum<SHARE>(reduce_scatter<KI, LPR>(part));
  if (q == 0) {
    ActT* yg = static_cast<ActT*>(p.y) + b * p.y_batch_stride + hv * p.y_head_stride;
    yg[tile * RW + my_row] = from_float<ActT>(yv);  // WRITES y[b, hv, row]
  }
}


// The latency route: grid (four tiles, value head, batch row), blocks of four warps (one cursor replica each; a
// head's tiles are a multiple of four). The slot index goes out first, and what does not depend on it is computed
// while it is in flight (above).
template <typename StateT, typename ActT, int K, bool kPreparedInputs>
__global__ void __launch_bounds__(kConventionalWarpsPerBlock * 32)
    latency_route_kernel(const __grid_constant__ rssm_gdn_decode_params p) {
  __shared__ float s_urow[kConventionalWarpsPerBlock][Tiling<StateT, K>::RW];
  const int b = blockIdx.z;
  const int slot_word = p.slot_idx ? p.slot_idx[b] : b;
  issue_loads_here();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  conventional_tile<StateT, ActT, K, true, kPreparedInputs, /*kStreamStores=*/true>(
      p, b, blockIdx.y, blockIdx.x * kConventionalWarpsPerBlock + warp, slot_word, warp, lane, s_urow[warp]);
}

// The conventional step: one warp per block and tile, grid (tile, value head, batch row), so that no integer
// division stands before the slot index's load (the blocks of consecutive tiles and heads of a row are dispatched
// in order, so the tiles in flight at a time are consecutive in memory); plain state stores
// (the latency route keeps streaming ones). H200, Qwen3.5-122B, fp32 state, two passes
// (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200): plain stores b256 526.1 / 525.8 us against 528.0 / 528.1 streaming, b512 -0.4 %.
// Lost there: persistent warps walking tiles t, t + grid (next slot index loaded ahead; +12-17 %, +30 % with a
// bulk L2 prefetch of the next tile), two adjacent tiles per warp with the second staged in shared memory by
// cp.async or a bulk copy (+4-5 %), L2 evict-first loads or L1 no-allocate loads (+2-4 %). Stores with an L2
// evict-last policy gained 0.2-0.6 % on the step but leave the written state at the highest eviction priority
// in L2 for the kernels after it: not taken.
template <typename StateT, typename ActT, int K>
__global__ void __launch_bounds__(32, kConventionalStepMinBlocksPerSm<K>)
    conventional_step_kernel(const __grid_constant__ rssm_gdn_decode_params p) {
  __shared__ float s_urow[Tiling<StateT, K>::RW];
  const int b = blockIdx.z;
  const int slot_word = p.slot_idx ? p.slot_idx[b] : b;
  issue_loads_here();
  conventional_tile<StateT, ActT, K, false>(p, b, blockIdx.y, blockIdx.x, slot_word, 0, threadIdx.x, s_urow);
}

// Host launches (params already validated). The latency route: one block of four warps per (4 tiles, head, batch row),
// over a ReplaySSM pool (fp32 checkpoint, scalar decay; see the header comment). The conventional step: one
// one-warp block per (tile, head, batch row).
template <typename StateT, typename ActT, int K>
cudaError_t launch_latency_route(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  // (V K / 1024 tiles per head, V and K in {64, 128, 256}: a multiple of four)
  const dim3 grid(p.head_v_dim / Tiling<StateT, K>::RW / kConventionalWarpsPerBlock, p.num_v_heads, p.batch);
  // Prepared inputs (precomputed gates, no in-kernel q / k preparation): an instance without the branches of the
  // raw-or-prepared inputs. H200, one run, two passes (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200 section 4): steady state (history
  // 0) level at b1 / b8, steps with records to fold -0.5 us at b1 (non-flush 6.7 against 7.2-7.3) and -1 us at b8.
  const dim3 block(kConventionalWarpsPerBlock * 32);
  if (p.gate_mode != RSSM_GDN_GATES_RAW && p.qk_flags == 0)
    latency_route_kernel<StateT, ActT, K, true><<<grid, block, 0, stream>>>(p);
  else
    latency_route_kernel<StateT, ActT, K, false><<<grid, block, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename StateT, typename ActT, int K>
cudaError_t launch_conventional_step(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  const dim3 grid(p.head_v_dim / Tiling<StateT, K>::RW, p.num_v_heads, p.batch);
  conventional_step_kernel<StateT, ActT, K><<<grid, 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace gdn
}  // namespace replayssm
