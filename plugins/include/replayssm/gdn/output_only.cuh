// Gated DeltaNet ReplaySSM: the replay step's rows in a read mapping of their own, as mamba2/output_only.cuh
// does for Mamba-2 (its header and give the reasons and the measurements). Scalar decay only (KDA
// keeps the combined kernel), fp32 checkpoint, bf16 / fp16 activations, K = 128, V a multiple of 16, L 2..32;
// decode.cuh's launch_decode decides per step whether this kernel or the combined one runs (never both).
//
// The maths is decode.cuh's (header): per row, with h records since the checkpoint S0, w_j = e^{D_j}, e^E,
//   non-flush (h < L-1): S'k = e^E (S0 k) + sum_{j<h} w_j (k_j·k) u_j ;  u = beta (v - S'k) ;
//                        y = e^E (S0 q) + sum_{j<h} w_j (k_j·q) u_j + u (k·q) ;  append (u, k, g)
//   flush (h = L-1):     S' = e^E S0 + sum_{j<h} (w_j u_j) k_jᵀ ;  u = beta (v - S'k) ;  S = S' + u kᵀ ;
//                        y = S q ;  store S ;  history := 0
// Mapping: one block per (batch row, key head, chunk of `hpb` value heads of that key head), 8 warps; a state row
// (one of a value head's V rows of K fp32) is read by 8 lanes (4 before), lane (h, c) holding
// the 16 columns 16 m + 4 c + e of the vectors m = h, 4 + h, 2 + h, 6 + h (e < 4), so that the eight lanes of a row
// read its 128 contiguous bytes per load; a warp step covers 4 rows, four steps (16 rows) of loads are in flight, the
// first ones issued before the prologue (they depend on the slot only). The prologue stages the key head's ring of
// k records, the heads' rings of u records and g, their cursors (replica 0), the current v; warp 7 prepares q, k;
// every warp then takes ring positions for k_pos·k and k_pos·q (and the token's k·q); one warp per head computes
// the window weights; and once per row pre[v] = sum_{j<h} w_j (k_j·q) u_j[v] and, per quarter c,
// pre_k[v][c] = sum_{j<h, j = c mod 4} w_j (k_j·k) u_j[v], so that the row loop reads no ring record.
//
// Same bits as the combined kernel where the recurrence is concerned. The combined kernel's fp32 K = 128 tiling
// (Tiling<float, 128>: lane l holds columns 4 l .. 4 l + 3 of 8 rows) sums a row's dot product as FMA chains
// over 4 columns, a butterfly over lanes l, l ^ 16, l ^ 8, l ^ 4 (reduce_scatter), then over the 4 lanes
// l % 4 (group_sum<4>). Lanes (0, c) and (1, c) of this mapping hold exactly the columns of that kernel's lanes
// 4 m + c, so they form the same chains and add them in the same tree (row_dot below: each lane the pairs of its
// vectors, then the pair's add across the two lanes, then group_sum<4> over c); the ring terms of S'k go to the same
// quarter (records j = c mod 4: an FMA chain from 0 in increasing j, then e^E times the quarter's dot added in one
// FMA) before the same two shuffles. Hence:
//   - u (so the ring u records) and a flushing row's checkpoint and y are bit-identical to the combined kernel's
//     (the same fp32 operations in the same order: the q, k preparation and the gates are gates.cuh's functions,
//     the ring dots, weights and suffix sums decode.cuh's order);
//   - a non-flush row's y reads pre[v] (its window terms summed once per row in the prologue, in another order)
//     and differs from the combined kernel's by the order of an fp32 sum, before rounding to the activation dtype.
// Each block owns its heads' cursors (reads replica 0, writes every replica), its heads' ring u and g records and
// checkpoint rows; the key head's chunk 0 writes its ring k record (decode.cuh does the same from its first unit).
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/dependent_launch.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/gdn/gates.cuh"
#include "replayssm/gdn/params.h"

