// Gated DeltaNet single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of corrected updates; trtllm_replayssm/ops/gdn/replay_reference.py is the specification).
// Framework-free; instantiated per dtype in plugins/capi/.
//
// Work split (common/decode_tiling.cuh): one block per (batch row, key head, chunk of consecutive (value head,
// tile) units); a state row is one of the V rows of K elements of a value head's state. A block stages the key
// head's ring of k records once and computes their products with the current k and q once; its units stream
// through the same 3-stage cp.async pipeline as the Mamba-2 kernel (each thread copies and reads back its own
// vectors of the checkpoint tile); warp 0 computes the next unit's decay weights ahead.
//
// ReplaySSM, per row, with h records in the ring since the checkpoint S0 and the current token as record h
// (record j at ring position (origin + j) mod L; g_h = the current g):
//   D_j = sum_{i=j+1..h} g_i ,  E = sum_{i<=h} g_i ,  w_j = e^{D_j}
//   S'k = e^E (S0 k) + sum_{j<h} w_j (k_j·k) u_j ,  S'q likewise with q    (S' = the state the token sees)
//   non-flush (h < L-1): u = beta (v - S'k);  y = S'q + u (k·q);  append (u, k, g) at ring position h
//   flush     (h = L-1): S' = e^E S0 + sum_{j<h} (w_j u_j) k_jᵀ;  u = beta (v - S'k);  S = S' + u kᵀ;
//                        y = S q;  store S;  history := 0
// The conventional step is the flush route with h = 0 and no ring, performing the same operations in the same
// order: at L = 1 the replay step equals it bit for bit.
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/gdn/params.h"

