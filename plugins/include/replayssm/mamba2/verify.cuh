// Mamba-2 speculative verify, ReplaySSM route: T tokens per row checked at once from the checkpoint S0 and the
// ring (trtllm_replayssm/ops/mamba2/spec_reference.py is the specification). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Per row, with h committed records since S0 (cursor history; record j at ring position (origin + j) mod L) and
// the window's tokens as records h .. h+T-1:
//   y_s = abar_s (S0·C_s) + sum_{j <= h+s} coef_{j,s} x_j            (s = 0 .. T-1)
//   abar_s = exp(A pre_{h+s}),  coef_{j,s} = dt_j exp(A (pre_{h+s} - pre_j)) (B_j·C_s),  pre_t = sum_{i<=t} dt_i
// The T records (x, B, processed dt) are written at ring positions h .. h+T-1. Rows with h + 2T > L ("one window
// early") also fold the h committed records into S0 and store it (S = abar S0 + sum_{j<h} w_j x_j B_jᵀ), and
// move their cursor: origin += h, history := 0; the outputs still read the old S0. The history is not advanced
// here: rssm_spec_commit adds the accepted count.
//
// Work split (as the decode kernel, common/decode_tiling.cuh): one block per (batch row, group, chunk of
// consecutive (head, tile) units). A block reads the row's cursor once (every replica of a slot holds the same
// values), stages the window's B records and the tokens' C, computes the B_j·C_s products once, and each warp
// computes the coefficients of one head of the chunk. The units then stream through a cp.async pipeline of
// 2-3 stages (checkpoint tile, the window's x records in window order, z). Each checkpoint tile is read from
// HBM once; a thread takes all T dot products of each state row it holds (C_s of its columns in registers,
// T FMAs per state element), one multi-value reduce-scatter (common/multi_reduce.cuh) leaves every lane with
// complete (row, token) sums, and that lane adds the window terms of its row from shared memory.
//
// fp32 CUDA-core FMAs throughout, exact to fp32 rounding. Tensor cores were not needed: a non-flush verify reads
// each state element once and does T FMAs on it (T <= 8), which keeps the kernel memory-bound on the H200; a
// flush row adds h FMAs per element (the fold, a rank-h update) plus one store.
//
// Window sizes: T is a runtime value (2..8); the kernel is compiled for TM = 2, 4, 8 tokens and a window of T
// runs the smallest TM >= T with the surplus tokens masked (their C is zero and nothing of them is written).
//
// Read copies (CopyT = __half, __nv_bfloat16 or __nv_fp8_e4m3 with an fp32 checkpoint; void: none), as the decode
// kernel (mamba2/decode.cuh): the outputs read the copy, the fold reads the checkpoint (spec_reference.py: y from
// pool.read_state, the flush from the checkpoint, which it stores with the copy rewritten from the same values).
// The copy keeps the checkpoint's layout and thread mapping (Tiling<StateT, N>): a thread's copy vectors are its
// checkpoint vectors narrowed (8 or 4 bytes instead of 16), so the flush writes exactly the copy elements the same
// thread reads in a later step.
//   - A stage holds the unit's copy tile instead of its checkpoint tile (narrow cp.async, still whole rows per
//     warp instruction); the T dot products widen it to fp32 in registers. fp8: y_s = abar_s scale_row (code·C_s),
//     the row scale applied after the reduce-scatter (every lane then holds a single row); the block's row scales
//     are staged once, with the prologue's group 0.
//   - The fold of a flush block reads its checkpoint tile straight from global memory (16-byte loads issued back
//     to back, outside the pipeline). Whether a block flushes is known before its first copy is queued (the cursor
//     is read up front), but staging both tiles would size every stage (and the pipeline depth) for the flush.
//     Folding rows are a minority of the steps when L is well above 2T; near L = 2T most rows fold, and whether
//     the unpipelined loads cost more than deeper stages is for the benchmark to say (not yet measured).
//   - The flush stores the checkpoint (StateT, as without a copy) and then the copy, quantised from the same fp32
//     registers by common/read_copy.cuh (store_read_copy: fp16 / bf16 nearest even; fp8 row amax across the LPR
//     lanes holding the row, scale = max(amax * (1/448), FLT_MIN), code = e4m3_satfinite(v / scale), the
//     operations of quant.py). The copy never feeds the recurrence: checkpoint, rings and cursors are the same
//     whatever the copy.
// nvfp4 copies are not read here (validation refuses them): the per-warp staging and 4-row group scales of the
// decode kernel's nvfp4 path would need a second staging scheme in this kernel.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/common/multi_reduce.cuh"
#include "replayssm/common/read_copy.cuh"
#include "replayssm/mamba2/head_inputs.cuh"
#include "replayssm/mamba2/snapshot.cuh"
#include "replayssm/mamba2/spec_params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kMaxWindow = 8;
// Dynamic shared memory that still lets two blocks share an SM (Hopper: 228 KiB per SM); above it the pipeline
// drops from 3 stages to 2.
constexpr int kTwoBlockSmem = 100 * 1024;