namespace replayssm {
namespace gdn {
namespace output_only {

constexpr int kK = 128;           // head_k_dim of this route (others take the combined kernel)
constexpr int kWarps = 8;         // warps per block
constexpr int kBlocksPerSm = 16 / kWarps;  // blocks per multiprocessor planned for (16 warps: 128 registers)
constexpr int kMaxHeads = 16;     // value heads per block
constexpr int kMaxLen = 32;       // L of this route (one lane per record in the weights' scan)
constexpr int kRowQuantum = 16 * kWarps;  // a block's rows (heads x V) are a multiple: whole 16-row batches per warp

// Shared memory of one block, byte offsets (each 16-byte aligned).
struct Smem {
  int ring_k, ring_u, v, ring_g, kq, w, ck, cq, pre, pre_k, k32, bytes;
};
__host__ __device__ inline Smem smem_layout(int L, int heads, int V, int act_bytes) {
  Smem s{};
  SmemBump bump;  // consecutive 16-byte-aligned regions
  s.ring_k = bump.take(L * kK * act_bytes);                  // [L][K] the key head's ring of k records
  s.ring_u = bump.take(heads * L * V * act_bytes);           // [heads][L][V] the heads' ring u records
  s.v = bump.take(heads * V * act_bytes);                    // [heads][V] the current v
  s.ring_g = bump.take(heads * round_up(L, 4) * 4);          // [heads][round_up(L, 4)] fp32 ring g
  s.kq = bump.take(2 * kK * 4);                              // [2][K] fp32: the current (prepared) k, then q
  // By record j, rows of round_up(L, 4) (16-byte aligned: the window loop reads 4 records at once), 0 outside the
  // window and past L:
  s.w = bump.take(heads * round_up(L, 4) * 4);               // [heads][round_up(L, 4)] w_j
  s.ck = bump.take(heads * round_up(L, 4) * 4);              // [heads][round_up(L, 4)] w_j (k_j·k)
  s.cq = bump.take(heads * round_up(L, 4) * 4);              // [heads][round_up(L, 4)] w_j (k_j·q)
  s.pre = bump.take(heads * V * 4);                          // [heads * V] the window's part of y, per row
  s.pre_k = bump.take(heads * V * 4 * 4);                    // [heads * V][4] the window's part of S'k, by quarter
  s.k32 = bump.take(L * kK * 4);                             // [L][K] the k records in fp32 (flushing heads)
  s.bytes = bump.off;
  return s;
}

// A state row is read by 8 lanes: lane (h, c) (h = lane / 4 % 2, c = lane % 4) holds the 16 columns 16 m + 4 c + e
// of the vectors m = vec_m(h, i), i < 4 (vector m at float4 index 4 m + c of the row): h = 0 the vectors 0, 4, 2, 6
// and h = 1 the vectors 1, 5, 3, 7, the pairs of the combined kernel's tree (row_dot).
constexpr int kLanesPerRow = 8;
constexpr int kStepRows = 32 / kLanesPerRow;  // rows of a warp step
__device__ __forceinline__ int vec_m(int lane, int i) { return (i % 2) * 4 + (i / 2) * 2 + (lane / 4) % 2; }
struct Row {
  float4 v[4];  // v[i]: vector vec_m(lane, i)
};

__device__ __forceinline__ Row load_row(const float* row, int lane) {
  Row r;
  const float4* src = reinterpret_cast<const float4*>(row) + lane % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) r.v[i] = __ldcs(src + vec_m(lane, i) * 4);
  return r;
}

// A 16-byte shared-memory load the compiler may neither hoist nor merge with another: the current k and q are
// read again at every row (from shared memory, 4 vectors each per row and lane) instead of living in 32 registers
// next to the four warp steps of state in flight (which would spill at 2 blocks per multiprocessor).
__device__ __forceinline__ float4 lds4(const float* p) {
  float4 v;
  asm volatile("ld.volatile.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p)))
               : "memory");
  return v;
}

// The lane's quarter of a row's dot product with a K-vector x (fp32 in shared memory), in the combined kernel's
// order: per vector m an FMA chain over its 4 columns from 0 (decode.cuh's lane_dot for lane 4 m + c), then the
// tree of its reduce_scatter over lanes l ^ 16, l ^ 8, l ^ 4 (m ^ 4, m ^ 2, m ^ 1): (p04 + p26) + (p15 + p37), lane
// h = 0 forming p04 + p26 and h = 1 p15 + p37 (their vectors), the last add across the pair (fp32 addition
// commutes: both lanes get the same bits).
__device__ __forceinline__ float row_dot(const Row& r, const float* x_s, int lane) {
  const auto part = [&](int i) {
    const float4 x = lds4(x_s + 16 * vec_m(lane, i) + 4 * (lane % 4));
    float acc = 0.f;
    acc = fmaf(r.v[i].x, x.x, acc);
    acc = fmaf(r.v[i].y, x.y, acc);
    acc = fmaf(r.v[i].z, x.z, acc);
    acc = fmaf(r.v[i].w, x.w, acc);
    return acc;
  };
  const float half = (part(0) + part(1)) + (part(2) + part(3));
  return half + __shfl_xor_sync(0xffffffffu, half, 4);
}

// A flushing head's rows, K warp steps at once (the lane's rows r, r + 4, ...): S' = e^E S0 + sum_{j<h}
// (w_j u_j) k_j (the k records in fp32 in shared memory; one vector read feeds 4 K FMAs: the loop is bound by
// shared-memory reads), u = beta (v - S'k), S = S' + u k, y = S q, S stored in place (WRITES state). The same
// fp32 operations in the same order as decode.cuh's flush route (row_dot's tree, then group_sum<4>), so the
// checkpoint, u and y are the combined kernel's bit for bit. ru: the first row's u records by ring position
// (stride V); w: w_j by record; v_s, y: the first row's v and y; row: its checkpoint row.
template <int K, typename ActT>
__device__ __forceinline__ void flush_rows(Row (&s)[K], float abar, float beta, int hist, int origin, int L,
                                           const float* w, const ActT* ru, int V, const float* k32,
                                           const float* kq_s, const ActT* v_s, ActT* y, float* row, int lane) {
#pragma unroll
  for (int k = 0; k < K; ++k) scale_each(s[k].v, abar);
#pragma unroll 1
  for (int j = 0; j < hist; ++j) {
    const int pos = ring_pos(origin, j, L);
    float cu[K];
#pragma unroll
    for (int k = 0; k < K; ++k) cu[k] = w[j] * to_float(ru[pos * V + kStepRows * k]);
    const float4* kj = reinterpret_cast<const float4*>(k32 + pos * kK) + lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 kv = kj[vec_m(lane, i) * 4];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        s[k].v[i].x = fmaf(cu[k], kv.x, s[k].v[i].x);
        s[k].v[i].y = fmaf(cu[k], kv.y, s[k].v[i].y);
        s[k].v[i].z = fmaf(cu[k], kv.z, s[k].v[i].z);
        s[k].v[i].w = fmaf(cu[k], kv.w, s[k].v[i].w);
      }
    }
  }
  const float* const k_s = kq_s;
  const float* const q_s = kq_s + kK;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float sk = group_sum<4>(row_dot(s[k], k_s, lane));
    const float u = beta * (to_float(v_s[kStepRows * k]) - sk);
    float4* const dst = reinterpret_cast<float4*>(row + kStepRows * k * kK) + lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 kv = lds4(k_s + 16 * vec_m(lane, i) + 4 * (lane % 4));
      s[k].v[i].x = fmaf(u, kv.x, s[k].v[i].x);
      s[k].v[i].y = fmaf(u, kv.y, s[k].v[i].y);
      s[k].v[i].z = fmaf(u, kv.z, s[k].v[i].z);
      s[k].v[i].w = fmaf(u, kv.w, s[k].v[i].w);
    }
    const float yv = group_sum<4>(row_dot(s[k], q_s, lane));