namespace replayssm {
namespace gdn {

// Dynamic shared memory of one block, byte offsets (all 16-byte aligned): the key head's ring of k records,
// then `stages` stages of per-unit inputs.
struct SmemPlan {
  int ring_k;
  int stage0, stage_bytes;
  int state, ring_u, ring_g, v, cursor;  // offsets inside a stage
  int bytes;
};

inline SmemPlan smem_plan(int L, int K, int rows, int state_bytes, int act_bytes, int stages) {
  SmemPlan s{};
  int off = 0;
  auto take = [&](int bytes) {
    const int at = off;
    off += round_up(bytes, 16);
    return at;
  };
  s.ring_k = take(L * K * act_bytes);
  s.stage0 = off;
  off = 0;
  s.state = take(rows * K * state_bytes);
  s.ring_u = take(L * rows * act_bytes);
  s.ring_g = take(round_up(L, 4) * 4);
  s.v = take(rows * act_bytes);
  s.cursor = take(L > 0 ? RSSM_CURSOR_FIELDS * 4 : 0);
  s.stage_bytes = off;
  s.bytes = s.stage0 + stages * s.stage_bytes;
  return s;
}

template <typename StateT, typename ActT, int K, bool REPLAY>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    decode_kernel(const __grid_constant__ rssm_gdn_decode_params p, const Shape shape, const SmemPlan sp) {
  using Tl = Tiling<StateT, K>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  constexpr int kMaxChunkHeads = kMaxUnits;

  extern __shared__ __align__(16) char smem[];
  __shared__ float s_g[kMaxChunkHeads], s_beta[kMaxChunkHeads];  // the chunk's value heads
  __shared__ float s_kk[kMaxBufferLen], s_kq[kMaxBufferLen];     // k_pos·k, k_pos·q of each ring position
  __shared__ float s_kq_cur;                                     // k·q of the current token
  __shared__ float s_w[2][kMaxBufferLen];                        // w_j of a unit's window (by unit parity)
  __shared__ float s_ck[2][kMaxBufferLen], s_cq[2][kMaxBufferLen];  // w_j (k_j·k), w_j (k_j·q)
  __shared__ float s_abar[2];                                    // e^E
  __shared__ float s_urow[kMaxWarps][16];                        // flush: u of each row of a warp

  const int HV = p.num_v_heads, V = p.head_v_dim, L = REPLAY ? p.buffer_len : 1, T = shape.tiles, TR = shape.rows;
  const int U = shape.units, S = shape.stages, TL = shape.tiles_log2;
  const int b = blockIdx.y, kh = blockIdx.x / shape.chunks, chunk = blockIdx.x - kh * shape.chunks;
  const int hpg = HV / p.num_k_heads;            // value heads per key head
  const int unit0 = chunk * U;                   // first unit of this block within the key head
  const int head0 = kh * hpg + (unit0 >> TL);    // first value head of this block
  const int tile_base = unit0 & (T - 1);          // unit u is (head0 + h, tile): h = (tile_base + u) >> TL,
                                                  // tile = (tile_base + u) & (T - 1)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int seg = lane / LPR, col_lane = lane % LPR;
  const int ldg = round_up(L, 4);  // ring_g row length

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  // Per-block bases (64-bit once); per-unit offsets from them are 32-bit (validate() bounds a slot's bytes).
  const int64_t sh0 = static_cast<int64_t>(slot) * HV + head0;
  StateT* const state_blk = static_cast<StateT*>(p.state) + sh0 * V * K;
  const ActT* const v_blk = static_cast<const ActT*>(p.v) + b * p.v_batch_stride + head0 * p.v_head_stride;
  ActT* const y_blk = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;
  ActT* const ring_u_blk = REPLAY ? static_cast<ActT*>(p.ring_u) + sh0 * L * V : nullptr;
  float* const ring_g_blk = REPLAY ? p.ring_g + sh0 * ldg : nullptr;
  int32_t* const cursor_blk = REPLAY ? p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS : nullptr;
  const int vhs = static_cast<int>(p.v_head_stride), yhs = static_cast<int>(p.y_head_stride);

  auto stage_ptr = [&](int stage) { return smem + sp.stage0 + stage * sp.stage_bytes; };
  // This thread's first vector inside a tile of TR x K; vector (i, c) sits vec_step(i, c) further.
  const int thread_off = (warp * RW + seg) * K + col_lane * VEC;
  auto vec_step = [](int i, int c) { return i * RPI * K + c * LPR * VEC; };
  const int v_warp = nwarps > 1 ? 1 : 0;                      // copies v (warp 0 copies cursor and ring g)
  const int v_chunks = TR * static_cast<int>(sizeof(ActT)) / 8;  // 8-byte pieces of a tile row of v

  // Queues every copy of unit u into `stage` (asynchronous): this thread's own vectors of the checkpoint tile;
  // the tile rows of v; (replay) the cursor replica and the head's ring of g (warp 0, which computes the decay
  // weights from them) and the ring's u records of the tile rows (the whole ring: no copy waits for the cursor).
  auto issue_unit = [&](int u, int stage) {
    const int uu = tile_base + u, h = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    char* st = stage_ptr(stage);
    const StateT* gs = state_blk + (uu * TR * K + thread_off);
    StateT* ss = reinterpret_cast<StateT*>(st + sp.state) + thread_off;
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int c = 0; c < NV; ++c) cp_async<16>(ss + vec_step(i, c), gs + vec_step(i, c));
    if (warp == v_warp)
      for (int c = lane; c < v_chunks; c += 32)
        cp_async<8>(st + sp.v + c * 8, reinterpret_cast<const char*>(v_blk + h * vhs + row0) + c * 8);
    if (REPLAY) {
      if (warp == 0) {
        if (lane == 0) cp_async<8>(st + sp.cursor, cursor_blk + (h * RSSM_CURSOR_REPLICAS + tile) * RSSM_CURSOR_FIELDS);
        if (lane < ldg / 4) cp_async<16>(st + sp.ring_g + lane * 16, ring_g_blk + h * ldg + lane * 4);
      }
      const char* rug = reinterpret_cast<const char*>(ring_u_blk + h * L * V + row0);
      if (T == 1) {  // the head's whole ring of u records is one contiguous block
        const int n16 = L * V * static_cast<int>(sizeof(ActT)) / 16;
        for (int i = threadIdx.x; i < n16; i += blockDim.x) cp_async<16>(st + sp.ring_u + i * 16, rug + i * 16);
      } else {
        for (int pos = warp; pos < L; pos += nwarps)
          for (int c = lane; c < v_chunks; c += 32)
            cp_async<8>(st + sp.ring_u + (pos * v_chunks + c) * 8, rug + pos * V * static_cast<int>(sizeof(ActT)) + c * 8);
      }
    }
  };

  // Cursor of a unit from its stage, clamped so that a corrupted cursor never indexes outside the ring.
  auto read_cursor = [&](const char* st, int& hist, int& origin) {
    const int2 cur = *reinterpret_cast<const int2*>(st + sp.cursor);
    hist = min(max(cur.x, 0), L - 1);
    origin = cur.y;
    if (origin < 0 || origin >= L) origin = ((origin % L) + L) % L;
  };

