// Gated DeltaNet single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of corrected updates; trtllm_replayssm/ops/gdn/replay_reference.py is the specification).
// Framework-free; instantiated per dtype in plugins/capi/.
//
// Work split (common/decode_tiling.cuh): one block per (batch row, key head, chunk of consecutive (value head,
// tile) units); a state row is one of the V rows of K elements of a value head's state. A block stages the key
// head's ring of k records once and computes their products with the current k and q once; its units stream
// through the same 3-stage cp.async pipeline as the Mamba-2 kernel: the small inputs of all units (ring u
// records, v, ring g, cursors) land once in the prologue, where one warp per value head computes its window's
// decay weights; each thread copies and reads back its own vectors of the checkpoint tiles, so the unit loop
// has no block barrier.
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
//
// KDA (template flag KDA; g has one value per key channel, the same code otherwise): D_j and E are vectors of
// length K and the decay scales state columns, S' = S0 diag(e^E) + sum_{j<h} u_j (k_j ⊙ e^{D_j})ᵀ. The
// output-only route reads the checkpoint at e^E ⊙ k and e^E ⊙ q, and its ring terms use the per-pair products
// (k_j ⊙ e^{D_j})·k and ·q, computed once per (row, value head) in the prologue; the flush scales each state
// column by e^E and rebuilds the ring terms column by column.
//
// Read copies (CopyT = __half, __nv_bfloat16 or __nv_fp8_e4m3; void: none; GDN replay only, KDA refused by
// validation). The copy has the checkpoint's layout [slots, HV, V, K] and thread mapping, Tiling<StateT, K>
// (common/read_copy.cuh): a thread's copy vectors are its checkpoint vectors narrowed. Only the output read uses
// it: y needs S0 q, which a non-flush row reads from the copy, while S0 k feeds the correction u = beta (v - S'k),
// which enters the ring and, at the next flush, the checkpoint; S0 k therefore reads the checkpoint, and the
// checkpoint, ring and cursors evolve bit for bit as without a copy (replay_reference.py specifies the same).
//   - A stage holds the unit's checkpoint tile and, after it, its copy tile; each thread copies its own vectors
//     of both (the copy's with 8- or 4-byte cp.async). The copy tile of a flushing unit is read for nothing
//     (1/L of the steps).
//   - Non-flush: S0 k from the checkpoint vectors, S0 q from the copy vectors widened to fp32 in registers. fp8:
//     S0 q = scale_row * sum_c code_c q_c (the row scale factored out of the dot product, applied after the
//     reduce-scatter; the block's row scales are staged once in the prologue).
//   - Flush: the checkpoint is stored as without a copy and the copy is quantised from the same fp32 registers,
//     row group by row group (store_read_copy_row: fp16 / bf16 nearest even; fp8 the row's amax across the LPR
//     lanes holding it, scale = max(amax * (1/448), FLT_MIN), code = e4m3_satfinite(v / scale), as
//     quant.quantize_fp8_rows).
// Because the non-flush row reads the checkpoint AND the copy, a copy adds read traffic instead of saving it:
// it exists for the format's sake (a y read through a narrow copy), not for bandwidth.
//
// Optional in-kernel preparation (params.h options): q, k L2-normalised and q scaled where the block loads
// them, then rounded to the activation dtype (the op's reference rounds the prepared q, k there too, and the
// ring stores k in that dtype); raw gates turned into g, beta per head (KDA: per channel) in fp32.
#pragma once
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/common/read_copy.cuh"
#include "replayssm/gdn/conventional.cuh"
#include "replayssm/gdn/gates.cuh"
#include "replayssm/gdn/output_only.cuh"
#include "replayssm/gdn/params.h"