#pragma unroll
    for (int i = 0; i < 4; ++i) __stcs(dst + vec_m(lane, i) * 4, s[k].v[i]);  // WRITES state
    if (lane % kLanesPerRow == 0) y[kStepRows * k] = from_float<ActT>(yv);   // WRITES y[b, head, row]
  }
}

template <typename ActT>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm)
    output_only_kernel(const __grid_constant__ rssm_gdn_decode_params p, const int hpb, const int ahead,
                       const int row0, const int tail_follows) {
  if (tail_follows) allow_dependent_launch();  // (the tail launch may start once every block of this one has)
  constexpr int kBatch = 16 / kStepRows;  // warp steps of loads in flight (16 rows)
  const int b = row0 + blockIdx.y, HV = p.num_v_heads, hpg = HV / p.num_k_heads, chunks = hpg / hpb;
  const int kh = blockIdx.x / chunks, chunk = blockIdx.x - kh * chunks;
  const int head0 = kh * hpg + chunk * hpb, L = p.buffer_len, V = p.head_v_dim, ldg = round_up(L, 4);
  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) {  // padding: touch nothing
    wait_for_first_launch(row0);
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ __align__(16) char smem[];
  const Smem sp = smem_layout(L, hpb, V, sizeof(ActT));
  ActT* const rk_s = reinterpret_cast<ActT*>(smem + sp.ring_k);
  ActT* const ru_s = reinterpret_cast<ActT*>(smem + sp.ring_u);
  ActT* const v_s = reinterpret_cast<ActT*>(smem + sp.v);
  float* const rg_s = reinterpret_cast<float*>(smem + sp.ring_g);
  float* const kq_s = reinterpret_cast<float*>(smem + sp.kq);
  float* const w_s = reinterpret_cast<float*>(smem + sp.w);
  float* const ck_s = reinterpret_cast<float*>(smem + sp.ck);
  float* const cq_s = reinterpret_cast<float*>(smem + sp.cq);
  float* const pre_s = reinterpret_cast<float*>(smem + sp.pre);
  float* const pre_k_s = reinterpret_cast<float*>(smem + sp.pre_k);
  float* const k32_s = reinterpret_cast<float*>(smem + sp.k32);
  __shared__ float s_kk[kMaxLen], s_kq[kMaxLen], s_kq_cur;  // k_pos·k, k_pos·q by ring position; k·q
  __shared__ float s_g[kMaxHeads], s_beta[kMaxHeads], s_abar[kMaxHeads];
  __shared__ int s_hist[kMaxHeads], s_origin[kMaxHeads];

  const int64_t sh0 = static_cast<int64_t>(slot) * HV + head0;
  const int64_t sk0 = static_cast<int64_t>(slot) * p.num_k_heads + kh;
  const ActT* const v_b = static_cast<const ActT*>(p.v) + b * p.v_batch_stride + head0 * p.v_head_stride;
  ActT* const y_b = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;
  ActT* const ring_u = static_cast<ActT*>(p.ring_u) + sh0 * L * V;  // of (slot, head0)
  int32_t* const cursor = p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
  {
    // The whole rings (no copy waits for a cursor): the key head's k records, the heads' u records and g (each
    // contiguous in the pool); and the current v.
    const int act = sizeof(ActT);
    cp_async_block<kWarps * 32>(rk_s, static_cast<const ActT*>(p.ring_k) + sk0 * L * kK, L * kK * act);
    cp_async_block<kWarps * 32>(ru_s, ring_u, hpb * L * V * act);
    cp_async_block<kWarps * 32>(rg_s, p.ring_g + sh0 * ldg, hpb * ldg * 4);
    const int v16 = V * act / 16;  // 16-byte pieces of a head's v (validation makes each (row, head) 16-byte aligned)
    for (int i = threadIdx.x; i < hpb * v16; i += blockDim.x) {
      const int hh = i / v16, c16 = i - hh * v16;
      cp_async<16>(reinterpret_cast<char*>(v_s + hh * V) + c16 * 16,
                   reinterpret_cast<const char*>(v_b + hh * p.v_head_stride) + c16 * 16);
    }
    cp_async_commit();
  }
  // The first rows' loads go out now: they depend on the slot only.
  const int rpw = hpb * V / kWarps, steps = rpw / kStepRows;
  const int64_t warp_row0 = sh0 * V + warp * rpw;  // (slot, head0 + row / V, row % V) flattened
  // The lane's first row:
  float* const lane_state = static_cast<float*>(p.state) + (warp_row0 + lane / kLanesPerRow) * kK;
  Row regs[kBatch];
#pragma unroll
  for (int k = 0; k < kBatch; ++k)
    if (k < steps) regs[k] = load_row(lane_state + k * kStepRows * kK, lane);
  // The next `ahead` batches of the warp's rows (contiguous) are asked of L2 too: memory stays busy through the
  // prologue and between batches without holding registers; batch i + ahead is asked for when batch i loads.
  const float* const warp_state = static_cast<const float*>(p.state) + warp_row0 * kK;
  const auto prefetch_batch = [&](int s) {
    if (lane == 0 && s < steps)
      prefetch_l2(warp_state + s * kStepRows * kK, min(kBatch, steps - s) * kStepRows * kK * 4);
  };
  for (int a = 1; a <= ahead; ++a) prefetch_batch(a * kBatch);

  // Per head, the cursor (replica 0; all replicas agree at the start of a step) and the gates: loaded before any
  // of them is used (issue_loads_here; used as they arrived, each waited for the one before).
  const bool head_thread = threadIdx.x < hpb;
  int hist_word = 0, origin_word = 0;
  HeadGateInputs gates_in;
  if (head_thread) {
    const int32_t* cur = cursor + threadIdx.x * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
    hist_word = cur[RSSM_CURSOR_HISTORY];
    origin_word = cur[RSSM_CURSOR_ORIGIN];
    gates_in = load_head_gates(p, b, head0 + threadIdx.x);
  }
  issue_loads_here();
  if (head_thread) {
    const int hh = threadIdx.x;
    s_hist[hh] = clamp_history(hist_word, L);  // as decode.cuh
    s_origin[hh] = wrap_origin(origin_word, L);
    head_gates(p, gates_in, s_g[hh], s_beta[hh]);
  }
  if (warp == kWarps - 1) {
    // The current k and q, prepared (gates.cuh) in the combined kernel's fp32 K = 128 tiling (lane l: columns
    // 4 l .. 4 l + 3), so that the norm sums in its order: the same bits.
    float Kc[1][4], Qc[1][4];
    load_qk<ActT, 1, 4, 32>(p, b, kh, lane, Kc, Qc);
    prepare_qk<ActT, 1, 4, 32>(p, Kc, Qc);
    *reinterpret_cast<float4*>(kq_s + 4 * lane) = make_float4(Kc[0][0], Kc[0][1], Kc[0][2], Kc[0][3]);
    *reinterpret_cast<float4*>(kq_s + kK + 4 * lane) = make_float4(Qc[0][0], Qc[0][1], Qc[0][2], Qc[0][3]);
  }
  cp_async_wait_group<0>();
  __syncthreads();
  // k_pos·k, k_pos·q of every ring position and k·q of the token (index L): a warp per position, in decode.cuh's
  // tiling and order (lane chains over 4 columns, group_sum<32>).
  for (int j = warp; j <= L; j += kWarps) {
    float Kc[4], Qc[4];
    load_vec<float, 4>(kq_s + 4 * lane, Kc);
    load_vec<float, 4>(kq_s + kK + 4 * lane, Qc);
    float dk = 0.f, dq = 0.f;
    if (j < L) {
      float kj[4];
      load_vec<ActT, 4>(rk_s + j * kK + 4 * lane, kj);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        dk = fmaf(kj[e], Kc[e], dk);
        dq = fmaf(kj[e], Qc[e], dq);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dq = fmaf(Kc[e], Qc[e], dq);
    }
    dk = group_sum<32>(dk);
    dq = group_sum<32>(dq);
    if (lane == 0) {
      if (j < L) {
        s_kk[j] = dk;
        s_kq[j] = dq;
      } else {
        s_kq_cur = dq;
      }
    }
  }
  {  // a flushing head's k records in fp32 (exact)
    bool flushes = false;
    for (int hh = 0; hh < hpb; ++hh) flushes |= s_hist[hh] == L - 1;
    if (flushes)
      for (int i = threadIdx.x; i < L * kK; i += blockDim.x) k32_s[i] = to_float(rk_s[i]);
  }
  __syncthreads();
  // Window weights, one warp per head (decode.cuh's prologue, same order): w_j = e^{D_j}, w_j (k_j·k),
  // w_j (k_j·q) for the records j < h (0 for the others), e^E.
  for (int hh = warp; hh < hpb; hh += kWarps) {
    const int hist = s_hist[hh], origin = s_origin[hh], j = lane;
    const float gj = j > hist ? 0.f : (j == hist ? s_g[hh] : rg_s[hh * ldg + ring_pos(origin, j, L)]);
    float ex, total;
    warp_suffix_sums(gj, ex, total);
    store_window_weights(j, ex, hist, origin, L, s_kk, s_kq, w_s + hh * ldg, ck_s + hh * ldg, cq_s + hh * ldg);
    if (j >= L && j < ldg) w_s[hh * ldg + j] = ck_s[hh * ldg + j] = cq_s[hh * ldg + j] = 0.f;  // (the rows' padding)
    if (lane == 0) s_abar[hh] = expf(total);
  }
  __syncthreads();
  // Per row, once: the window's parts, from the same u records: of y, sum_{j<h} w_j (k_j·q) u_j (y only: its order
  // is free), and of S'k by quarter c (lane c of the row below), sum_{j<h, j = c mod 4} w_j (k_j·k) u_j, an FMA chain
  // from 0 in increasing j as the combined kernel forms it (decode.cuh). Records go 4 at a time without a branch:
  // those past the window (j >= h, up to round_up(h, 4)) take u = 0 and coefficients 0, which add +0 to chains that
  // start at +0 (never -0): the same bits. Each warp its own rows, the only ones it reads below: a warp barrier, not
  // a block barrier.
  for (int lrow = warp * rpw + lane; lrow < (warp + 1) * rpw; lrow += 32) {
    const int hh = lrow / V, r = lrow - hh * V, hist = s_hist[hh], origin = s_origin[hh];
    const ActT* const ru = ru_s + hh * L * V + r;
    const float* const ck = ck_s + hh * ldg;
    const float* const cq = cq_s + hh * ldg;
    float acc = 0.f, part[4] = {0.f, 0.f, 0.f, 0.f};
    int off = origin * V;  // record j's u at ru[off]: ring position (origin + j) mod L, advanced per record
    for (int j0 = 0; j0 < hist; j0 += 4) {
      float u[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float uj = to_float(ru[off]);
        u[c] = j0 + c < hist ? uj : 0.f;
        off += V;
        if (off >= L * V) off -= L * V;
      }
      const float4 k4 = *reinterpret_cast<const float4*>(ck + j0);
      const float4 q4 = *reinterpret_cast<const float4*>(cq + j0);
      acc = fmaf(q4.x, u[0], acc);
      acc = fmaf(q4.y, u[1], acc);
      acc = fmaf(q4.z, u[2], acc);
      acc = fmaf(q4.w, u[3], acc);
      part[0] = fmaf(k4.x, u[0], part[0]);
      part[1] = fmaf(k4.y, u[1], part[1]);
      part[2] = fmaf(k4.z, u[2], part[2]);
      part[3] = fmaf(k4.w, u[3], part[3]);
    }
    pre_s[lrow] = acc;
    reinterpret_cast<float4*>(pre_k_s)[lrow] = make_float4(part[0], part[1], part[2], part[3]);
  }
  __syncwarp();

  const float kq_cur = s_kq_cur;
#pragma unroll 1
  for (int s0 = 0; s0 < steps; s0 += kBatch) {
    if (s0 > 0) {
      prefetch_batch(s0 + ahead * kBatch);
#pragma unroll
      for (int k = 0; k < kBatch; ++k)
        if (s0 + k < steps) regs[k] = load_row(lane_state + (s0 + k) * kStepRows * kK, lane);
    }
    // A batch's 16 rows lie in one head (the warp's rows and V are multiples of 16).
    const int lrow0 = warp * rpw + s0 * kStepRows, hh = lrow0 / V, r0 = lrow0 - hh * V + lane / kLanesPerRow;
    const int hist = s_hist[hh], origin = s_origin[hh];
    const float abar = s_abar[hh], beta = s_beta[hh];
    if (hist == L - 1) {
      flush_rows(regs, abar, beta, hist, origin, L, w_s + hh * ldg, ru_s + hh * L * V + r0, V, k32_s, kq_s,
                 v_s + hh * V + r0, y_b + hh * p.y_head_stride + r0,
                 lane_state + s0 * kStepRows * kK, lane);
      continue;
    }
    const int pos_new = ring_pos(origin, hist, L);
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int r = r0 + kStepRows * k;
      // S'k in the combined kernel's order: e^E times the lane's quarter plus its ring terms (records j = c mod 4,
      // summed in the prologue) in one FMA, then the row's two shuffles; so u is the combined kernel's bit for bit.
      const float sk = group_sum<4>(fmaf(abar, row_dot(regs[k], kq_s, lane), pre_k_s[(hh * V + r) * 4 + lane % 4]));
      const float sq = group_sum<4>(row_dot(regs[k], kq_s + kK, lane));
      const float u = beta * (to_float(v_s[hh * V + r]) - sk);
      const float yv = fmaf(u, kq_cur, fmaf(abar, sq, pre_s[hh * V + r]));
      if (lane % kLanesPerRow == 0) {
        y_b[hh * p.y_head_stride + r] = from_float<ActT>(yv);                // WRITES y[b, head, r]
        ring_u[(hh * L + pos_new) * V + r] = from_float<ActT>(u);            // WRITES ring_u[slot, head, pos, r]
      }
    }
  }
  // Per head: ring g and the cursor (every replica; a flush head's history goes back to 0); per key head: the
  // ring k record (chunk 0, by its first head, as decode.cuh).
  if (threadIdx.x < hpb) {
    const int hh = threadIdx.x, hist = s_hist[hh], flush = hist == L - 1;
    if (!flush) p.ring_g[(sh0 + hh) * ldg + ring_pos(s_origin[hh], hist, L)] = s_g[hh];  // WRITES ring_g
    int32_t* cur = cursor + hh * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
    for (int rep = 0; rep < RSSM_CURSOR_REPLICAS; ++rep)  // WRITES cursor history
      cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
  }
  if (chunk == 0 && s_hist[0] < L - 1) {
    ActT* rk = static_cast<ActT*>(p.ring_k) + (sk0 * L + ring_pos(s_origin[0], s_hist[0], L)) * kK;
    for (int n = threadIdx.x; n < kK; n += blockDim.x) rk[n] = from_float<ActT>(kq_s[n]);  // WRITES ring_k
  }
  wait_for_first_launch(row0);
}