  // Decay weights of unit u's window (warp 0; replay) into the unit's parity buffers: w_j = e^{D_j},
  // w_j (k_j·k), w_j (k_j·q) for the ring records j < h, and e^E. Reads only what warp 0 copied (cursor, ring
  // g) and block-wide values published earlier.
  auto window_weights = [&](int u, int stage) {
    const char* st = stage_ptr(stage);
    int hist, origin;
    read_cursor(st, hist, origin);
    const int h = (tile_base + u) >> TL, par = u & 1;
    const float g = s_g[h];
    const float* rg_s = reinterpret_cast<const float*>(st + sp.ring_g);
    auto window_g = [&](int j) -> float {
      if (j > hist) return 0.f;
      return j == hist ? g : rg_s[ring_pos(origin, j, L)];
    };
    auto put = [&](int j, float ex) {
      const bool ring = j < hist;
      const float w = ring ? expf(ex) : 0.f;
      const int pos = ring ? ring_pos(origin, j, L) : 0;
      s_w[par][j] = w;
      s_ck[par][j] = ring ? w * s_kk[pos] : 0.f;
      s_cq[par][j] = ring ? w * s_kq[pos] : 0.f;
    };
    float total;
    if (L <= 32) {
      float ex0;
      warp_suffix_sums(window_g(lane), ex0, total);
      put(lane, ex0);
    } else {
      float ex0, ex1;
      warp_suffix_sums(window_g(lane), window_g(lane + 32), ex0, ex1, total);
      put(lane, ex0);
      put(lane + 32, ex1);
    }
    if (lane == 0) s_abar[par] = expf(total);
  };

  // ---- Prologue: the key head's ring of k records and units 0 and 1 in flight; the chunk's per-head scalars;
  // this lane's columns of the current k and q.
  if (REPLAY) {
    const int64_t sk = static_cast<int64_t>(slot) * p.num_k_heads + kh;
    const char* rkg = reinterpret_cast<const char*>(static_cast<const ActT*>(p.ring_k) + sk * L * K);
    const int nk = L * K * static_cast<int>(sizeof(ActT)) / 16;
    for (int i = threadIdx.x; i < nk; i += blockDim.x) cp_async<16>(smem + sp.ring_k + i * 16, rkg + i * 16);
  }
  issue_unit(0, 0);
  cp_async_commit();
  if (U > 1) issue_unit(1, 1);
  cp_async_commit();
  const ActT* kg = static_cast<const ActT*>(p.k) + b * p.k_batch_stride + kh * p.k_head_stride;
  const ActT* qg = static_cast<const ActT*>(p.q) + b * p.q_batch_stride + kh * p.q_head_stride;
  float Kc[NV][VEC], Qc[NV][VEC];
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    load_vec<ActT, VEC>(kg + (c * LPR + col_lane) * VEC, Kc[c]);
    load_vec<ActT, VEC>(qg + (c * LPR + col_lane) * VEC, Qc[c]);
  }
  const int chunk_heads = ((tile_base + U - 1) >> TL) + 1;
  if (threadIdx.x < chunk_heads) {
    s_g[threadIdx.x] = p.g[b * p.g_batch_stride + head0 + threadIdx.x];
    s_beta[threadIdx.x] = p.beta[b * p.beta_batch_stride + head0 + threadIdx.x];
  }

