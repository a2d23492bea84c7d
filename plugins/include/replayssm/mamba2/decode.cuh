// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; docs/mamba2.md has the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes (common/decode_tiling.cuh): one block per (batch row, group, chunk of consecutive
// (head, tile) units). In a prologue, a block copies the group's ring of B records and the small inputs of all
// its units (ring x and dt records, one cursor replica per head, x, z), computes B_j·C once, and one warp per
// head computes that head's window weights. The units' checkpoint tiles then stream through a 3-stage cp.async
// pipeline (while a unit is computed, the next two are in flight); each thread copies its own vectors of a tile
// and reads back exactly those, so the unit loop has no block barrier.
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

// Dynamic shared memory of one block, byte offsets (all 16-byte aligned). Everything a block needs besides the
// checkpoint tiles is copied once, in the prologue: the group's ring of B records, the ring x records, current
// x and z of the chunk's units, the ring dt and one cursor replica of the chunk's heads. The checkpoint tiles
// stream through `stages` stages, one unit each; a thread reads back only the vectors it copied, so the unit
// loop needs no block barrier.
struct SmemPlan {
  int ring_B;                          // [L][N]: the group's ring of B records
  int ring_x;                          // [units][L][rows]: the chunk units' ring x records
  int x, z;                            // [units][rows]: the current token's x and z at the units' rows
  int ring_dt;                         // [heads][round_up(L, 4)] fp32: the chunk heads' rings of dt
  int cursor;                          // [heads][RSSM_CURSOR_FIELDS] int32: one cursor replica per chunk head
  int w;                               // [heads][L] fp32: w_j of each chunk head's window, by record j
  int coef;                            // [heads][L] fp32: w_j (B_j·C) by ring position (0 outside the window)
  int stage0, stage_bytes;             // the checkpoint tile of a unit: stage k at stage0 + k * stage_bytes
  int bytes;
};