// Dynamic shared memory of one block, byte offsets (16-byte aligned).
struct VerifyPlan {
  int rB;                   // [L][N] act: the window's B records in window order (committed, then the tokens')
  int Cs;                   // [TM][N] act: the tokens' C
  int coef;                 // [chunk heads][L][TM] fp32: coef_{j,s}
  int ring_dt;              // [chunk heads][round_up(L, 4)] fp32: the heads' rings of processed dt
  int stage0, stage_bytes;  // stage k starts at stage0 + k * stage_bytes
  int state, xw, z;         // in a stage: the read tile [rows][N] (checkpoint, or its read copy); x records [L][rows]
                            // in window order; z [TM][rows]
  int stages;               // pipeline depth (2 or 3)
  int bytes;
  int read_scale;           // fp8 read copy: [units][rows] fp32 row scales of the block's units (else empty)
};

// read_bytes: bytes per element of the staged read tile (the checkpoint's, or the read copy's); unit_scales: fp32
// scales per unit (fp8 copy: rows, else 0).
inline VerifyPlan verify_plan(int L, int N, int TM, int rows, int units, int read_bytes, int act_bytes,
                              int unit_scales = 0) {
  auto build = [&](int stages) {
    VerifyPlan s{};
    SmemBump bump;  // consecutive 16-byte-aligned regions
    s.rB = bump.take(L * N * act_bytes);
    s.Cs = bump.take(TM * N * act_bytes);
    s.coef = bump.take(units * L * TM * 4);
    s.ring_dt = bump.take(units * round_up(L, 4) * 4);
    s.read_scale = bump.take(units * unit_scales * 4);
    s.stage0 = bump.off;
    bump.off = 0;
    s.state = bump.take(rows * N * read_bytes);
    s.xw = bump.take(L * rows * act_bytes);
    s.z = bump.take(TM * rows * act_bytes);
    s.stage_bytes = bump.off;
    s.stages = stages;
    s.bytes = s.stage0 + std::min(stages, units) * s.stage_bytes;
    return s;
  };
  const VerifyPlan three = build(3);
  return three.bytes <= kTwoBlockSmem ? three : build(2);
}

template <int S>
__device__ __forceinline__ void wait_unit() {  // the oldest unit in flight has landed (S - 2 younger may not)
  cp_async_wait_group<S - 2>();
}

