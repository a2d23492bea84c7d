// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; docs/mamba2.md has the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes (common/decode_tiling.cuh): one block per (batch row, group, chunk of consecutive
// (head, tile) units). A block stages the group's ring of B records once, computes B_j·C once, and streams its
// units through a 3-stage cp.async pipeline: each thread copies its own vectors of the checkpoint tile (and
// reads back exactly those), and the small per-unit inputs (ring x and dt records, cursor, x, z) land beside
// them; while a unit is computed, the next two are in flight. Warp 0 computes the next unit's decay weights
// while the other warps finish the current one.
//
// ReplaySSM, per row of the batch, with h = records in the ring since the checkpoint S0 (cursor history) and
// the current token as record h (t = h + 1 records in the window; record j sits at ring position
// (origin + j) mod L):
//   w_j  = dt_j * exp(A * sum_{i>j} dt_i),   abar = exp(A * sum_i dt_i)
//   non-flush (h < L-1): y = abar (S0·C) + sum_j w_j (B_j·C) x_j; append (x, B, dt) at ring position h
//   flush     (h = L-1): S = abar S0 + sum_j (w_j x_j) B_jᵀ; store S; y = S·C; history := 0
// The conventional step is the flush route with t = 1 (the current token only) and no ring, performing the
// same operations in the same order: at L = 1 the replay step equals it bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

// Dynamic shared memory of one block, byte offsets (all 16-byte aligned): the group's ring of B records, then
// `stages` stages of per-unit inputs.
struct SmemPlan {
  int ring_B;                                      // block-wide
  int stage0, stage_bytes;                         // stage k starts at stage0 + k * stage_bytes
  int state, ring_x, ring_dt, x, z, cursor;        // offsets inside a stage
  int bytes;
};

inline SmemPlan smem_plan(int L, int N, int rows, int state_bytes, int act_bytes, int stages) {
  SmemPlan s{};
  int off = 0;
  auto take = [&](int bytes) {
    const int at = off;
    off += round_up(bytes, 16);
    return at;
  };
  s.ring_B = take(L * N * act_bytes);
  s.stage0 = off;
  off = 0;
  s.state = take(rows * N * state_bytes);
  s.ring_x = take(L * rows * act_bytes);
  s.ring_dt = take(round_up(L, 4) * 4);
  s.x = take(rows * act_bytes);
  s.z = take(rows * act_bytes);
  s.cursor = take(L > 0 ? RSSM_CURSOR_FIELDS * 4 : 0);
  s.stage_bytes = off;
  s.bytes = s.stage0 + stages * s.stage_bytes;
  return s;
}