namespace replayssm {
namespace gdn {

// Dynamic shared memory of one block, byte offsets (all 16-byte aligned): what the block needs besides the
// checkpoint tiles, copied once, then `stages` stages of one checkpoint tile (and its read copy's tile) each.
struct SmemPlan {
  int ring_k;        // [L][K]: the key head's ring of k records
  int ring_u;        // [units][L][rows]: the chunk units' ring u records
  int v;             // [units][rows]: the current v at the units' rows
  int ring_g;        // [heads][round_up(L, 4)] fp32 (KDA: [heads][L][K]): the chunk heads' rings of g
  int cursor;        // [heads][RSSM_CURSOR_FIELDS] int32: one cursor replica per chunk head
  int w, ck, cq;     // [heads][L] fp32 by record j: w_j, w_j (k_j·k), w_j (k_j·q) (KDA: -, (k_j ⊙ e^{D_j})·k, ·q)
  int cx;            // [warps][kFlushChunk][rows per warp] fp32: a flushing warp's w_j u_j (scalar decay)
  int g_cur, decay;  // KDA: [heads][K] fp32 each: the current g and e^E per channel
  int kq_cur;        // KDA: [2][K] fp32: the current (prepared) k and q
  int read_scale;    // fp8 read copy: [units][rows] fp32, the row scales of the units' copy rows (else empty)
  int stage0, stage_bytes;
  int stage_copy;    // read copy: offset of the copy tile within a stage (after the checkpoint tile)
  int bytes;
};

// The flush's records per chunk: a flushing warp forms w_j u_j at its rows for this many records at a time.
constexpr int kFlushChunk = 8;

// copy_bytes: bytes per element of the read copy (0: none); unit_scales: fp32 scales per unit of the copy (fp8:
// rows, else 0).
inline SmemPlan smem_plan(int L, int K, int rows, int units, int heads, int state_bytes, int act_bytes, int stages,
                          bool kda, int copy_bytes = 0, int unit_scales = 0) {
  SmemPlan s{};
  SmemBump bump;  // consecutive 16-byte-aligned regions
  s.ring_k = bump.take(L * K * act_bytes);
  s.ring_u = bump.take(units * L * rows * act_bytes);
  s.v = bump.take(units * rows * act_bytes);
  s.ring_g = bump.take(kda ? heads * L * K * 4 : heads * round_up(L, 4) * 4);
  s.cursor = bump.take(L > 0 ? heads * RSSM_CURSOR_FIELDS * 4 : 0);
  s.w = bump.take(heads * L * 4);
  s.ck = bump.take(heads * L * 4);
  s.cq = bump.take(heads * L * 4);
  s.cx = bump.take(kda ? 0 : rows * kFlushChunk * 4);  // the unit's rows are the warps' rows
  s.g_cur = bump.take(kda ? heads * K * 4 : 0);
  s.decay = bump.take(kda ? heads * K * 4 : 0);
  s.kq_cur = bump.take(kda ? 2 * K * 4 : 0);
  s.read_scale = bump.take(units * unit_scales * 4);
  s.stage0 = bump.off;
  s.stage_copy = round_up(rows * K * state_bytes, 16);
  s.stage_bytes = s.stage_copy + round_up(rows * K * copy_bytes, 16);
  s.bytes = s.stage0 + stages * s.stage_bytes;
  return s;
}

template <typename StateT, typename ActT, int K, bool REPLAY, bool KDA, typename CopyT>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    decode_kernel(const __grid_constant__ rssm_gdn_decode_params p, const Shape shape, const SmemPlan sp) {
  using Tl = Tiling<StateT, K>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  constexpr int kMaxChunkHeads = kMaxUnits;
  constexpr bool kCopy = !std::is_void_v<CopyT>;                    // a read copy (GDN replay only)
  constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;  // ... with a scale per state row
  using CT = std::conditional_t<kCopy, CopyT, StateT>;              // the copy's element type (StateT: unused)
  constexpr int kCopyVecBytes = VEC * static_cast<int>(sizeof(CT));  // one vector of the copy
  static_assert(!kCopy || (REPLAY && !KDA), "read copies exist for GDN in replay mode only");
  static_assert(!kCopy || sizeof(CT) < sizeof(StateT), "a read copy is narrower than the checkpoint");

  extern __shared__ __align__(16) char smem[];
  __shared__ float s_g[kMaxChunkHeads], s_beta[kMaxChunkHeads];  // the chunk's value heads
  __shared__ float s_abar[kMaxChunkHeads];                       // e^E of each chunk head
  __shared__ int s_hist[kMaxChunkHeads], s_origin[kMaxChunkHeads];  // cursor of each chunk head
  __shared__ float s_kk[kMaxBufferLen], s_kq[kMaxBufferLen];     // k_pos·k, k_pos·q of each ring position
  __shared__ float s_kq_cur;                                     // k·q of the current token
  __shared__ float s_urow[kMaxWarps][16];                        // flush: u of each row of a warp

  const int HV = p.num_v_heads, V = p.head_v_dim, L = REPLAY ? p.buffer_len : 1, T = shape.tiles, TR = shape.rows;
  const int U = shape.units, S = shape.stages, TL = shape.tiles_log2;
  const int b = blockIdx.y, kh = blockIdx.x / shape.chunks, chunk = blockIdx.x - kh * shape.chunks;
  const int hpg = HV / p.num_k_heads;            // value heads per key head
  const int unit0 = chunk * U;                   // first unit of this block within the key head
  const int head0 = kh * hpg + (unit0 >> TL);    // first value head of this block
  const int tile_base = unit0 & (T - 1);          // unit u is (head0 + h, tile): h = (tile_base + u) >> TL,
                                                  // tile = (tile_base + u) & (T - 1)
  const int heads = ((tile_base + U - 1) >> TL) + 1;  // value heads of the chunk
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int seg = lane / LPR, col_lane = lane % LPR;
  const int ldg = round_up(L, 4);  // ring_g row length

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  // Per-block bases (64-bit once); per-unit offsets from them are 32-bit (validate() bounds a slot's elements).
  const int64_t sh0 = static_cast<int64_t>(slot) * HV + head0;
  StateT* const state_blk = static_cast<StateT*>(p.state) + sh0 * V * K;
  // The read copy (same layout and offsets as state_blk) and, fp8, its row scales (unit u's rows at (tile_base + u) TR).
  CT* const read_blk = kCopy ? static_cast<CT*>(p.read_state) + sh0 * V * K : nullptr;
  float* const read_scale_blk = kRowScale ? p.read_scale + sh0 * V : nullptr;
  const ActT* const v_blk = static_cast<const ActT*>(p.v) + b * p.v_batch_stride + head0 * p.v_head_stride;
  ActT* const y_blk = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;
  ActT* const ring_u_blk = REPLAY ? static_cast<ActT*>(p.ring_u) + sh0 * L * V : nullptr;
  float* const ring_g_blk = REPLAY ? p.ring_g + sh0 * (KDA ? L * K : ldg) : nullptr;
  int32_t* const cursor_blk = REPLAY ? p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS : nullptr;
  const int vhs = static_cast<int>(p.v_head_stride), yhs = static_cast<int>(p.y_head_stride);

  // This thread's first vector inside a tile of TR x K; vector (i, c) sits vec_step(i, c) further.
  const int thread_off = (warp * RW + seg) * K + col_lane * VEC;
  auto vec_step = [](int i, int c) { return i * RPI * K + c * LPR * VEC; };
  const int v_chunks = TR * static_cast<int>(sizeof(ActT)) / 8;  // 8-byte pieces of a tile row of v
  auto stage_state = [&](int stage) { return reinterpret_cast<StateT*>(smem + sp.stage0 + stage * sp.stage_bytes); };
  auto stage_copy = [&](int stage) {
    return reinterpret_cast<CT*>(smem + sp.stage0 + stage * sp.stage_bytes + sp.stage_copy);
  };
  // Queues this thread's own vectors of unit u's checkpoint tile (and copy tile) into `stage` (it reads back
  // exactly these).
  auto issue_state = [&](int u, int stage) {
    const int e0 = (tile_base + u) * TR * K + thread_off;
    const StateT* gs = state_blk + e0;
    StateT* ss = stage_state(stage) + thread_off;
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int c = 0; c < NV; ++c) cp_async<16>(ss + vec_step(i, c), gs + vec_step(i, c));
    if constexpr (kCopy) {
      const CT* gc = read_blk + e0;
      CT* sc = stage_copy(stage) + thread_off;
#pragma unroll
      for (int i = 0; i < KI; ++i)
#pragma unroll
        for (int c = 0; c < NV; ++c) cp_async<kCopyVecBytes>(sc + vec_step(i, c), gc + vec_step(i, c));
    }
  };