template <typename StateT, typename ActT, int N, int TM, typename CopyT>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    verify_kernel(const __grid_constant__ rssm_mamba2_verify_params p, const Shape shape, const VerifyPlan sp) {
  using Tl = Tiling<StateT, N>;
  using RT = ReadT<StateT, CopyT>;                                    // element of the staged read tile
  constexpr bool kCopy = !std::is_void_v<CopyT>;                      // the outputs read a read copy
  constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;    // ... with a scale per state row
  constexpr int kTileVecBytes = Tl::VEC * static_cast<int>(sizeof(RT));  // one vector of the read tile
  static_assert(!kCopy || sizeof(RT) < sizeof(StateT), "a read copy is narrower than the checkpoint");
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int M = KI * TM;  // dot products per thread and unit: KI rows x TM tokens, flat index i * TM + s
  constexpr int R = MultiScatter<M, LPR>::R, SH = MultiScatter<M, LPR>::SH;
  constexpr int AV = 16 / sizeof(ActT);   // activation elements per 16-byte vector
  constexpr int NAV = N / AV;             // 16-byte vectors per B or C record
  constexpr int DL = 8;                   // lanes per B·C product

  extern __shared__ __align__(16) char smem[];
  __shared__ float s_bc[kMaxBufferLen * TM];        // B_j·C_s at [j * TM + s]
  __shared__ float s_wf[kMaxUnits][kMaxBufferLen];  // flush weights w_j of the committed records
  __shared__ float s_abar[kMaxUnits][TM], s_abar_f[kMaxUnits];
  __shared__ float s_dtp[kMaxUnits][TM], s_A[kMaxUnits], s_D[kMaxUnits];

  const int H = p.nheads, P = p.head_dim, L = p.buffer_len, T = p.window;
  const int TILES = shape.tiles, TR = shape.rows, U = shape.units, S = sp.stages, TL = shape.tiles_log2;
  const int b = blockIdx.y, group = blockIdx.x / shape.chunks, chunk = blockIdx.x - group * shape.chunks;
  const int hpg = H / p.ngroups;
  const int unit0 = chunk * U;                    // first unit of this block within the group
  const int head0 = group * hpg + (unit0 >> TL);  // first head of this block
  const int tile_base = unit0 & (TILES - 1);      // unit u is (head0 + ((tile_base + u) >> TL), (tile_base + u) & (TILES - 1))
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int seg = lane / LPR, col_lane = lane % LPR;
  const int ldt = round_up(L, 4);

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  const int64_t sh0 = static_cast<int64_t>(slot) * H + head0;
  int32_t* const cursor_blk = p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
  // The row's cursor, from the replica of unit 0 (written only by this block, and only after this read).
  // Clamped so that a corrupted cursor never indexes outside the ring: h + T <= L.
  const int2 cur = *reinterpret_cast<const int2*>(cursor_blk + tile_base * RSSM_CURSOR_FIELDS);
  const int hist = min(max(cur.x, 0), L - T);
  const int origin = (cur.y >= 0 && cur.y < L) ? cur.y : ((cur.y % L) + L) % L;
  const int W = hist + T;                   // records in the window
  const bool flush = hist + 2 * T > L;      // block-uniform

  StateT* const state_blk = static_cast<StateT*>(p.state) + sh0 * P * N;  // unit uu's tile at uu * TR * N
  // The tile the outputs read (same layout and offsets as state_blk) and, fp8, its row scales (unit uu's rows at
  // uu * TR).
  RT* const read_blk = kCopy ? static_cast<RT*>(p.read_state) + sh0 * P * N : reinterpret_cast<RT*>(state_blk);
  float* const read_scale_blk = kRowScale ? p.read_scale + sh0 * P : nullptr;
  const ActT* const x_blk = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head0 * p.x_head_stride;
  const ActT* const z_blk = p.z ? static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head0 * p.z_head_stride : nullptr;
  ActT* const y_blk = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;
  ActT* const ring_x_blk = static_cast<ActT*>(p.ring_x) + sh0 * L * P;
  float* const ring_dt_blk = p.ring_dt + sh0 * ldt;
  const int64_t sg = static_cast<int64_t>(slot) * p.ngroups + group;

  const int thread_off = (warp * RW + seg) * N + col_lane * VEC;  // this thread's first vector in a tile
  auto vec_step = [](int i, int v) { return i * RPI * N + v * LPR * VEC; };
  const int pieces = TR * static_cast<int>(sizeof(ActT)) / 8;  // 8-byte pieces of a record's tile rows
  auto stage_ptr = [&](int stage) { return smem + sp.stage0 + stage * sp.stage_bytes; };

  // Queues the copies of unit u into `stage`: this thread's own vectors of the read tile (checkpoint or copy; it
  // reads back exactly those), the window's x records of the tile rows in window order (committed ones from the
  // ring, then the tokens' x), the tokens' z.
  auto issue_unit = [&](int u, int stage) {
    const int uu = tile_base + u, hh = uu >> TL, row0 = (uu & (TILES - 1)) * TR;
    char* st = stage_ptr(stage);
    const RT* gs = read_blk + (uu * TR * N + thread_off);
    RT* ss = reinterpret_cast<RT*>(st + sp.state) + thread_off;
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) cp_async<kTileVecBytes>(ss + vec_step(i, v), gs + vec_step(i, v));
    const ActT* rxg = ring_x_blk + static_cast<int64_t>(hh) * L * P + row0;
    const ActT* xg = x_blk + hh * p.x_head_stride + row0;
    const int nx = W * pieces, nz = z_blk ? T * pieces : 0;
    for (int k = threadIdx.x; k < nx + nz; k += blockDim.x) {
      if (k < nx) {
        const int j = k / pieces, c = k - j * pieces;
        const ActT* src = j < hist ? rxg + ring_pos(origin, j, L) * P : xg + (j - hist) * p.x_token_stride;
        cp_async<8>(st + sp.xw + k * 8, reinterpret_cast<const char*>(src) + c * 8);
      } else {
        const int k2 = k - nx, s = k2 / pieces, c = k2 - s * pieces;
        const ActT* src = z_blk + hh * p.z_head_stride + row0 + s * p.z_token_stride;
        cp_async<8>(st + sp.z + k2 * 8, reinterpret_cast<const char*>(src) + c * 8);
      }
    }
  };

  // ---- Prologue. Group 0: the window's B records (window order), the tokens' C, the chunk heads' rings of dt
  // (fp8 copy: the units' row scales); then units 0 .. S-2.
  const int chunk_heads = ((tile_base + U - 1) >> TL) + 1;
  if constexpr (kRowScale) {  // the units' rows are consecutive
    const float* src = read_scale_blk + tile_base * TR;
    float* dst = reinterpret_cast<float*>(smem + sp.read_scale);
    for (int k = threadIdx.x; k < U * TR; k += blockDim.x) cp_async<4>(dst + k, src + k);
  }
  {
    const ActT* rBg = static_cast<const ActT*>(p.ring_B) + sg * L * N;
    const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
    const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
    const int nB = W * NAV, nC = T * NAV;
    for (int k = threadIdx.x; k < nB + nC; k += blockDim.x) {
      if (k < nB) {
        const int j = k / NAV, c = k - j * NAV;
        const ActT* src = j < hist ? rBg + ring_pos(origin, j, L) * N : Bg + (j - hist) * p.B_token_stride;
        cp_async<16>(smem + sp.rB + k * 16, reinterpret_cast<const char*>(src) + c * 16);
      } else {
        const int k2 = k - nB, s = k2 / NAV, c = k2 - s * NAV;
        cp_async<16>(smem + sp.Cs + k2 * 16, reinterpret_cast<const char*>(Cg + s * p.C_token_stride) + c * 16);
      }
    }
    for (int k = threadIdx.x; k < chunk_heads * ldt / 4; k += blockDim.x)
      cp_async<16>(smem + sp.ring_dt + k * 16, ring_dt_blk + k * 4);  // the heads' rows are consecutive
  }
  cp_async_commit();
  for (int u = 0; u < S - 1; ++u) {
    if (u < U) issue_unit(u, u);
    cp_async_commit();
  }

  for (int k = threadIdx.x; k < chunk_heads * TM; k += blockDim.x) {
    const int hh = k / TM, s = k % TM, head = head0 + hh;
    HeadInputs in;  // the loads all go out before the softplus branch (head_inputs.cuh)
    if (s < T)
      in = load_head_inputs<ActT>(p, b * p.dt_batch_stride + s * p.dt_token_stride + head * p.dt_head_stride, head);
    issue_loads_here();
    s_dtp[hh][s] = s < T ? processed_dt(p, in) : 0.f;
    if (s == 0) {
      s_A[hh] = in.A;
      s_D[hh] = in.D;
    }
  }
  if (S == 3) cp_async_wait_group<2>(); else cp_async_wait_group<1>();  // group 0 has landed
  __syncthreads();

  const ActT* const rB_s = reinterpret_cast<const ActT*>(smem + sp.rB);
  const ActT* const C_s = reinterpret_cast<const ActT*>(smem + sp.Cs);
  // B_j·C_s for every window record j <= h + s, once per block: DL lanes per product.
  {
    const int npairs = W * TM, sub = lane % DL;
    for (int k0 = warp * (32 / DL); k0 < npairs; k0 += nwarps * (32 / DL)) {  // warp-uniform
      const int k = k0 + lane / DL, j = k / TM, s = k % TM;
      float d = 0.f;
      if (k < npairs && s < T && j <= hist + s) {
        for (int c = sub; c < NAV; c += DL) {
          float bv[AV], cv[AV];
          load_vec<ActT, AV>(rB_s + j * N + c * AV, bv);
          load_vec<ActT, AV>(C_s + s * N + c * AV, cv);
#pragma unroll
          for (int e = 0; e < AV; ++e) d = fmaf(bv[e], cv[e], d);
        }
      }
      d = group_sum<DL>(d);
      if (sub == 0 && k < npairs) s_bc[k] = d;
    }
  }
  // WRITES ring_B[slot, group] at positions h .. h+T-1: the tokens' B, from the group's first block. Other
  // blocks of the group read only committed positions (j < h), which no block writes in this launch.
  if (chunk == 0) {
    ActT* rBw = static_cast<ActT*>(p.ring_B) + sg * L * N;
    for (int k = threadIdx.x; k < T * NAV; k += blockDim.x) {
      const int s = k / NAV, c = k - s * NAV;
      *reinterpret_cast<uint4*>(reinterpret_cast<char*>(rBw + ring_pos(origin, hist + s, L) * N) + c * 16) =
          *reinterpret_cast<const uint4*>(smem + sp.rB + ((hist + s) * NAV + c) * 16);
    }
  }
  __syncthreads();

  // Coefficients, one warp per head of the chunk: suffix sums of the window's dt masked to records 0 .. h+s
  // (as the decode kernel computes a window of h+s+1 records), w_j, coef_{j,s} = w_j (B_j·C_s), abar_s; on flush
  // rows also the fold weights of records 0 .. h-1.
  float* const coef_s = reinterpret_cast<float*>(smem + sp.coef);
  for (int hh = warp; hh < chunk_heads; hh += nwarps) {  // warp-uniform
    const float A = s_A[hh];
    const float* rdt = reinterpret_cast<const float*>(smem + sp.ring_dt) + hh * ldt;
    auto dval = [&](int j) { return j < hist ? rdt[ring_pos(origin, j, L)] : (j < W ? s_dtp[hh][j - hist] : 0.f); };
    const float d0 = dval(lane), d1 = L > 32 ? dval(lane + 32) : 0.f;
    auto weights = [&](int last, float& w0, float& w1, float& total) {  // records 0 .. last
      const float v0 = lane <= last ? d0 : 0.f, v1 = lane + 32 <= last ? d1 : 0.f;
      float ex0, ex1 = 0.f;
      if (L > 32) {
        warp_suffix_sums(v0, v1, ex0, ex1, total);
      } else {
        warp_suffix_sums(v0, ex0, total);
      }
      w0 = v0 * expf(A * ex0);
      w1 = v1 * expf(A * ex1);
    };
    for (int s = 0; s < TM; ++s) {
      float w0 = 0.f, w1 = 0.f, total = 0.f;
      if (s < T) weights(hist + s, w0, w1, total);
      if (lane < W) coef_s[(hh * L + lane) * TM + s] = w0 * s_bc[lane * TM + s];
      if (lane + 32 < W) coef_s[(hh * L + lane + 32) * TM + s] = w1 * s_bc[(lane + 32) * TM + s];
      if (lane == 0) s_abar[hh][s] = s < T ? expf(A * total) : 0.f;
    }
    if (flush) {
      float w0, w1, total;
      weights(hist - 1, w0, w1, total);
      if (lane < hist) s_wf[hh][lane] = w0;
      if (lane + 32 < hist) s_wf[hh][lane + 32] = w1;
      if (lane == 0) s_abar_f[hh] = expf(A * total);
    }
  }

  // C_s at this lane's columns (zero for masked tokens).
  float Cc[TM][NV][VEC];