template <typename StateT, typename ActT, int N, bool REPLAY>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const Shape shape, const SmemPlan sp) {
  using Tl = Tiling<StateT, N>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  constexpr int kMaxChunkHeads = kMaxUnits;

  extern __shared__ __align__(16) char smem[];
  __shared__ float s_dt[kMaxChunkHeads], s_A[kMaxChunkHeads], s_D[kMaxChunkHeads];  // the chunk's heads
  __shared__ float s_bcpos[kMaxBufferLen];    // B·C of the ring record at each position
  __shared__ float s_bccur;                   // B·C of the current token
  __shared__ float s_w[2][kMaxBufferLen];     // w_j of a unit's window (by unit parity)
  __shared__ float s_coef[2][kMaxBufferLen];  // w_j (B_j·C)
  __shared__ float s_abar[2];

  const int H = p.nheads, P = p.head_dim, L = REPLAY ? p.buffer_len : 1, T = shape.tiles, TR = shape.rows;
  const int U = shape.units, S = shape.stages, TL = shape.tiles_log2;
  const int b = blockIdx.y, group = blockIdx.x / shape.chunks, chunk = blockIdx.x - group * shape.chunks;
  const int hpg = H / p.ngroups;
  const int unit0 = chunk * U;                   // first unit of this block within the group
  const int head0 = group * hpg + (unit0 >> TL);  // first head of this block
  const int tile_base = unit0 & (T - 1);          // its tile; unit u is (head0 + h, tile) with
                                                  // h = (tile_base + u) >> TL, tile = (tile_base + u) & (T - 1)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int seg = lane / LPR, col_lane = lane % LPR;
  const int ldt = round_up(L, 4);  // ring_dt row length

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  // Per-block bases (64-bit once); per-unit offsets from them are 32-bit (validate() bounds a slot's bytes).
  const int64_t sh0 = static_cast<int64_t>(slot) * H + head0;
  StateT* const state_blk = static_cast<StateT*>(p.state) + sh0 * P * N;  // unit u's tile at (tile_base + u) TR N
  const ActT* const x_blk = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head0 * p.x_head_stride;
  const ActT* const z_blk = p.z ? static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head0 * p.z_head_stride : nullptr;
  ActT* const y_blk = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;
  ActT* const ring_x_blk = REPLAY ? static_cast<ActT*>(p.ring_x) + sh0 * L * P : nullptr;
  float* const ring_dt_blk = REPLAY ? p.ring_dt + sh0 * ldt : nullptr;
  int32_t* const cursor_blk = REPLAY ? p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS : nullptr;
  const int xhs = static_cast<int>(p.x_head_stride), zhs = static_cast<int>(p.z_head_stride);
  const int yhs = static_cast<int>(p.y_head_stride);

  auto stage_ptr = [&](int stage) { return smem + sp.stage0 + stage * sp.stage_bytes; };
  // Offset, in elements, of this thread's first vector inside a tile of TR x N; vector (i, v) sits
  // vec_step(i, v) further (a compile-time constant: one base register plus immediate offsets).
  const int thread_off = (warp * RW + seg) * N + col_lane * VEC;
  auto vec_step = [](int i, int v) { return i * RPI * N + v * LPR * VEC; };
  const int xz_warp = nwarps > 1 ? 1 : 0;        // copies x and z (warp 0 copies cursor and ring dt)
  const int x_chunks = TR * static_cast<int>(sizeof(ActT)) / 8;  // 8-byte pieces of a tile row of x

  // Queues every copy of unit u into `stage` (asynchronous; no registers held): this thread's own vectors of
  // the checkpoint tile (it reads back exactly what it copied); the tile rows of the current x and z; and
  // (replay) the cursor replica and the head's ring of dt (from warp 0, which computes the decay weights from
  // them ahead of the other warps) and the ring's x records of the tile rows. The whole ring is copied, so
  // that no copy waits for the cursor.
  auto issue_unit = [&](int u, int stage) {
    const int uu = tile_base + u, h = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    char* st = stage_ptr(stage);
    const StateT* gs = state_blk + (uu * TR * N + thread_off);
    StateT* ss = reinterpret_cast<StateT*>(st + sp.state) + thread_off;
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) cp_async<16>(ss + vec_step(i, v), gs + vec_step(i, v));
    if (warp == xz_warp) {
      for (int c = lane; c < x_chunks; c += 32)
        cp_async<8>(st + sp.x + c * 8, reinterpret_cast<const char*>(x_blk + h * xhs + row0) + c * 8);
      if (z_blk)
        for (int c = lane; c < x_chunks; c += 32)
          cp_async<8>(st + sp.z + c * 8, reinterpret_cast<const char*>(z_blk + h * zhs + row0) + c * 8);
    }
    if (REPLAY) {
      if (warp == 0) {
        if (lane == 0) cp_async<8>(st + sp.cursor, cursor_blk + (h * RSSM_CURSOR_REPLICAS + tile) * RSSM_CURSOR_FIELDS);
        if (lane < ldt / 4) cp_async<16>(st + sp.ring_dt + lane * 16, ring_dt_blk + h * ldt + lane * 4);
      }
      const char* rxg = reinterpret_cast<const char*>(ring_x_blk + h * L * P + row0);
      if (T == 1) {  // the head's whole ring of x records is one contiguous block
        const int n16 = L * P * static_cast<int>(sizeof(ActT)) / 16;
        for (int i = threadIdx.x; i < n16; i += blockDim.x) cp_async<16>(st + sp.ring_x + i * 16, rxg + i * 16);
      } else {
        for (int pos = warp; pos < L; pos += nwarps)
          for (int c = lane; c < x_chunks; c += 32)
            cp_async<8>(st + sp.ring_x + (pos * x_chunks + c) * 8, rxg + pos * P * static_cast<int>(sizeof(ActT)) + c * 8);
      }
    }
  };

  // Cursor of a unit from its stage (common/types.h), clamped so that a corrupted cursor never indexes
  // outside the ring.
  auto read_cursor = [&](const char* st, int& hist, int& origin) {
    const int2 cur = *reinterpret_cast<const int2*>(st + sp.cursor);
    hist = min(max(cur.x, 0), L - 1);
    origin = cur.y;
    if (origin < 0 || origin >= L) origin = ((origin % L) + L) % L;
  };

  // Decay weights of unit u's window (warp 0; replay): w_j, w_j (B_j·C) and abar into the unit's parity
  // buffers. Reads only what warp 0 copied (cursor, ring dt) and block-wide values published earlier.
  auto window_weights = [&](int u, int stage) {
    const char* st = stage_ptr(stage);
    int hist, origin;
    read_cursor(st, hist, origin);
    const int h = (tile_base + u) >> TL, par = u & 1;
    const float A = s_A[h], dt = s_dt[h];
    const float* rdt_s = reinterpret_cast<const float*>(st + sp.ring_dt);
    auto window_dt = [&](int j) -> float {
      if (j > hist) return 0.f;
      return j == hist ? dt : rdt_s[ring_pos(origin, j, L)];
    };
    auto window_bc = [&](int j) -> float {
      if (j > hist) return 0.f;
      return j == hist ? s_bccur : s_bcpos[ring_pos(origin, j, L)];
    };
    if (L <= 32) {
      const float dt0 = window_dt(lane);
      float ex0, total;
      warp_suffix_sums(dt0, ex0, total);
      const float w0 = dt0 * expf(A * ex0);
      s_w[par][lane] = w0;
      s_coef[par][lane] = w0 * window_bc(lane);
      if (lane == 0) s_abar[par] = expf(A * total);
    } else {
      const float dt0 = window_dt(lane), dt1 = window_dt(lane + 32);
      float ex0, ex1, total;
      warp_suffix_sums(dt0, dt1, ex0, ex1, total);
      const float w0 = dt0 * expf(A * ex0), w1 = dt1 * expf(A * ex1);
      s_w[par][lane] = w0;
      s_w[par][lane + 32] = w1;
      s_coef[par][lane] = w0 * window_bc(lane);
      s_coef[par][lane + 32] = w1 * window_bc(lane + 32);
      if (lane == 0) s_abar[par] = expf(A * total);
    }
  };

  // ---- Prologue: the group's ring of B records and units 0 and 1 in flight; the chunk's per-head scalars;
  // this lane's columns of the current B and C.
  if (REPLAY) {
    const int64_t sg = static_cast<int64_t>(slot) * p.ngroups + group;
    const char* rBg = reinterpret_cast<const char*>(static_cast<const ActT*>(p.ring_B) + sg * L * N);
    const int nB = L * N * static_cast<int>(sizeof(ActT)) / 16;
    for (int i = threadIdx.x; i < nB; i += blockDim.x) cp_async<16>(smem + sp.ring_B + i * 16, rBg + i * 16);
  }
  issue_unit(0, 0);
  cp_async_commit();
  if (U > 1) issue_unit(1, 1);
  cp_async_commit();
  const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  float Bc[NV][VEC], Cc[NV][VEC];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    load_vec<ActT, VEC>(Bg + (v * LPR + col_lane) * VEC, Bc[v]);
    load_vec<ActT, VEC>(Cg + (v * LPR + col_lane) * VEC, Cc[v]);
  }
  const int chunk_heads = ((tile_base + U - 1) >> TL) + 1;
  if (threadIdx.x < chunk_heads) {
    const int head = head0 + threadIdx.x;
    float dt = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + head * p.dt_head_stride]);
    dt += p.dt_bias ? p.dt_bias[head] : 0.f;
    s_dt[threadIdx.x] = p.dt_softplus ? softplus_thresholded(dt) : dt;
    s_A[threadIdx.x] = p.A[head];
    s_D[threadIdx.x] = p.D ? p.D[head] : 0.f;
  }

  const ActT* rB_s = reinterpret_cast<const ActT*>(smem + sp.ring_B);
  auto lane_dot = [&](const float (&s)[NV][VEC]) {  // one chain per row: a thread has KI independent rows
    float acc = 0.f;
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc = fmaf(s[v][e], Cc[v][e], acc);
    return acc;
  };
  const int my_row = warp * RW + scattered_instr<KI, LPR>(lane) * RPI + seg;  // tile row this lane finishes
  const int q = lane % SHARE;
  // The group's ring of B records is written once per (slot, group): by the unit of its first head, tile 0.
  const bool group_first_block = (unit0 >> TL) == 0;

  int stage = 0;  // stage of unit u
  for (int u = 0; u < U; ++u) {
    cp_async_wait_group<1>();  // unit u (and, at u = 0, the ring of B) has landed for this thread's copies
    __syncthreads();           // ... and for everyone's; the stage of unit u + 2 was last read in unit u - 1
    if (u + 2 < U) issue_unit(u + 2, stage + 2 < S ? stage + 2 : stage + 2 - S);
    cp_async_commit();

    if (REPLAY && u == 0) {
      // B·C of every ring position and of the current token, once per block: segment seg of warp w takes
      // positions w * RPI + seg, + nseg, ... (position L: the current token); the loop is warp-uniform.
      const int nseg = nwarps * RPI;
      for (int j0 = warp * RPI; j0 <= L; j0 += nseg) {
        const int j = j0 + seg;
        float d = 0.f;
        if (j < L) {
#pragma unroll
          for (int v = 0; v < NV; ++v) {
            float bj[VEC];
            load_vec<ActT, VEC>(rB_s + j * N + (v * LPR + col_lane) * VEC, bj);
#pragma unroll
            for (int e = 0; e < VEC; ++e) d = fmaf(bj[e], Cc[v][e], d);
          }
        } else if (j == L) {
#pragma unroll
          for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) d = fmaf(Bc[v][e], Cc[v][e], d);
        }
        d = group_sum<LPR>(d);
        if (col_lane == 0 && j < L) s_bcpos[j] = d;
        if (col_lane == 0 && j == L) s_bccur = d;
      }
      __syncthreads();
      if (warp == 0) window_weights(0, 0);
      __syncthreads();
    }

    const int uu = tile_base + u, h = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    const char* st = stage_ptr(stage);
    const StateT* ss = reinterpret_cast<const StateT*>(st + sp.state);
    const ActT* rx_s = reinterpret_cast<const ActT*>(st + sp.ring_x);
    const ActT* x_s = reinterpret_cast<const ActT*>(st + sp.x);
    const ActT* z_s = reinterpret_cast<const ActT*>(st + sp.z);
    const int par = u & 1;
    const float dt = s_dt[h];

    int hist = 0, origin = 0;
    if (REPLAY) read_cursor(st, hist, origin);
    const bool flush = !REPLAY || hist == L - 1;
    const int t = hist + 1;
    auto x_rec = [&](int j, int r) -> float {  // x of window record j for tile row r
      return j == hist ? to_float(x_s[r]) : to_float(rx_s[ring_pos(origin, j, L) * TR + r]);
    };
    // The replay weights at t = 1 are abar = exp(A dt), w_0 = dt: the conventional step uses them directly.
    const float abar = REPLAY ? s_abar[par] : expf(s_A[h] * dt);

    // ---- Per-lane partial dots with C, reduce-scattered across each row's lanes.
    float part[KI];
    float yv;
    if (flush) {
      // S = abar S0 + sum_j (w_j x_j) B_jᵀ, stored; y = S·C.
      StateT* gstate = state_blk + (uu * TR * N + thread_off);
      float s[KI][NV][VEC];
#pragma unroll
      for (int i = 0; i < KI; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) {
          load_vec<StateT, VEC>(ss + thread_off + vec_step(i, v), s[i][v]);
#pragma unroll
          for (int e = 0; e < VEC; ++e) s[i][v][e] *= abar;
        }
      for (int j = 0; j < t; ++j) {
        // Record j: its x at this thread's rows, its B at this lane's columns (the current token's from
        // registers, ring records from the stage), its weight.
        const bool current = j == hist;
        const ActT* xj = (current ? x_s : rx_s + ring_pos(origin, j, L) * TR) + warp * RW + seg;
        float xv[KI];
        if (RPI == 1) {
          load_vec<ActT, KI>(xj, xv);  // the thread's rows are consecutive
        } else {
#pragma unroll
          for (int i = 0; i < KI; ++i) xv[i] = to_float(xj[i * RPI]);
        }
        float Bj[NV][VEC];
        if (current) {
#pragma unroll
          for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) Bj[v][e] = Bc[v][e];
        } else {
          const ActT* Bjs = rB_s + ring_pos(origin, j, L) * N;
#pragma unroll
          for (int v = 0; v < NV; ++v) load_vec<ActT, VEC>(Bjs + (v * LPR + col_lane) * VEC, Bj[v]);
        }
        const float wj = REPLAY ? s_w[par][j] : dt;
#pragma unroll
        for (int i = 0; i < KI; ++i) {
          const float cx = wj * xv[i];
#pragma unroll
          for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[i][v][e] = fmaf(cx, Bj[v][e], s[i][v][e]);
        }
      }
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        part[i] = lane_dot(s[i]);
#pragma unroll
        for (int v = 0; v < NV; ++v) store_stream(gstate + vec_step(i, v), pack<StateT, VEC>(s[i][v]));  // WRITES state
      }
      yv = reduce_scatter<KI, LPR>(part);
    } else {
      // y = abar (S0·C) + sum_j w_j (B_j·C) x_j; the SHARE lanes of a row split the window between them.
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        float s[NV][VEC];
#pragma unroll
        for (int v = 0; v < NV; ++v) load_vec<StateT, VEC>(ss + thread_off + vec_step(i, v), s[v]);
        part[i] = lane_dot(s);
      }
      yv = abar * reduce_scatter<KI, LPR>(part);
      for (int j = q; j < t; j += SHARE) yv = fmaf(s_coef[par][j], x_rec(j, my_row), yv);
    }
    yv = group_sum<SHARE>(yv);

    // ---- Epilogue: y, and (replay) the ring record and the cursor.
    const int pos_new = REPLAY ? ring_pos(origin, hist, L) : 0;
    if (q == 0) {
      const float xv = to_float(x_s[my_row]);
      float out = fmaf(s_D[h], xv, yv);
      if (z_blk) out *= silu_gate(to_float(z_s[my_row]));
      y_blk[h * yhs + row0 + my_row] = from_float<ActT>(out);  // WRITES y[b, head, row]
      // WRITES ring_x[slot, head, pos_new, row] (an exact copy of x)
      if (REPLAY && !flush) ring_x_blk[(h * L + pos_new) * P + row0 + my_row] = x_s[my_row];
    }
    if (REPLAY) {
      if (!flush) {
        // WRITES ring_dt of (slot, head) and, from the group's first unit, ring_B of (slot, group).
        if (threadIdx.x == 0) ring_dt_blk[h * ldt + pos_new] = dt;
        if (group_first_block && uu == 0 && warp == 0 && seg == 0) {
          ActT* rB = static_cast<ActT*>(p.ring_B) + ((static_cast<int64_t>(slot) * p.ngroups + group) * L + pos_new) * N;
#pragma unroll
          for (int v = 0; v < NV; ++v) store_vec<ActT, VEC>(rB + (v * LPR + col_lane) * VEC, Bc[v]);
        }
      }
      // WRITES the cursor replicas this unit owns: tile, tile + T, ... (no other unit of this launch reads or
      // writes them), one lane each.
      if (warp == 0 && lane < RSSM_CURSOR_REPLICAS && (lane & (T - 1)) == tile)
        cursor_blk[(h * RSSM_CURSOR_REPLICAS + lane) * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
      // Warp 0 prepares the next unit's weights while the other warps finish this one (its parity buffers
      // were last read in unit u - 1, which every warp left before this unit's barrier).
      if (warp == 0 && u + 1 < U) {
        cp_async_wait_group<1>();
        __syncwarp();
        window_weights(u + 1, stage + 1 < S ? stage + 1 : 0);
      }
    }
    stage = stage + 1 < S ? stage + 1 : 0;
  }
}

template <typename StateT, typename ActT, int N, bool REPLAY>
static cudaError_t launch_mode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const Shape shape = launch_shape(p.head_dim, Tl::RW, p.nheads, p.ngroups, p.batch, sms);
  const SmemPlan sp = smem_plan(REPLAY ? p.buffer_len : 0, N, shape.rows, sizeof(StateT), sizeof(ActT), shape.stages);
  auto kernel = decode_kernel<StateT, ActT, N, REPLAY>;
  if (sp.bytes > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sp.bytes);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.ngroups * shape.chunks, p.batch);
  kernel<<<grid, shape.warps * 32, sp.bytes, stream>>>(p, shape, sp);
  return cudaGetLastError();
}

// Host launch for one (state dtype, activation dtype, dstate) specialisation; params already validated.
template <typename StateT, typename ActT, int N>
cudaError_t launch_decode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if (p.mode == RSSM_MAMBA2_REPLAY) return launch_mode<StateT, ActT, N, true>(p, stream);
  return launch_mode<StateT, ActT, N, false>(p, stream);
}

}  // namespace mamba2
}  // namespace replayssm