  // ---- Prologue, group 0: the units' rows of v and of every ring u record, the chunk heads' rings of g and
  // one cursor replica each (that of the head's first unit in the chunk, which this block owns), the key head's
  // ring of k records (and, fp8 read copy, the units' row scales). The whole ring is copied, so that no copy
  // waits for a cursor.
  if constexpr (kRowScale) {  // the units' row scales are consecutive
    const float* src = read_scale_blk + tile_base * TR;
    float* dst = reinterpret_cast<float*>(smem + sp.read_scale);
    for (int i = threadIdx.x; i < U * TR; i += blockDim.x) cp_async<4>(dst + i, src + i);
  }
  for (int u = warp; u < U; u += nwarps) {
    const int uu = tile_base + u, off = (uu >> TL) * vhs + (uu & (T - 1)) * TR;
    for (int c = lane; c < v_chunks; c += 32)
      cp_async<8>(smem + sp.v + (u * v_chunks + c) * 8, reinterpret_cast<const char*>(v_blk + off) + c * 8);
  }
  if (REPLAY) {
    const int64_t sk = static_cast<int64_t>(slot) * p.num_k_heads + kh;
    const char* rkg = reinterpret_cast<const char*>(static_cast<const ActT*>(p.ring_k) + sk * L * K);
    const int nk = L * K * static_cast<int>(sizeof(ActT)) / 16;
    for (int i = threadIdx.x; i < nk; i += blockDim.x) cp_async<16>(smem + sp.ring_k + i * 16, rkg + i * 16);
    if (T == 1) {  // the chunk's heads' rings of u records are one contiguous block
      const int n16 = U * L * V * static_cast<int>(sizeof(ActT)) / 16;
      const char* rug = reinterpret_cast<const char*>(ring_u_blk);
      for (int i = threadIdx.x; i < n16; i += blockDim.x) cp_async<16>(smem + sp.ring_u + i * 16, rug + i * 16);
    } else {
      for (int u = 0; u < U; ++u) {
        const int uu = tile_base + u;
        for (int pos = warp; pos < L; pos += nwarps) {
          const char* src = reinterpret_cast<const char*>(ring_u_blk + ((uu >> TL) * L + pos) * V + (uu & (T - 1)) * TR);
          for (int c = lane; c < v_chunks; c += 32)
            cp_async<8>(smem + sp.ring_u + ((u * L + pos) * v_chunks + c) * 8, src + c * 8);
        }
      }
    }
    const int ng = heads * (KDA ? L * K : ldg) / 4;  // the chunk heads' g rows are consecutive
    for (int i = threadIdx.x; i < ng; i += blockDim.x) cp_async<16>(smem + sp.ring_g + i * 16, ring_g_blk + i * 4);
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
  float Kc[NV][VEC], Qc[NV][VEC];
  load_qk<ActT, NV, VEC, LPR>(p, b, kh, col_lane, Kc, Qc);
  // In-kernel preparation of q and k (gates.cuh; output_only.cuh calls it with this kernel's fp32 K = 128 tiling
  // to get the same bits).
  prepare_qk<ActT, NV, VEC, LPR>(p, Kc, Qc);
  float* const g_cur_s = reinterpret_cast<float*>(smem + sp.g_cur);  // KDA only
  float* const decay_s = reinterpret_cast<float*>(smem + sp.decay);  // KDA only
  float* const kq_cur_s = reinterpret_cast<float*>(smem + sp.kq_cur);  // KDA only: [0, K) k, [K, 2K) q
  if (threadIdx.x < heads) {
    const int hv = head0 + threadIdx.x;
    if (!KDA) {  // the gates' loads both go out before their arithmetic (gates.cuh load_head_gates)
      const HeadGateInputs in = load_head_gates(p, b, hv);
      issue_loads_here();
      float g, beta;
      head_gates(p, in, g, beta);
      s_beta[threadIdx.x] = beta;
      s_g[threadIdx.x] = g;
      if (!REPLAY) s_abar[threadIdx.x] = expf(g);  // the weights at h = 0: e^E = e^g, no ring terms
    } else {
      s_beta[threadIdx.x] = gate_beta(p, b, hv);
    }
  }
  if (KDA) {
    for (int i = threadIdx.x; i < heads * K; i += blockDim.x) {
      const int hh = i / K, c = i - hh * K;
      const float g = gate_g<true>(p, b, head0 + hh, c);
      g_cur_s[i] = g;
      if (!REPLAY) decay_s[i] = expf(g);  // e^E = e^g at h = 0
    }
    if (warp == 0 && seg == 0) {
#pragma unroll
      for (int c = 0; c < NV; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          kq_cur_s[(c * LPR + col_lane) * VEC + e] = Kc[c][e];
          kq_cur_s[K + (c * LPR + col_lane) * VEC + e] = Qc[c][e];
        }
    }
  }
  cp_async_wait_group<2>();  // group 0 has landed for this thread's copies
  __syncthreads();           // ... and for everyone's

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

  // Once per block: k_pos·k and k_pos·q for every ring position (replay, GDN) and k·q of the current token
  // (position L); segment seg of warp w takes positions w * RPI + seg, + nseg, ... (warp-uniform loop).
  // KDA weighs each channel of these products by its own decay: they are per value head (below).
  constexpr bool RING_DOTS = REPLAY && !KDA;
  {
    const int nseg = nwarps * RPI;
    for (int j0 = warp * RPI; j0 <= (RING_DOTS ? L : 0); j0 += nseg) {
      const int j = j0 + seg;
      float dk = 0.f, dq = 0.f;
      if (RING_DOTS && j < L) {
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
      } else if (j == (RING_DOTS ? L : 0)) {
#pragma unroll
        for (int c = 0; c < NV; ++c)
#pragma unroll
          for (int e = 0; e < VEC; ++e) dq = fmaf(Kc[c][e], Qc[c][e], dq);
      }
      dk = group_sum<LPR>(dk);
      dq = group_sum<LPR>(dq);
      if (col_lane == 0 && RING_DOTS && j < L) {
        s_kk[j] = dk;
        s_kq[j] = dq;
      }
      if (col_lane == 0 && j == (RING_DOTS ? L : 0)) s_kq_cur = dq;
    }
    __syncthreads();
  }
  float* const w_s = reinterpret_cast<float*>(smem + sp.w);
  float* const ck_s = reinterpret_cast<float*>(smem + sp.ck);
  float* const cq_s = reinterpret_cast<float*>(smem + sp.cq);
  if (REPLAY && KDA) {
    // Per-pair products of each chunk head's window, one warp per head, lane l holding channels l, l + 32, ...:
    // D_j = D_{j+1} + g_{j+1} from the newest record back (the current g is g_h), (k_j ⊙ e^{D_j})·k and ·q for
    // the records j < h, then e^E with E = D_0 + g_0. Cursor clamped as below.
    constexpr int CPL = K / 32;
    for (int hh = warp; hh < heads; hh += nwarps) {
      const int2 cur = *reinterpret_cast<const int2*>(smem + sp.cursor + hh * RSSM_CURSOR_FIELDS * 4);
      const int hist = min(max(cur.x, 0), L - 1);
      const int origin = (cur.y < 0 || cur.y >= L) ? ((cur.y % L) + L) % L : cur.y;
      const float* rg_s = reinterpret_cast<const float*>(smem + sp.ring_g) + hh * L * K;
      const float* gc_s = g_cur_s + hh * K;
      float D[CPL], kc[CPL], qc[CPL];
#pragma unroll
      for (int e = 0; e < CPL; ++e) {
        D[e] = 0.f;
        kc[e] = kq_cur_s[lane + 32 * e];
        qc[e] = kq_cur_s[K + lane + 32 * e];
      }
      for (int j = hist - 1; j >= 0; --j) {
        const float* gn = j + 1 == hist ? gc_s : rg_s + ring_pos(origin, j + 1, L) * K;
        const ActT* kj = rk_s + ring_pos(origin, j, L) * K;
        float dk = 0.f, dq = 0.f;
#pragma unroll
        for (int e = 0; e < CPL; ++e) {
          D[e] += gn[lane + 32 * e];
          const float kd = to_float(kj[lane + 32 * e]) * expf(D[e]);
          dk = fmaf(kd, kc[e], dk);
          dq = fmaf(kd, qc[e], dq);
        }
        dk = group_sum<32>(dk);
        dq = group_sum<32>(dq);
        if (lane == 0) {
          ck_s[hh * L + j] = dk;
          cq_s[hh * L + j] = dq;
        }
      }
      const float* g0 = hist == 0 ? gc_s : rg_s + ring_pos(origin, 0, L) * K;
#pragma unroll
      for (int e = 0; e < CPL; ++e) decay_s[hh * K + lane + 32 * e] = expf(D[e] + g0[lane + 32 * e]);
      if (lane == 0) {
        s_hist[hh] = hist;
        s_origin[hh] = origin;
      }
    }
    __syncthreads();
  } else if (REPLAY) {
    // Decay weights of each chunk head's window, one warp per head: w_j = e^{D_j}, w_j (k_j·k), w_j (k_j·q)
    // for the ring records j < h, and e^E. The cursor is clamped so that a corrupted one never indexes outside
    // the ring.
    for (int hh = warp; hh < heads; hh += nwarps) {
      const int2 cur = *reinterpret_cast<const int2*>(smem + sp.cursor + hh * RSSM_CURSOR_FIELDS * 4);
      const int hist = min(max(cur.x, 0), L - 1);
      const int origin = (cur.y < 0 || cur.y >= L) ? ((cur.y % L) + L) % L : cur.y;
      const float g = s_g[hh];
      const float* rg_s = reinterpret_cast<const float*>(smem + sp.ring_g) + hh * ldg;
      auto window_g = [&](int j) -> float {
        if (j > hist) return 0.f;
        return j == hist ? g : rg_s[ring_pos(origin, j, L)];
      };
      auto put = [&](int j, float ex) {
        store_window_weights(j, ex, hist, origin, L, s_kk, s_kq, w_s + hh * L, ck_s + hh * L, cq_s + hh * L);
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
      if (lane == 0) {
        s_abar[hh] = expf(total);
        s_hist[hh] = hist;
        s_origin[hh] = origin;
      }
    }
    __syncthreads();
  }

  // ---- The units, without block barriers: each thread waits only for its own copies.
  int stage = 0;
  for (int u = 0; u < U; ++u) {
    cp_async_wait_group<1>();  // this thread's vectors of unit u have landed
    // The stage of unit u + 2 was last read, by this thread only, in unit u - 1.
    if (u + 2 < U) issue_state(u + 2, stage + 2 < S ? stage + 2 : stage + 2 - S);
    cp_async_commit();

    const int uu = tile_base + u, h = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    const StateT* ss = stage_state(stage);
    const CT* cs = stage_copy(stage);  // read copy only
    const ActT* ru_s = reinterpret_cast<const ActT*>(smem + sp.ring_u) + u * L * TR;
    const ActT* v_s = reinterpret_cast<const ActT*>(smem + sp.v) + u * TR;
    const float g = KDA ? 0.f : s_g[h], beta = s_beta[h];
    const int hist = REPLAY ? s_hist[h] : 0, origin = REPLAY ? s_origin[h] : 0;
    const bool flush = !REPLAY || hist == L - 1;
    const float abar = KDA ? 1.f : s_abar[h];
    float decay[NV][VEC];  // KDA: e^E at this thread's channels
    if (KDA) {
#pragma unroll
      for (int c = 0; c < NV; ++c) load_vec<float, VEC>(decay_s + h * K + (c * LPR + col_lane) * VEC, decay[c]);
    }

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
          for (int e = 0; e < VEC; ++e) s[i][c][e] *= KDA ? decay[c][e] : abar;
        }
      if (KDA) {
        // Ring terms u_j (k_j ⊙ e^{D_j})ᵀ from the newest record back, D_j = D_{j+1} + g_{j+1} per channel (the
        // order of reference.replay_row's suffix sums; the terms are summed in the opposite order).
        const float* rg_s = reinterpret_cast<const float*>(smem + sp.ring_g) + h * L * K;
        float D[NV][VEC] = {};
        for (int j = hist - 1; j >= 0; --j) {
          const int pos = ring_pos(origin, j, L);
          const float* gn = j + 1 == hist ? g_cur_s + h * K : rg_s + ring_pos(origin, j + 1, L) * K;
          const ActT* uj = ru_s + pos * TR + warp * RW + seg;
          float uvals[KI];
          if (RPI == 1) {
            load_vec<ActT, KI>(uj, uvals);
          } else {
#pragma unroll
            for (int i = 0; i < KI; ++i) uvals[i] = to_float(uj[i * RPI]);
          }
          float kd[NV][VEC];
#pragma unroll
          for (int c = 0; c < NV; ++c) {
            float gj[VEC];
            load_vec<float, VEC>(gn + (c * LPR + col_lane) * VEC, gj);
            load_vec<ActT, VEC>(rk_s + pos * K + (c * LPR + col_lane) * VEC, kd[c]);
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              D[c][e] += gj[e];
              kd[c][e] *= expf(D[c][e]);
            }
          }
#pragma unroll
          for (int i = 0; i < KI; ++i)
#pragma unroll
            for (int c = 0; c < NV; ++c)
#pragma unroll
              for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(uvals[i], kd[c][e], s[i][c][e]);
        }
      }
      // Records j < h in chunks of kFlushChunk: the warp first forms w_j u_j at its RW rows for the chunk's records
      // ([record][row] in its slice of cx), each value once per warp instead of once per lane, then every record's
      // products read them back; k_j comes from the ring position, advanced with j. The same fp32 operations in the
      // same order (w_j u, then one FMA per record): the same bits.
      float* const cx_w = reinterpret_cast<float*>(smem + sp.cx) + warp * (kFlushChunk * RW);  // this warp's slice
      for (int j0 = 0; j0 < (KDA ? 0 : hist); j0 += kFlushChunk) {
        const int pos0 = ring_pos(origin, j0, L);  // j0 < h < L
        __syncwarp();  // the previous chunk's (or unit's) products are read
        for (int e = lane; e < kFlushChunk * RW; e += 32) {
          const int jj = e / RW, r = e - jj * RW, j = j0 + jj;
          cx_w[e] = j < hist ? w_s[h * L + j] * to_float(ru_s[ring_pos(pos0, jj, L) * TR + warp * RW + r]) : 0.f;
        }
        __syncwarp();
        int pos = pos0;
        for (int jj = 0; jj < kFlushChunk && j0 + jj < hist; ++jj) {
          float kj[NV][VEC];
#pragma unroll
          for (int c = 0; c < NV; ++c) load_vec<ActT, VEC>(rk_s + pos * K + (c * LPR + col_lane) * VEC, kj[c]);
          float cu[KI];
          if (RPI == 1) {
            load_vec<float, KI>(cx_w + jj * RW, cu);  // the thread's rows are the warp's (seg 0)
          } else {
#pragma unroll
            for (int i = 0; i < KI; ++i) cu[i] = cx_w[jj * RW + seg + i * RPI];
          }
#pragma unroll
          for (int i = 0; i < KI; ++i)
#pragma unroll
            for (int c = 0; c < NV; ++c)
#pragma unroll
              for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(cu[i], kj[c][e], s[i][c][e]);
          pos = pos + 1 == L ? 0 : pos + 1;
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
        // WRITES read_state (and fp8 read_scale) of the same rows, from the same fp32 values
        if constexpr (kCopy)
          store_read_copy_row<CopyT, Tl>(s[i], read_blk + (uu * TR * K + thread_off + i * RPI * K),
                                         kRowScale ? read_scale_blk + uu * TR + warp * RW + seg + i * RPI : nullptr,
                                         col_lane);
      }
      __syncwarp();  // s_urow is rewritten by the next unit
      yv = group_sum<SHARE>(reduce_scatter<KI, LPR>(partq));
    } else {
      // S'k, S'q = e^E (S0 k, S0 q) + sum_{j<h} w_j (k_j·k, k_j·q) u_j; u = beta (v - S'k); y = S'q + u (k·q).
      // KDA: S0 (e^E ⊙ k), S0 (e^E ⊙ q), and the ring weights are the per-pair products. With a read copy, S0 q
      // reads the copy (fp8: its codes, the row scale applied after the reduce-scatter).
      float Ke[NV][VEC], Qe[NV][VEC];
#pragma unroll
      for (int c = 0; c < NV; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          Ke[c][e] = KDA ? decay[c][e] * Kc[c][e] : Kc[c][e];
          Qe[c][e] = KDA ? decay[c][e] * Qc[c][e] : Qc[c][e];
        }
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        float s[NV][VEC];
#pragma unroll
        for (int c = 0; c < NV; ++c) load_vec<StateT, VEC>(ss + thread_off + vec_step(i, c), s[c]);
        partk[i] = lane_dot(s, Ke);
        if constexpr (kCopy) {
#pragma unroll
          for (int c = 0; c < NV; ++c) load_vec<CT, VEC>(cs + thread_off + vec_step(i, c), s[c]);
        }
        partq[i] = lane_dot(s, Qe);
      }
      // S'k: the lane's share of ring terms as an FMA chain from 0 (records j = q mod SHARE, increasing j), then
      // e^E times the reduce-scattered dot in one FMA (output_only.cuh sums the chain in its prologue, the same bits).
      const float dot_k = reduce_scatter<KI, LPR>(partk);
      float sk = 0.f;
      float sq = KDA ? reduce_scatter<KI, LPR>(partq) : abar * reduce_scatter<KI, LPR>(partq);
      if constexpr (kRowScale) sq *= reinterpret_cast<const float*>(smem + sp.read_scale)[u * TR + my_row];
      for (int j = q; j < hist; j += SHARE) {
        const float uj = to_float(ru_s[ring_pos(origin, j, L) * TR + my_row]);
        sk = fmaf(ck_s[h * L + j], uj, sk);
        sq = fmaf(cq_s[h * L + j], uj, sq);
      }
      sk = group_sum<SHARE>(KDA ? dot_k + sk : fmaf(abar, dot_k, sk));
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
        if (KDA) {
          if (tile == 0)
            for (int c = threadIdx.x; c < K; c += blockDim.x) ring_g_blk[(h * L + pos_new) * K + c] = g_cur_s[h * K + c];
        } else if (threadIdx.x == 0 && tile == 0) {
          ring_g_blk[h * ldg + pos_new] = g;
        }
        if (key_first_block && uu == 0 && warp == 0 && seg == 0) {
          ActT* rk = static_cast<ActT*>(p.ring_k) + ((static_cast<int64_t>(slot) * p.num_k_heads + kh) * L + pos_new) * K;
#pragma unroll
          for (int c = 0; c < NV; ++c) store_vec<ActT, VEC>(rk + (c * LPR + col_lane) * VEC, Kc[c]);
        }
      }
      // WRITES the cursor replicas this unit owns: tile, tile + T, ... (one lane each).
      if (warp == 0 && lane < RSSM_CURSOR_REPLICAS && (lane & (T - 1)) == tile)
        cursor_blk[(h * RSSM_CURSOR_REPLICAS + lane) * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
    }
    stage = stage + 1 < S ? stage + 1 : 0;
  }
}