#pragma unroll
  for (int s = 0; s < TM; ++s)
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      if (s < T) {
        load_vec<ActT, VEC>(C_s + s * N + (v * LPR + col_lane) * VEC, Cc[s][v]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) Cc[s][v][e] = 0.f;
      }
    }

  // After the reduce-scatter this lane holds tokens s0 .. s0+R-1 of tile row my_row (shared by SH lanes).
  const int f0 = multi_scatter_base<M, LPR>(lane);
  const int s0 = f0 % TM;
  const int my_row = warp * RW + (f0 / TM) * RPI + seg;
  const int q = lane % SH;
  const int jend = min(hist + s0 + R, W);  // window records this lane's outputs read

  int stage = 0;  // stage of unit u
  for (int u = 0; u < U; ++u) {
    if (S == 3) wait_unit<3>(); else wait_unit<2>();
    __syncthreads();  // unit u landed for everyone; the stage of unit u + S - 1 was last read in unit u - 1
    {
      const int next = u + S - 1;
      if (next < U) issue_unit(next, stage + S - 1 < S ? stage + S - 1 : stage - 1);
      cp_async_commit();
    }

    const int uu = tile_base + u, hh = uu >> TL, tile = uu & (TILES - 1), row0 = tile * TR;
    const char* st = stage_ptr(stage);
    const RT* ss = reinterpret_cast<const RT*>(st + sp.state) + thread_off;
    const ActT* xw = reinterpret_cast<const ActT*>(st + sp.xw);
    const ActT* zs = reinterpret_cast<const ActT*>(st + sp.z);

    // ---- T dot products per state row, from one read of the tile.
    float acc[M];
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      float sv[NV][VEC];
#pragma unroll
      for (int v = 0; v < NV; ++v) load_vec<RT, VEC>(ss + vec_step(i, v), sv[v]);
#pragma unroll
      for (int s = 0; s < TM; ++s) {
        float a = 0.f;
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
          for (int e = 0; e < VEC; ++e) a = fmaf(sv[v][e], Cc[s][v][e], a);
        acc[i * TM + s] = a;
      }
    }
    multi_reduce_scatter<M, LPR>(acc);

    // ---- Window terms of this lane's (row, tokens); the SH lanes of a value split the records.
    float yv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) yv[r] = s_abar[hh][s0 + r] * acc[r];
    if constexpr (kRowScale) {  // fp8 copy: the row's scale, factored out of the dot products (row my_row of unit u)
      const float rs = reinterpret_cast<const float*>(smem + sp.read_scale)[u * TR + my_row];
#pragma unroll
      for (int r = 0; r < R; ++r) yv[r] *= rs;
    }
    const float* cf = coef_s + hh * L * TM + s0;
    for (int j = q; j < jend; j += SH) {
      const float xj = to_float(xw[j * TR + my_row]);
#pragma unroll
      for (int r = 0; r < R; ++r) yv[r] = fmaf(cf[j * TM + r], xj, yv[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) yv[r] = group_sum<SH>(yv[r]);
    if (q == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int s = s0 + r;
        if (s < T) {
          const float xv = to_float(xw[(hist + s) * TR + my_row]);
          float out = fmaf(s_D[hh], xv, yv[r]);
          if (z_blk) out *= silu_gate(to_float(zs[s * TR + my_row]));
          y_blk[s * p.y_token_stride + hh * p.y_head_stride + row0 + my_row] = from_float<ActT>(out);  // WRITES y
        }
      }
    }

    // ---- The tokens' records: WRITES ring_x[slot, head, h+s, tile rows] (exact copies of x) and, from the
    // head's first tile, ring_dt[slot, head, h+s].
    {
      ActT* rxw = ring_x_blk + static_cast<int64_t>(hh) * L * P + row0;
      for (int k = threadIdx.x; k < T * pieces; k += blockDim.x) {
        const int s = k / pieces, c = k - s * pieces;
        *reinterpret_cast<uint2*>(reinterpret_cast<char*>(rxw + ring_pos(origin, hist + s, L) * P) + c * 8) =
            *reinterpret_cast<const uint2*>(st + sp.xw + (hist * pieces + k) * 8);
      }
      if (tile == 0 && threadIdx.x < T) ring_dt_blk[hh * ldt + ring_pos(origin, hist + threadIdx.x, L)] = s_dtp[hh][threadIdx.x];
    }

    // ---- Flush rows: fold the h committed records into the checkpoint tile and store it (and the copy rewritten
    // from it); move the cursor. With a read copy the stage holds the copy: the checkpoint comes from global memory.
    if (flush) {
      float sv[KI][NV][VEC];
      const float af = s_abar_f[hh];
#pragma unroll
      for (int i = 0; i < KI; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) {
          if constexpr (kCopy) {
            load_vec<StateT, VEC>(state_blk + (uu * TR * N + thread_off) + vec_step(i, v), sv[i][v]);
          } else {
            load_vec<StateT, VEC>(ss + vec_step(i, v), sv[i][v]);
          }
#pragma unroll
          for (int e = 0; e < VEC; ++e) sv[i][v][e] *= af;
        }
      for (int j = 0; j < hist; ++j) {
        const ActT* xj = xw + j * TR + warp * RW + seg;
        float xv[KI];
        if (RPI == 1) {
          load_vec<ActT, KI>(xj, xv);  // the thread's rows are consecutive
        } else {
#pragma unroll
          for (int i = 0; i < KI; ++i) xv[i] = to_float(xj[i * RPI]);
        }
        float Bj[NV][VEC];
#pragma unroll
        for (int v = 0; v < NV; ++v) load_vec<ActT, VEC>(rB_s + j * N + (v * LPR + col_lane) * VEC, Bj[v]);
        const float wj = s_wf[hh][j];
#pragma unroll
        for (int i = 0; i < KI; ++i) {
          const float cx = wj * xv[i];
#pragma unroll
          for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) sv[i][v][e] = fmaf(cx, Bj[v][e], sv[i][v][e]);
        }
      }
      StateT* gstate = state_blk + (uu * TR * N + thread_off);
#pragma unroll
      for (int i = 0; i < KI; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) store_stream(gstate + vec_step(i, v), pack<StateT, VEC>(sv[i][v]));  // WRITES state
      // WRITES read_state (and fp8 read_scale) of the tile's rows: the copy of the values just stored.
      if constexpr (kCopy)
        store_read_copy<CopyT, Tl>(sv, read_blk + (uu * TR * N + thread_off),
                                   kRowScale ? read_scale_blk + uu * TR + warp * RW + seg : nullptr, col_lane);
      // WRITES the cursor replicas this unit owns (tile, tile + TILES, ...): history 0, origin past the fold.
      if (warp == 0 && lane < RSSM_CURSOR_REPLICAS && (lane & (TILES - 1)) == tile)
        *reinterpret_cast<int2*>(cursor_blk + (hh * RSSM_CURSOR_REPLICAS + lane) * RSSM_CURSOR_FIELDS) =
            make_int2(0, ring_pos(origin, hist, L));
    }
    stage = stage + 1 < S ? stage + 1 : 0;
  }
}