  const ActT* rk_s = reinterpret_cast<const ActT*>(smem + sp.ring_k);
  auto lane_dot = [&](const float (&s)[NV][VEC], const float (&x)[NV][VEC]) {
    float acc = 0.f;
#pragma unroll
    for (int c = 0; c < NV; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc = fmaf(s[c][e], x[c][e], acc);
    return acc;
  };
  const int my_row = warp * RW + scattered_instr<KI, LPR>(lane) * RPI + seg;  // tile row this lane finishes
  const int q = lane % SHARE;
  const bool key_first_block = (unit0 >> TL) == 0;  // writes the key head's ring of k records

  int stage = 0;
  for (int u = 0; u < U; ++u) {
    cp_async_wait_group<1>();  // unit u (and, at u = 0, the ring of k) has landed for this thread's copies
    __syncthreads();           // ... and for everyone's; the stage of unit u + 2 was last read in unit u - 1
    if (u + 2 < U) issue_unit(u + 2, stage + 2 < S ? stage + 2 : stage + 2 - S);
    cp_async_commit();

    if (u == 0) {
      // Once per block: k_pos·k and k_pos·q for every ring position (replay) and k·q of the current token
      // (position L); segment seg of warp w takes positions w * RPI + seg, + nseg, ... (warp-uniform loop).
      const int nseg = nwarps * RPI;
      for (int j0 = warp * RPI; j0 <= (REPLAY ? L : 0); j0 += nseg) {
        const int j = j0 + seg;
        float dk = 0.f, dq = 0.f;
        if (REPLAY && j < L) {
#pragma unroll
          for (int c = 0; c < NV; ++c) {
            float kj[VEC];
            load_vec<ActT, VEC>(rk_s + j * K + (c * LPR + col_lane) * VEC, kj);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              dk = fmaf(kj[e], Kc[c][e], dk);
              dq = fmaf(kj[e], Qc[c][e], dq);
            }
          }
        } else if (j == (REPLAY ? L : 0)) {
#pragma unroll
          for (int c = 0; c < NV; ++c)
#pragma unroll
            for (int e = 0; e < VEC; ++e) dq = fmaf(Kc[c][e], Qc[c][e], dq);
        }
        dk = group_sum<LPR>(dk);
        dq = group_sum<LPR>(dq);
        if (col_lane == 0 && REPLAY && j < L) {
          s_kk[j] = dk;
          s_kq[j] = dq;
        }
        if (col_lane == 0 && j == (REPLAY ? L : 0)) s_kq_cur = dq;
      }
      __syncthreads();
      if (REPLAY) {
        if (warp == 0) window_weights(0, 0);
        __syncthreads();
      }
    }

    const int uu = tile_base + u, h = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    const char* st = stage_ptr(stage);
    const StateT* ss = reinterpret_cast<const StateT*>(st + sp.state);
    const ActT* ru_s = reinterpret_cast<const ActT*>(st + sp.ring_u);
    const ActT* v_s = reinterpret_cast<const ActT*>(st + sp.v);
    const int par = u & 1;
    const float g = s_g[h], beta = s_beta[h];

    int hist = 0, origin = 0;
    if (REPLAY) read_cursor(st, hist, origin);
    const bool flush = !REPLAY || hist == L - 1;
    // The replay weights at h = 0 are e^E = e^g and no ring terms: the conventional step uses them directly.
    const float abar = REPLAY ? s_abar[par] : expf(g);

    float partk[KI], partq[KI];
    float yv, uv;
    if (flush) {
      // S' = e^E S0 + sum_{j<h} (w_j u_j) k_jᵀ; u = beta (v - S'k); S = S' + u kᵀ; y = S q; store S.
      float s[KI][NV][VEC];
#pragma unroll
      for (int i = 0; i < KI; ++i)
#pragma unroll
        for (int c = 0; c < NV; ++c) {
          load_vec<StateT, VEC>(ss + thread_off + vec_step(i, c), s[i][c]);
#pragma unroll
          for (int e = 0; e < VEC; ++e) s[i][c][e] *= abar;
        }
      for (int j = 0; j < hist; ++j) {
        const int pos = ring_pos(origin, j, L);
        const ActT* uj = ru_s + pos * TR + warp * RW + seg;
        float uvals[KI];
        if (RPI == 1) {
          load_vec<ActT, KI>(uj, uvals);  // the thread's rows are consecutive
        } else {
#pragma unroll
          for (int i = 0; i < KI; ++i) uvals[i] = to_float(uj[i * RPI]);
        }
        float kj[NV][VEC];
#pragma unroll
        for (int c = 0; c < NV; ++c) load_vec<ActT, VEC>(rk_s + pos * K + (c * LPR + col_lane) * VEC, kj[c]);
        const float wj = s_w[par][j];
#pragma unroll
        for (int i = 0; i < KI; ++i) {
          const float cu = wj * uvals[i];
#pragma unroll
          for (int c = 0; c < NV; ++c)
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(cu, kj[c][e], s[i][c][e]);
        }
      }
#pragma unroll
      for (int i = 0; i < KI; ++i) partk[i] = lane_dot(s[i], Kc);
      const float sk = group_sum<SHARE>(reduce_scatter<KI, LPR>(partk));
      uv = beta * (to_float(v_s[my_row]) - sk);
      // Every lane of a row needs its u: through shared memory, within the warp.
      if (q == 0) s_urow[warp][my_row - warp * RW] = uv;
      __syncwarp();
      StateT* gstate = state_blk + (uu * TR * K + thread_off);
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        const float ui = s_urow[warp][i * RPI + seg];
#pragma unroll
        for (int c = 0; c < NV; ++c)
#pragma unroll
          for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(ui, Kc[c][e], s[i][c][e]);
        partq[i] = lane_dot(s[i], Qc);
#pragma unroll
        for (int c = 0; c < NV; ++c) store_stream(gstate + vec_step(i, c), pack<StateT, VEC>(s[i][c]));  // WRITES state
      }
      __syncwarp();  // s_urow is rewritten by the next unit
      yv = group_sum<SHARE>(reduce_scatter<KI, LPR>(partq));
    } else {
      // S'k, S'q = e^E (S0 k, S0 q) + sum_{j<h} w_j (k_j·k, k_j·q) u_j; u = beta (v - S'k); y = S'q + u (k·q).
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        float s[NV][VEC];
#pragma unroll
        for (int c = 0; c < NV; ++c) load_vec<StateT, VEC>(ss + thread_off + vec_step(i, c), s[c]);
        partk[i] = lane_dot(s, Kc);
        partq[i] = lane_dot(s, Qc);
      }
      float sk = abar * reduce_scatter<KI, LPR>(partk);
      float sq = abar * reduce_scatter<KI, LPR>(partq);
      for (int j = q; j < hist; j += SHARE) {
        const float uj = to_float(ru_s[ring_pos(origin, j, L) * TR + my_row]);
        sk = fmaf(s_ck[par][j], uj, sk);
        sq = fmaf(s_cq[par][j], uj, sq);
      }
      sk = group_sum<SHARE>(sk);
      sq = group_sum<SHARE>(sq);
      uv = beta * (to_float(v_s[my_row]) - sk);
      yv = fmaf(uv, s_kq_cur, sq);
    }

    // ---- Epilogue: y, and (replay) the ring record and the cursor.
    const int pos_new = REPLAY ? ring_pos(origin, hist, L) : 0;
    if (q == 0) {
      y_blk[h * yhs + row0 + my_row] = from_float<ActT>(yv);  // WRITES y[b, head, row]
      // WRITES ring_u[slot, head, pos_new, row]
      if (REPLAY && !flush) ring_u_blk[(h * L + pos_new) * V + row0 + my_row] = from_float<ActT>(uv);
    }
    if (REPLAY) {
      if (!flush) {
        // WRITES ring_g of (slot, head) and, from the key head's first unit, ring_k of (slot, key head).
        if (threadIdx.x == 0) ring_g_blk[h * ldg + pos_new] = g;
        if (key_first_block && uu == 0 && warp == 0 && seg == 0) {
          ActT* rk = static_cast<ActT*>(p.ring_k) + ((static_cast<int64_t>(slot) * p.num_k_heads + kh) * L + pos_new) * K;
#pragma unroll
          for (int c = 0; c < NV; ++c) store_vec<ActT, VEC>(rk + (c * LPR + col_lane) * VEC, Kc[c]);
        }
      }
      // WRITES the cursor replicas this unit owns: tile, tile + T, ... (one lane each).
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

template <typename StateT, typename ActT, int K, bool REPLAY>
static cudaError_t launch_mode(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, K>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const Shape shape = launch_shape(p.head_v_dim, Tl::RW, p.num_v_heads, p.num_k_heads, p.batch, sms);
  const SmemPlan sp = smem_plan(REPLAY ? p.buffer_len : 0, K, shape.rows, sizeof(StateT), sizeof(ActT), shape.stages);
  auto kernel = decode_kernel<StateT, ActT, K, REPLAY>;
  if (sp.bytes > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sp.bytes);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.num_k_heads * shape.chunks, p.batch);
  kernel<<<grid, shape.warps * 32, sp.bytes, stream>>>(p, shape, sp);
  return cudaGetLastError();
}

// Host launch for one (state dtype, activation dtype, head_k_dim) specialisation; params already validated.
template <typename StateT, typename ActT, int K>
cudaError_t launch_decode(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if (p.mode == RSSM_GDN_REPLAY) return launch_mode<StateT, ActT, K, true>(p, stream);
  return launch_mode<StateT, ActT, K, false>(p, stream);
}

}  // namespace gdn
}  // namespace replayssm