// Heads per block for this step, or 0 when the route does not take it (the combined kernel then does): replay,
// scalar decay, K = 128 (the template), L 2..32, bf16 / fp16 activations (the template), V a multiple of 16, and
// a block of the most value heads (<= 16, dividing the heads per key head) whose rows are whole 16-row batches
// per warp and whose shared memory leaves kBlocksPerSm blocks per multiprocessor.
template <typename ActT>
inline int heads_per_block(const rssm_gdn_decode_params& p, int smem_per_sm) {
  if (sizeof(ActT) != 2 || p.mode != RSSM_GDN_REPLAY || p.per_channel_decay || p.head_k_dim != kK) return 0;
  if (p.buffer_len < 2 || p.buffer_len > kMaxLen || p.head_v_dim % 16) return 0;
  const int hpg = p.num_v_heads / p.num_k_heads;
  static const int overhead = block_smem_overhead(output_only_kernel<ActT>);  // static arrays + reserved
  for (int hpb = kMaxHeads; hpb >= 1; hpb /= 2) {
    if (hpg % hpb || (hpb * p.head_v_dim) % kRowQuantum) continue;
    if (kBlocksPerSm * (smem_layout(p.buffer_len, hpb, p.head_v_dim, sizeof(ActT)).bytes + overhead) <= smem_per_sm)
      return hpb;
  }
  return 0;
}

template <typename ActT>
cudaError_t launch(const rssm_gdn_decode_params& p, int hpb, int ahead, int tail_rows, cudaStream_t stream) {
  const auto kernel = output_only_kernel<ActT>;
  const int bytes = smem_layout(p.buffer_len, hpb, p.head_v_dim, sizeof(ActT)).bytes;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  const int hpg = p.num_v_heads / p.num_k_heads;
  const auto shape = [&](int h) {
    return RowsLaunchShape{p.num_k_heads * (hpg / h), smem_layout(p.buffer_len, h, p.head_v_dim, sizeof(ActT)).bytes};
  };
  const int tail = tail_launch_rows(tail_rows, p.batch, hpb, p.head_v_dim, kRowQuantum);
  return launch_rows_with_tail(kernel, kernel, p, p.batch, hpb, ahead, tail, dim3(kWarps * 32), shape, stream);
}

}  // namespace output_only
}  // namespace gdn
}  // namespace replayssm