template <typename StateT, typename ActT, int N, int TM, typename CopyT>
static cudaError_t launch_verify_window(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const Shape shape = launch_shape(p.head_dim, Tl::RW, p.nheads, p.ngroups, p.batch, sms);
  const int unit_scales = std::is_same_v<CopyT, __nv_fp8_e4m3> ? shape.rows : 0;
  const VerifyPlan sp = verify_plan(p.buffer_len, N, TM, shape.rows, shape.units, sizeof(ReadT<StateT, CopyT>),
                                    sizeof(ActT), unit_scales);
  auto kernel = verify_kernel<StateT, ActT, N, TM, CopyT>;
  static const int overhead = block_smem_overhead(kernel);
  if (needs_smem_opt_in(sp.bytes, overhead)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sp.bytes);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.ngroups * shape.chunks, p.batch);
  kernel<<<grid, shape.warps * 32, sp.bytes, stream>>>(p, shape, sp);
  return cudaGetLastError();
}

// Host launch for one (state dtype, activation dtype, dstate, read copy) specialisation; params already
// validated. CopyT void: no read copy, p.mode picks the ReplaySSM verify or the snapshot path (snapshot.cuh);
// otherwise ReplaySSM verify only (validation refuses a copy on the snapshot path).
template <typename StateT, typename ActT, int N, typename CopyT>
cudaError_t launch_verify(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if constexpr (std::is_void_v<CopyT>) {
    if (p.mode != RSSM_MAMBA2_REPLAY) return launch_snapshot<StateT, ActT, N>(p, stream);
  }
  if (p.window <= 2) return launch_verify_window<StateT, ActT, N, 2, CopyT>(p, stream);
  if (p.window <= 4) return launch_verify_window<StateT, ActT, N, 4, CopyT>(p, stream);
  return launch_verify_window<StateT, ActT, N, kMaxWindow, CopyT>(p, stream);
}

}  // namespace mamba2
}  // namespace replayssm