// Bytes per element of a read copy (void: none).
template <typename CopyT>
constexpr int copy_elem_bytes() {
  if constexpr (std::is_void_v<CopyT>) {
    return 0;
  } else {
    return static_cast<int>(sizeof(CopyT));
  }
}

template <typename StateT, typename ActT, int K, bool REPLAY, bool KDA, typename CopyT = void>
static cudaError_t launch_mode(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, K>;
  int sms = 0;
  const cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const int L = REPLAY ? p.buffer_len : 0;
  constexpr int kCopyBytes = copy_elem_bytes<CopyT>();
  constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;
  auto plan = [&](const Shape& s) {
    return smem_plan(L, K, s.rows, s.units, std::max(1, s.units >> s.tiles_log2), sizeof(StateT), sizeof(ActT),
                     s.stages, KDA, kCopyBytes, kRowScale ? s.rows : 0);
  };
  const auto kernel = decode_kernel<StateT, ActT, K, REPLAY, KDA, CopyT>;
  static const int overhead = block_smem_overhead(kernel);
  return launch_unit_pipeline(
      kernel, overhead, p,
      launch_shape(p.head_v_dim, Tl::RW, p.num_v_heads, p.num_k_heads, p.batch, sms), p.num_k_heads,
      plan,
      stream);
}