inline SmemPlan smem_plan(int L, int N, int rows, int units, int heads, int state_bytes, int act_bytes,
                          int stages) {
  SmemPlan s{};
  int off = 0;
  auto take = [&](int bytes) {
    const int at = off;
    off += round_up(bytes, 16);
    return at;
  };
  s.ring_B = take(L * N * act_bytes);
  s.ring_x = take(units * L * rows * act_bytes);
  s.x = take(units * rows * act_bytes);
  s.z = take(units * rows * act_bytes);
  s.ring_dt = take(heads * round_up(L, 4) * 4);
  s.cursor = take(L > 0 ? heads * RSSM_CURSOR_FIELDS * 4 : 0);
  s.w = take(heads * L * 4);
  s.coef = take(heads * L * 4);
  s.stage0 = off;
  s.stage_bytes = round_up(rows * N * state_bytes, 16);
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
  __shared__ float s_abar[kMaxChunkHeads];
  __shared__ int s_hist[kMaxChunkHeads], s_origin[kMaxChunkHeads];  // cursor of each chunk head
  __shared__ float s_bcpos[kMaxBufferLen];    // B·C of the ring record at each position
  __shared__ float s_bccur;                   // B·C of the current token

  const int H = p.nheads, P = p.head_dim, L = REPLAY ? p.buffer_len : 1, T = shape.tiles, TR = shape.rows;
  const int U = shape.units, S = shape.stages, TL = shape.tiles_log2;
  const int b = blockIdx.y, group = blockIdx.x / shape.chunks, chunk = blockIdx.x - group * shape.chunks;
  const int hpg = H / p.ngroups;
  const int unit0 = chunk * U;                   // first unit of this block within the group
  const int head0 = group * hpg + (unit0 >> TL);  // first head of this block
  const int tile_base = unit0 & (T - 1);          // its tile; unit u is (head0 + h, tile) with
                                                  // h = (tile_base + u) >> TL, tile = (tile_base + u) & (T - 1)
  const int heads = ((tile_base + U - 1) >> TL) + 1;  // heads of the chunk
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
  const int x_chunks = TR * static_cast<int>(sizeof(ActT)) / 8;  // 8-byte pieces of a tile row of x

  // Offset, in elements, of this thread's first vector inside a tile of TR x N; vector (i, v) sits
  // vec_step(i, v) further (a compile-time constant: one base register plus immediate offsets).
  const int thread_off = (warp * RW + seg) * N + col_lane * VEC;
  auto vec_step = [](int i, int v) { return i * RPI * N + v * LPR * VEC; };
  auto stage_state = [&](int stage) { return reinterpret_cast<StateT*>(smem + sp.stage0 + stage * sp.stage_bytes); };
  // Queues this thread's own vectors of unit u's checkpoint tile into `stage` (it reads back exactly these).
  auto issue_state = [&](int u, int stage) {
    const StateT* gs = state_blk + ((tile_base + u) * TR * N + thread_off);
    StateT* ss = stage_state(stage) + thread_off;
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) cp_async<16>(ss + vec_step(i, v), gs + vec_step(i, v));
  };

  // ---- Prologue, group 0: the block's small inputs. Unit u's rows of x, z and of every ring x record; the
  // chunk heads' rings of dt and one cursor replica each (that of the head's first unit in the chunk, which
  // this block owns); the group's ring of B records. The whole ring is copied, so that no copy waits for a
  // cursor.
  for (int u = warp; u < U; u += nwarps) {
    const int uu = tile_base + u, xoff = (uu >> TL) * xhs + (uu & (T - 1)) * TR;
    const int zoff = (uu >> TL) * zhs + (uu & (T - 1)) * TR;
    for (int c = lane; c < x_chunks; c += 32) {
      cp_async<8>(smem + sp.x + (u * x_chunks + c) * 8, reinterpret_cast<const char*>(x_blk + xoff) + c * 8);
      if (z_blk) cp_async<8>(smem + sp.z + (u * x_chunks + c) * 8, reinterpret_cast<const char*>(z_blk + zoff) + c * 8);
    }
  }
  if (REPLAY) {
    const int64_t sg = static_cast<int64_t>(slot) * p.ngroups + group;
    const char* rBg = reinterpret_cast<const char*>(static_cast<const ActT*>(p.ring_B) + sg * L * N);
    const int nB = L * N * static_cast<int>(sizeof(ActT)) / 16;
    for (int i = threadIdx.x; i < nB; i += blockDim.x) cp_async<16>(smem + sp.ring_B + i * 16, rBg + i * 16);
    if (T == 1) {  // the chunk's heads' rings of x records are one contiguous block
      const int n16 = U * L * P * static_cast<int>(sizeof(ActT)) / 16;
      const char* rxg = reinterpret_cast<const char*>(ring_x_blk);
      for (int i = threadIdx.x; i < n16; i += blockDim.x) cp_async<16>(smem + sp.ring_x + i * 16, rxg + i * 16);
    } else {
      for (int u = 0; u < U; ++u) {
        const int uu = tile_base + u;
        for (int pos = warp; pos < L; pos += nwarps) {
          const char* src = reinterpret_cast<const char*>(ring_x_blk + ((uu >> TL) * L + pos) * P + (uu & (T - 1)) * TR);
          for (int c = lane; c < x_chunks; c += 32)
            cp_async<8>(smem + sp.ring_x + ((u * L + pos) * x_chunks + c) * 8, src + c * 8);
        }
      }
    }
    const int ndt = heads * ldt / 4;  // the chunk heads' dt rows are consecutive
    for (int i = threadIdx.x; i < ndt; i += blockDim.x) cp_async<16>(smem + sp.ring_dt + i * 16, ring_dt_blk + i * 4);
    if (threadIdx.x < heads) {
      const int hh = threadIdx.x, u_first = max((hh << TL) - tile_base, 0);
      const int tile = (tile_base + u_first) & (T - 1);
      cp_async<8>(smem + sp.cursor + hh * RSSM_CURSOR_FIELDS * 4,
                  cursor_blk + (hh * RSSM_CURSOR_REPLICAS + tile) * RSSM_CURSOR_FIELDS);
    }
  }
  cp_async_commit();
  // Groups 1 and 2: the checkpoint tiles of units 0 and 1.
  issue_state(0, 0);
  cp_async_commit();
  if (U > 1) issue_state(1, 1);
  cp_async_commit();

  const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  float Bc[NV][VEC], Cc[NV][VEC];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    load_vec<ActT, VEC>(Bg + (v * LPR + col_lane) * VEC, Bc[v]);
    load_vec<ActT, VEC>(Cg + (v * LPR + col_lane) * VEC, Cc[v]);
  }
  if (threadIdx.x < heads) {
    const int head = head0 + threadIdx.x;
    float dt = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + head * p.dt_head_stride]);
    dt += p.dt_bias ? p.dt_bias[head] : 0.f;
    dt = p.dt_softplus ? softplus_thresholded(dt) : dt;
    s_dt[threadIdx.x] = dt;
    s_A[threadIdx.x] = p.A[head];
    s_D[threadIdx.x] = p.D ? p.D[head] : 0.f;
    if (!REPLAY) s_abar[threadIdx.x] = expf(p.A[head] * dt);  // the t = 1 weights: abar = exp(A dt), w_0 = dt
  }
  cp_async_wait_group<2>();  // group 0 has landed for this thread's copies
  __syncthreads();           // ... and for everyone's

  const ActT* rB_s = reinterpret_cast<const ActT*>(smem + sp.ring_B);
  float* const w_s = reinterpret_cast<float*>(smem + sp.w);
  float* const coef_s = reinterpret_cast<float*>(smem + sp.coef);
  if (REPLAY) {
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
    // Decay weights of each chunk head's window, one warp per head: w_j, w_j (B_j·C) (by ring position, zero
    // for positions outside the window, so that the output-only route sums over the whole ring without
    // branches), abar; and the current token's x goes into its ring slot of the head's units (a copy in shared
    // memory only). The cursor is clamped so that a corrupted one never indexes outside the ring.
    for (int hh = warp; hh < heads; hh += nwarps) {
      const int2 cur = *reinterpret_cast<const int2*>(smem + sp.cursor + hh * RSSM_CURSOR_FIELDS * 4);
      const int hist = min(max(cur.x, 0), L - 1);
      const int origin = (cur.y < 0 || cur.y >= L) ? ((cur.y % L) + L) % L : cur.y;
      const float A = s_A[hh], dt = s_dt[hh];
      const float* rdt_s = reinterpret_cast<const float*>(smem + sp.ring_dt) + hh * ldt;
      auto window_dt = [&](int j) -> float {
        if (j > hist) return 0.f;
        return j == hist ? dt : rdt_s[ring_pos(origin, j, L)];
      };
      auto window_bc = [&](int j) -> float {
        if (j > hist) return 0.f;
        return j == hist ? s_bccur : s_bcpos[ring_pos(origin, j, L)];
      };
      float ex0, ex1 = 0.f, total;
      const float dt0 = window_dt(lane), dt1 = L > 32 ? window_dt(lane + 32) : 0.f;
      if (L <= 32)
        warp_suffix_sums(dt0, ex0, total);
      else
        warp_suffix_sums(dt0, dt1, ex0, ex1, total);
      const float w0 = dt0 * expf(A * ex0);
      if (lane < L) {
        w_s[hh * L + lane] = w0;
        coef_s[hh * L + ring_pos(origin, lane, L)] = w0 * window_bc(lane);
      }
      if (lane + 32 < L) {
        const float w1 = dt1 * expf(A * ex1);
        w_s[hh * L + lane + 32] = w1;
        coef_s[hh * L + ring_pos(origin, lane + 32, L)] = w1 * window_bc(lane + 32);
      }
      if (lane == 0) {
        s_abar[hh] = expf(A * total);
        s_hist[hh] = hist;
        s_origin[hh] = origin;
      }
      const int pos_cur = ring_pos(origin, hist, L);
      for (int u = max((hh << TL) - tile_base, 0); u < U && ((tile_base + u) >> TL) == hh; ++u) {
        ActT* rx = reinterpret_cast<ActT*>(smem + sp.ring_x) + (u * L + pos_cur) * TR;
        const ActT* xs = reinterpret_cast<const ActT*>(smem + sp.x) + u * TR;
        for (int r = lane; r < TR; r += 32) rx[r] = xs[r];
      }
    }
    __syncthreads();
  }

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

  // ---- The units, without block barriers: each thread waits only for its own copies.
  int stage = 0;  // stage of unit u
  for (int u = 0; u < U; ++u) {
    cp_async_wait_group<1>();  // this thread's vectors of unit u have landed
    // The stage of unit u + 2 was last read, by this thread only, in unit u - 1.
    if (u + 2 < U) issue_state(u + 2, stage + 2 < S ? stage + 2 : stage + 2 - S);
    cp_async_commit();

    const int uu = tile_base + u, hh = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    const StateT* ss = stage_state(stage);
    const ActT* rx_s = reinterpret_cast<const ActT*>(smem + sp.ring_x) + u * L * TR;
    const ActT* x_s = reinterpret_cast<const ActT*>(smem + sp.x) + u * TR;
    const ActT* z_s = reinterpret_cast<const ActT*>(smem + sp.z) + u * TR;
    const float dt = s_dt[hh];
    const int hist = REPLAY ? s_hist[hh] : 0, origin = REPLAY ? s_origin[hh] : 0;
    const bool flush = !REPLAY || hist == L - 1;
    const int t = hist + 1;
    const float abar = s_abar[hh];

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
        // registers, ring records from shared memory), its weight.
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
        const float wj = REPLAY ? w_s[hh * L + j] : dt;
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
      // The window, as a sum over every ring position (the current token's x sits in its slot).
      const float* coef = coef_s + hh * L;
      for (int pos = q; pos < L; pos += SHARE) yv = fmaf(coef[pos], to_float(rx_s[pos * TR + my_row]), yv);
    }
    yv = group_sum<SHARE>(yv);

    // ---- Epilogue: y, and (replay) the ring record and the cursor.
    const int pos_new = REPLAY ? ring_pos(origin, hist, L) : 0;
    if (q == 0) {
      const float xv = to_float(x_s[my_row]);
      float out = fmaf(s_D[hh], xv, yv);
      if (z_blk) out *= silu_gate(to_float(z_s[my_row]));
      y_blk[hh * yhs + row0 + my_row] = from_float<ActT>(out);  // WRITES y[b, head, row]
      // WRITES ring_x[slot, head, pos_new, row] (an exact copy of x)
      if (REPLAY && !flush) ring_x_blk[(hh * L + pos_new) * P + row0 + my_row] = x_s[my_row];
    }
    if (REPLAY) {
      if (!flush) {
        // WRITES ring_dt of (slot, head) and, from the group's first unit, ring_B of (slot, group).
        if (threadIdx.x == 0 && tile == 0) ring_dt_blk[hh * ldt + pos_new] = dt;
        if (group_first_block && uu == 0 && warp == 0 && seg == 0) {
          ActT* rB = static_cast<ActT*>(p.ring_B) + ((static_cast<int64_t>(slot) * p.ngroups + group) * L + pos_new) * N;
#pragma unroll
          for (int v = 0; v < NV; ++v) store_vec<ActT, VEC>(rB + (v * LPR + col_lane) * VEC, Bc[v]);
        }
      }
      // WRITES the cursor replicas this unit owns: tile, tile + T, ... (no other unit of this launch reads or
      // writes them), one lane each.
      if (warp == 0 && lane < RSSM_CURSOR_REPLICAS && (lane & (T - 1)) == tile)
        cursor_blk[(hh * RSSM_CURSOR_REPLICAS + lane) * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
    }
    stage = stage + 1 < S ? stage + 1 : 0;
  }
}

template <typename StateT, typename ActT, int N, bool REPLAY>
static cudaError_t launch_mode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  int sms = 0;
  const cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const int L = REPLAY ? p.buffer_len : 0;
  const auto kernel = decode_kernel<StateT, ActT, N, REPLAY>;
  static const int overhead = block_smem_overhead(kernel);
  return launch_unit_pipeline(
      kernel, overhead, p, launch_shape(p.head_dim, Tl::RW, p.nheads, p.ngroups, p.batch, sms),
      p.ngroups,
      [&](const Shape& s) {
        return smem_plan(L, N, s.rows, s.units, std::max(1, s.units >> s.tiles_log2), sizeof(StateT),
                         sizeof(ActT), s.stages);
      },
      stream);
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