// Whether the replay step takes output_only.cuh's mapping (the "split" route: one launch, flushing rows rebuilt
// in it), and with how many value heads per block (0: the combined kernel). It exists for an fp32 checkpoint,
// bf16 / fp16 activations, K = 128 and scalar decay; output_only::heads_per_block() gives the most heads a block
// can take (and 0 for the shapes it does not take). The policy was Mamba-2's fp32 one until its
// (mamba2/decode.cuh output_only_heads, measured there on the H200:; on for GDN since its route
// was timed): a flushing block takes about twice a reading block, so blocks of at most 8 heads,
// taken when the launch has at least kOutputOnlyBlocksPerSm of them per multiprocessor; smaller launches keep the
// combined kernel, whose flush units are finer. Mamba-2's route starts at 6 blocks per multiprocessor. GDN's lost
// below b256  (Qwen3.5-122B L16, forced split against the combined kernel: b64 108.7 vs
// 95.5 us, b128 191.3 vs 178.9; docs/gdn.md, design alternatives measured); with 8 lanes per state row (the
// current mapping) it wins at b128 (165.1 vs 178.8) and b64 (93.2 vs 95.7; A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200), so it
// starts at 6 too (b32, 3.9 blocks per multiprocessor at the 122B shape, keeps the combined kernel). RSSM_ROUTES
// (read by both families' launches) and RSSM_OO_HEADS force either route or the heads per block
// (common/decode_tiling.cuh, split_route_heads). The choice is made before anything is launched.
template <typename StateT, typename ActT, int K>
constexpr bool kSplitRoute = std::is_same_v<StateT, float> && sizeof(ActT) == 2 && K == output_only::kK;
constexpr int kOutputOnlyBlockHeads = 8;     // most heads per block
constexpr int kOutputOnlyBlocksPerSm = 6;    // fewest blocks per multiprocessor for the split route
// Batches of a warp's rows asked of L2 ahead of its register loads (output_only_kernel's `ahead`): none since the
//. H200, Qwen3.5-122B L16 amortised, RSSM_OO_PREFETCH 0 against 1 in one run, two passes: b256
// 327.7 / 326.7 vs 331.2 / 331.0 us, b512 630.3 / 632.6 vs 635.4 / 635.3 (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200). In an earlier
// version, before the output-only prologue's rework, 1 won (0 / 1 / 2 / 3 at b256: 369.8 / 355.6 / 359.7 / 370.2 us;
//).
constexpr int kOutputOnlyPrefetch = 0;
constexpr bool kOutputOnlyByDefault = true;   // split route at >= kOutputOnlyBlocksPerSm blocks per SM
// The tail launch (output_only::launch): a launch of fewer than kOutputOnlyTailBelowBlocksPerSm blocks per
// multiprocessor sends its last rows to a second launch in blocks of half the heads (from kOutputOnlyTailMinHeads:
// at least 2), about kOutputOnlyTailRounds rounds of the multiprocessors' resident blocks of it, which fill the first
// launch's tail (when that is at most half the batch).
// H200, Qwen3.5-122B L16 b64 (1024 blocks of 4 heads; tail blocks of 2), tail rows 0 / 8 / 16 / 32 in one run, two
// passes: 94.1 / 94.3, 91.8 / 91.5, 90.1 / 90.3, 92.2 / 92.7 us (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200). At b256 (31 blocks
// per multiprocessor) 32 and 64 tail rows lose (318.9, 322.6 against 318.7). RSSM_OO_TAIL_ROWS overrides.
constexpr int kOutputOnlyTailMinHeads = 4;  // fewest heads per block of a launch given a tail (tail blocks: half)
constexpr int kOutputOnlyTailBelowBlocksPerSm = 16;
constexpr int kOutputOnlyTailRounds = 2;
inline int output_only_tail(const rssm_gdn_decode_params& p, int hpb, int sms) {
  return tail_rows_by_policy(p.batch, p.num_v_heads, hpb, p.head_v_dim, output_only::kRowQuantum, sms,
                             {kOutputOnlyTailMinHeads, kOutputOnlyTailBelowBlocksPerSm, kOutputOnlyTailRounds,
                              output_only::kBlocksPerSm});
}
inline int output_only_heads(const rssm_gdn_decode_params& p, int hpb, int sms) {
  return split_route_heads(hpb, p.head_v_dim, output_only::kRowQuantum, p.batch, p.num_v_heads, sms,
                           {kOutputOnlyBlockHeads, kOutputOnlyBlocksPerSm, kOutputOnlyByDefault});
}

// Host launch for one (state dtype, activation dtype, head_k_dim, read copy) specialisation; params already
// validated. CopyT void: no read copy, every mode; otherwise GDN replay only (validation refuses the rest).
template <typename StateT, typename ActT, int K, typename CopyT>
cudaError_t launch_decode(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if constexpr (!std::is_void_v<CopyT>) {
    return launch_mode<StateT, ActT, K, true, false, CopyT>(p, stream);
  } else {
    if (p.per_channel_decay) {
      if (p.mode == RSSM_GDN_REPLAY) return launch_mode<StateT, ActT, K, true, true>(p, stream);
      return launch_mode<StateT, ActT, K, false, true>(p, stream);
    }
    if (p.mode == RSSM_GDN_REPLAY) {
      // The latency route (params.h latency_route_bytes): a step small enough to be latency-bound flushes every
      // row in the conventional kernel's mapping (validation checked the dtype, the copy, the decay and the shape).
      if constexpr (std::is_same_v<StateT, float>)
        if (p.latency_route_bytes > 0 && latency_route_fits(p.head_v_dim, K) &&
            static_cast<int64_t>(p.batch) * p.num_v_heads * p.head_v_dim * K * 4 <= p.latency_route_bytes)
          return launch_latency_route<StateT, ActT, K>(p, stream);
      if constexpr (kSplitRoute<StateT, ActT, K>) {
        int smem_per_sm = 0, sms = 0;
        cudaError_t err = device_smem_per_sm(smem_per_sm);
        if (err == cudaSuccess) err = device_sms(sms);
        if (err != cudaSuccess) return err;
        const int hpb = output_only_heads(p, output_only::heads_per_block<ActT>(p, smem_per_sm), sms);
        if (hpb > 0) return output_only::launch<ActT>(p, hpb, output_only_prefetch_batches(kOutputOnlyPrefetch),
                                                      output_only_tail(p, hpb, sms), stream);
      }
      return launch_mode<StateT, ActT, K, true, false>(p, stream);
    }
    // The conventional step on prepared inputs: one warp per tile of state rows (gdn/conventional.cuh),
    // bit-identical to launch_mode<..., false, false>; with in-kernel q/k preparation or raw gates, the
    // pipelined kernel, which implements them.
    if (p.qk_flags == 0 && p.gate_mode == RSSM_GDN_GATES_PRECOMPUTED)
      return launch_conventional_step<StateT, ActT, K>(p, stream);
    return launch_mode<StateT, ActT, K, false, false>(p, stream);
  }
}

}  // namespace gdn
}  // namespace replayssm
