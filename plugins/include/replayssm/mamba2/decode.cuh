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
//
// Launch plans for a replay step (launch_decode below): the combined kernel (both routes in one launch, each unit
// owning its heads' cursor replicas), or the routes in output_only.cuh's mapping when the batch fills the GPU
// with its blocks: for the fp32 checkpoint one launch of output_only.cuh, flushing rows included; for an nvfp4
// read copy this kernel in flush-only mode first (flushing rows only, cursors untouched), then output_only.cuh for
// every other row and every cursor.
//
// Read copies (CopyT = __half, __nv_bfloat16, __nv_fp8_e4m3 or nvfp4x2; void: none). The copy has the checkpoint's
// layout [slots, H, P, N] and keeps the checkpoint's thread mapping, Tiling<StateT, N>: a thread's copy vectors
// are its checkpoint vectors narrowed (VEC elements of CopyT: 8 or 4 bytes instead of 16), so the flush writes
// exactly the copy elements the output-only route of the same thread will read, and neither route needs a
// second mapping or a shuffle. The price is narrower accesses on the non-flush read (4- or 8-byte cp.async per
// lane, still fully coalesced: a warp instruction covers whole rows); a separate 16-byte tiling for the copy
// would halve or quarter the copy instructions, left for when the benchmark shows the issue rate matters.
//   - The stages hold the copy tile (sizeof(CopyT) per element): the output-only route widens it to fp32 in
//     registers. fp8: y_row = scale_row * sum_n code_n C_n (the row scale factored out of the dot product; the
//     block's row scales are staged once in the prologue).
//   - A flush unit reads its checkpoint tile straight from global memory (16-byte loads issued back to back,
//     not through the stages): whether a unit flushes is known only once the cursor has landed, after the
//     first two stages were queued. Units 0 and 1 therefore always stage their copy tile (wasted on a flush
//     row: one copy tile, 1/L of the steps); later flush units stage nothing.
//   - The flush stores the checkpoint (StateT, as without a copy) and the copy, quantised from the same fp32
//     registers: fp16/bf16 round to nearest; fp8 takes the row's amax across the LPR lanes holding the row,
//     scale = max(amax * (1/448), FLT_MIN), code = e4m3_satfinite(v / scale), as quant.quantize_fp8_rows.
//
// nvfp4 read copy (CopyT = nvfp4x2; quant.py specifies the format): e2m1 codes two per byte (nvfp4.cuh's order)
// [slots, H, P, N/2], an e4m3 scale per 16 elements [slots, H, P, N/16] (read_block_scale) and an fp32 scale
// per 4 rows [slots, H, P/4] (read_scale). Same thread mapping as the other copies, with two differences:
//   - A thread's vector is VEC/2 bytes of codes (2 for an fp32 checkpoint), below the 4-byte minimum of
//     cp.async, so a warp stages its rows cooperatively: a warp's rows are RW x N = 1024 elements, 512
//     contiguous bytes of codes (16 per lane) and 64 bytes of block scales (16 per lane, lanes 0-3). A lane then
//     reads codes other lanes copied: the unit loop has a __syncwarp after the wait (data landed for every lane)
//     and before queueing the next copies into a stage (every lane done reading it).
//   - Flush: the block amax across the 16 / VEC lanes holding a block (shuffles), the group amax across the
//     whole warp (a warp's rows are whole groups of 4: RW is 4, 8 or 16 for every tiling), then
//     t = max(amax * (1/2688), FLT_MIN), b = e4m3(amax_block * (1/6) * (1 / t)), r = 1 / (b t) (0 where b t = 0),
//     code = e2m1(v * r) (nearest, ties to even, saturating; common/nvfp4.cuh, branch-free): the same fp32
//     operations in the same order as quant.quantize_nvfp4, so the copy of an fp32 checkpoint matches the
//     reference bit for bit. Two divisions per group of 4 rows and one per vector, none per element: a division
//     per element (IEEE, with its slow-path branch) made the encoder the nvfp4 flush's cost.
//   - Non-flush read: codes widen to fp32 exactly in registers (e2m1x2_scaled), y_row = t_row * sum_blocks
//     b * sum_n code_n C_n (block scales inside the lane's dot, the group scale, staged in the prologue, after
//     the reduce-scatter). Hopper has no fp4 arithmetic; the conversion is integer ops plus one f16x2 widen.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/dependent_launch.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/common/nvfp4.cuh"
#include "replayssm/common/read_copy.cuh"
#include "replayssm/mamba2/conventional.cuh"
#include "replayssm/mamba2/head_inputs.cuh"
#include "replayssm/mamba2/output_only.cuh"
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
  int cx;                              // [warps][kFlushChunk][rows per warp] fp32: a flushing warp's w_j x_j
  int coef;                            // [heads][L] fp32: w_j (B_j·C) by ring position (0 outside the window)
  int read_scale;                      // fp32 scales of the units' copy rows: fp8 [units][rows], nvfp4
                                       // [units][rows / 4] (else empty)
  int stage0, stage_bytes;             // the tile a unit reads (checkpoint, or its read copy): stage k at
                                       // stage0 + k * stage_bytes
  int bytes;
};

// The flush's records per chunk: a flushing warp forms w_j x_j at its rows for this many records at a time.
constexpr int kFlushChunk = 8;

// tile_bytes: bytes of one unit's staged tile (the checkpoint's, or the read copy's with its block scales);
// unit_scales: fp32 scales per unit of the read copy (fp8: rows, nvfp4: rows / 4, else 0).
inline SmemPlan smem_plan(int L, int N, int rows, int units, int heads, int tile_bytes, int act_bytes,
                          int stages, int unit_scales) {
  SmemPlan s{};
  SmemBump bump;  // consecutive 16-byte-aligned regions
  s.ring_B = bump.take(L * N * act_bytes);
  s.ring_x = bump.take(units * L * rows * act_bytes);
  s.x = bump.take(units * rows * act_bytes);
  s.z = bump.take(units * rows * act_bytes);
  s.ring_dt = bump.take(heads * round_up(L, 4) * 4);
  s.cursor = bump.take(L > 0 ? heads * RSSM_CURSOR_FIELDS * 4 : 0);
  s.w = bump.take(heads * L * 4);
  s.cx = bump.take(rows * kFlushChunk * 4);  // the unit's rows are the warps' rows
  s.coef = bump.take(heads * L * 4);
  s.read_scale = bump.take(units * unit_scales * 4);
  s.stage0 = bump.off;
  s.stage_bytes = round_up(tile_bytes, 16);
  s.bytes = s.stage0 + stages * s.stage_bytes;
  return s;
}

// Flush, nvfp4: stores a thread's fp32 state vectors s (Tiling Tl) as e2m1 codes at `codes` (the byte of the
// thread's first element), the e4m3 block scales of its vectors at `bscale` (the block of the thread's first
// element; written by the block's first lane) and the fp32 scales of the warp's row groups at `gscale` (the
// warp's first group; written by lane 0). All lanes of the warp take part (shuffles over the whole warp).
template <typename Tl>
__device__ __forceinline__ void store_read_copy_nvfp4(const float (&s)[Tl::KI][Tl::NV][Tl::VEC], uint8_t* codes,
                                                      uint8_t* bscale, float* gscale, int lane, int col_lane) {
  constexpr int VEC = Tl::VEC, NV = Tl::NV, KI = Tl::KI, LPR = Tl::LPR, RPI = Tl::RPI, N = Tl::ROW;
  constexpr int BL = kNvfp4Block / VEC;   // lanes holding one block
  constexpr int IPG = kNvfp4Rows / RPI;   // instructions (row groups of RPI) per group of 4 rows
  static_assert(kNvfp4Block % VEC == 0 && LPR % BL == 0, "a block lies within one row's lanes");
  static_assert(kNvfp4Rows % RPI == 0 && KI % IPG == 0, "a warp's rows are whole groups of 4");
  float amax[KI][NV];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      float a = 0.f;
#pragma unroll
      for (int e = 0; e < VEC; ++e) a = fmaxf(a, fabsf(s[i][v][e]));
      amax[i][v] = a;
    }
#pragma unroll
  for (int g = 0; g < KI / IPG; ++g) {
    float a = 0.f;
#pragma unroll
    for (int i = g * IPG; i < (g + 1) * IPG; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) a = fmaxf(a, amax[i][v]);
    const float t = fmaxf(group_max<32>(a) * (1.f / kNvfp4Range), FLT_MIN);
    const float inv_t = 1.f / t;
    if (lane == 0) gscale[g] = t;  // WRITES read_scale[slot, head, group]
#pragma unroll
    for (int i = g * IPG; i < (g + 1) * IPG; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        const int off = i * RPI * N + v * LPR * VEC;  // the vector's first element, from the thread's first
        const __nv_fp8_e4m3 b = from_float<__nv_fp8_e4m3>(group_max<BL>(amax[i][v]) * (1.f / 6.f) * inv_t);
        if (col_lane % BL == 0) bscale[off / kNvfp4Block] = b.__x;  // WRITES read_block_scale[slot, head, row, blk]
        const float d = to_float(b) * t;
        const float r = d > 0.f ? 1.f / d : 0.f;
        Packed<uint8_t, VEC / 2> out;
#pragma unroll
        for (int k = 0; k < VEC / 2; ++k)
          out.v[k] =
              static_cast<uint8_t>(pack_e2m1x2(e2m1_code(s[i][v][2 * k] * r), e2m1_code(s[i][v][2 * k + 1] * r)));
        *reinterpret_cast<Packed<uint8_t, VEC / 2>*>(codes + off / 2) = out;  // WRITES read_state[slot, head, row, :]
      }
  }
}

// nvfp4, output-only route: the lane's dot of one row's vectors (codes and block scales staged in shared
// memory at `codes` / `bscale`, the thread's first element) with C; the group scale is applied by the caller.
template <typename Tl>
__device__ __forceinline__ float lane_dot_nvfp4(const uint8_t* codes, const uint8_t* bscale, int i,
                                                const float (&Cc)[Tl::NV][Tl::VEC]) {
  constexpr int VEC = Tl::VEC, NV = Tl::NV, LPR = Tl::LPR, RPI = Tl::RPI, N = Tl::ROW;
  float acc = 0.f;
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const int off = i * RPI * N + v * LPR * VEC;
    const Packed<uint8_t, VEC / 2> c = *reinterpret_cast<const Packed<uint8_t, VEC / 2>*>(codes + off / 2);
    __nv_fp8_e4m3 b;
    b.__x = bscale[off / kNvfp4Block];
    float d = 0.f;
#pragma unroll
    for (int k = 0; k < VEC / 2; ++k) {
      const float2 w = e2m1x2_scaled(c.v[k]);
      d = fmaf(w.x, Cc[v][2 * k], d);
      d = fmaf(w.y, Cc[v][2 * k + 1], d);
    }
    acc = fmaf(to_float(b) * 16384.f, d, acc);  // 2^14: e2m1x2_scaled's factor
  }
  return acc;
}

// One batch row's block: (row b, group, chunk of units) with blockIdx.x giving the group and chunk.
template <typename StateT, typename ActT, int N, bool REPLAY, typename CopyT>
__device__ __forceinline__ void decode_row(const rssm_mamba2_decode_params& p, const Shape& shape, const SmemPlan& sp,
                                           const int b) {
  using Tl = Tiling<StateT, N>;
  using RT = ReadT<StateT, CopyT>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  constexpr int kMaxChunkHeads = kMaxUnits;
  constexpr bool kCopy = !std::is_void_v<CopyT>;                       // a read copy (replay only)
  constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;     // ... with a scale per state row
  constexpr bool kNvfp4 = std::is_same_v<CopyT, nvfp4x2>;      // ... nvfp4 (staged per warp)
  static_assert(!kNvfp4 || RW * N == 1024, "a warp's rows are 32 x kElemsPerThread elements");
  constexpr int kTileVecBytes = VEC * static_cast<int>(sizeof(RT));  // one vector of the staged tile
  static_assert(!kCopy || REPLAY, "read copies exist in replay mode only");
  static_assert(!kCopy || sizeof(RT) < sizeof(StateT), "a read copy is narrower than the checkpoint");

  extern __shared__ __align__(16) char smem[];
  __shared__ float s_dt[kMaxChunkHeads], s_A[kMaxChunkHeads], s_D[kMaxChunkHeads];  // the chunk's heads
  __shared__ float s_abar[kMaxChunkHeads];
  __shared__ int s_hist[kMaxChunkHeads], s_origin[kMaxChunkHeads];  // cursor of each chunk head
  __shared__ float s_bcpos[kMaxBufferLen];    // B·C of the ring record at each position
  __shared__ float s_bccur;                   // B·C of the current token

  const int H = p.nheads, P = p.head_dim, L = REPLAY ? p.buffer_len : 1, T = shape.tiles, TR = shape.rows;
  const int U = shape.units, S = shape.stages, TL = shape.tiles_log2;
  const int group = blockIdx.x / shape.chunks, chunk = blockIdx.x - group * shape.chunks;
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
  // Flush-only launch (nvfp4 copies; output_only.cuh has the other rows): decode_kernel passes only rows that
  // flush in this chunk (row_flushes read their cursors), so there is no second check here; the unit loop skips
  // the chunk's non-flushing heads.

  // Per-block bases (64-bit once); per-unit offsets from them are 32-bit (validate() bounds a slot's elements).
  const int64_t sh0 = static_cast<int64_t>(slot) * H + head0;
  StateT* const state_blk = static_cast<StateT*>(p.state) + sh0 * P * N;  // unit u's tile at (tile_base + u) TR N
  // The tile the output-only route reads (same layout and offsets as state_blk) and, fp8, its row scales
  // (unit u's rows at (tile_base + u) TR).
  RT* const read_blk = kCopy ? static_cast<RT*>(p.read_state) + sh0 * P * N : reinterpret_cast<RT*>(state_blk);
  float* const read_scale_blk = kRowScale ? p.read_scale + sh0 * P : nullptr;
  // nvfp4: codes (bytes) and block scales of (slot, head0), unit u's at ((tile_base + u) TR N) / 2 and / 16;
  // group scales, unit u's at (tile_base + u) TR / 4.
  uint8_t* const codes_blk = kNvfp4 ? static_cast<uint8_t*>(p.read_state) + sh0 * P * N / 2 : nullptr;
  uint8_t* const bscale_blk = kNvfp4 ? static_cast<uint8_t*>(p.read_block_scale) + sh0 * P * N / kNvfp4Block : nullptr;
  float* const gscale_blk = kNvfp4 ? p.read_scale + sh0 * P / kNvfp4Rows : nullptr;
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
  auto stage_tile = [&](int stage) { return reinterpret_cast<RT*>(smem + sp.stage0 + stage * sp.stage_bytes); };
  // Queues this thread's own vectors of unit u's read tile (checkpoint or copy) into `stage` (it reads back
  // exactly these).
  auto issue_tile = [&](int u, int stage) {
    if constexpr (kNvfp4) {  // the warp's rows, cooperatively: 16 bytes of codes per lane, of scales lanes 0-3
      char* st = smem + sp.stage0 + stage * sp.stage_bytes;
      const int e0 = (tile_base + u) * TR * N + warp * RW * N;  // the warp's first element
      cp_async<16>(st + (warp * RW * N) / 2 + lane * 16, codes_blk + e0 / 2 + lane * 16);
      if (lane < RW * N / kNvfp4Block / 16)
        cp_async<16>(st + (TR * N) / 2 + (warp * RW * N) / kNvfp4Block + lane * 16,
                     bscale_blk + e0 / kNvfp4Block + lane * 16);
    } else {
      const RT* gs = read_blk + ((tile_base + u) * TR * N + thread_off);
      RT* ss = stage_tile(stage) + thread_off;
#pragma unroll
      for (int i = 0; i < KI; ++i)
#pragma unroll
        for (int v = 0; v < NV; ++v) cp_async<kTileVecBytes>(ss + vec_step(i, v), gs + vec_step(i, v));
    }
  };


  // ---- Prologue, group 0: the block's small inputs. Unit u's rows of x, z and of every ring x record; the
  // chunk heads' rings of dt and one cursor replica each (that of the head's first unit in the chunk, which
  // this block owns); the group's ring of B records. The whole ring is copied, so that no copy waits for a
  // cursor.
  if (kRowScale || kNvfp4) {  // the units' row (fp8) or group (nvfp4) scales are consecutive
    const int per_unit = kNvfp4 ? TR / kNvfp4Rows : TR;
    const float* src = kNvfp4 ? gscale_blk + tile_base * per_unit : read_scale_blk + tile_base * TR;
    float* dst = reinterpret_cast<float*>(smem + sp.read_scale);
    for (int i = threadIdx.x; i < U * per_unit; i += blockDim.x) cp_async<4>(dst + i, src + i);
  }
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
  // Groups 1 and 2: the read tiles of units 0 and 1 (with a read copy: their copy tiles, whether or not the
  // unit turns out to flush; the cursor has not landed yet).
  issue_tile(0, 0);
  cp_async_commit();
  if (U > 1) issue_tile(1, 1);
  cp_async_commit();

  const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  float Bc[NV][VEC], Cc[NV][VEC];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    load_vec<ActT, VEC>(Bg + (v * LPR + col_lane) * VEC, Bc[v]);
    load_vec<ActT, VEC>(Cg + (v * LPR + col_lane) * VEC, Cc[v]);
  }
  if (threadIdx.x < heads) {  // the head's loads all go out before the softplus branch (head_inputs.cuh)
    const int head = head0 + threadIdx.x;
    const HeadInputs in = load_head_inputs<ActT>(p, b * p.dt_batch_stride + head * p.dt_head_stride, head);
    issue_loads_here();
    const float dt = processed_dt(p, in);
    s_dt[threadIdx.x] = dt;
    s_A[threadIdx.x] = in.A;
    s_D[threadIdx.x] = in.D;
    if (!REPLAY) s_abar[threadIdx.x] = expf(in.A * dt);  // the t = 1 weights: abar = exp(A dt), w_0 = dt
  }
  cp_async_wait_group<2>();  // group 0 has landed for this thread's copies
  __syncthreads();           // ... and for everyone's

  const ActT* rB_s = reinterpret_cast<const ActT*>(smem + sp.ring_B);
  float* const w_s = reinterpret_cast<float*>(smem + sp.w);
  float* const coef_s = reinterpret_cast<float*>(smem + sp.coef);
  float* const cx_w = reinterpret_cast<float*>(smem + sp.cx) + warp * (kFlushChunk * RW);  // this warp's slice
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
      const int hist = clamp_history(cur.x, L), origin = wrap_origin(cur.y, L);
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
    // nvfp4: lanes read what other lanes of the warp copied: all of the warp's copies have landed, and every
    // lane has finished unit u - 1 (whose stage the copies below overwrite).
    if constexpr (kNvfp4) __syncwarp();
    // The stage of unit u + 2 was last read, by this thread only (nvfp4: this warp only), in unit u - 1. With
    // a read copy, a unit that will flush stages nothing (its flush reads the checkpoint from global memory).
    if (u + 2 < U) {
      const bool flushes = s_hist[(tile_base + u + 2) >> TL] == L - 1;
      // Flush-only launch: a non-flush unit needs no tile either.
      if (!(kCopy && flushes) && !(shape.flush_only && !flushes)) issue_tile(u + 2, stage + 2 < S ? stage + 2 : stage + 2 - S);
    }
    cp_async_commit();

    const int uu = tile_base + u, hh = uu >> TL, tile = uu & (T - 1), row0 = tile * TR;
    const RT* ss = stage_tile(stage);
    const ActT* rx_s = reinterpret_cast<const ActT*>(smem + sp.ring_x) + u * L * TR;
    const ActT* x_s = reinterpret_cast<const ActT*>(smem + sp.x) + u * TR;
    const ActT* z_s = reinterpret_cast<const ActT*>(smem + sp.z) + u * TR;
    const float dt = s_dt[hh];
    const int hist = REPLAY ? s_hist[hh] : 0, origin = REPLAY ? s_origin[hh] : 0;
    const bool flush = !REPLAY || hist == L - 1;
    const int t = hist + 1;
    const float abar = s_abar[hh];
    if (REPLAY && shape.flush_only && !flush) {  // the output-only launch computes and writes this unit
      stage = stage + 1 < S ? stage + 1 : 0;
      continue;
    }

    // ---- Per-lane partial dots with C, reduce-scattered across each row's lanes.
    float part[KI];
    float yv;
    if (flush) {
      // S = abar S0 + sum_j (w_j x_j) B_jᵀ, stored; y = S·C.
      StateT* gstate = state_blk + (uu * TR * N + thread_off);
      float s[KI][NV][VEC];
      if constexpr (kCopy) {  // the stage holds the copy: the checkpoint comes from global memory
#pragma unroll
        for (int i = 0; i < KI; ++i)
#pragma unroll
          for (int v = 0; v < NV; ++v) load_vec<StateT, VEC>(gstate + vec_step(i, v), s[i][v]);
      } else {
#pragma unroll
        for (int i = 0; i < KI; ++i)
#pragma unroll
          for (int v = 0; v < NV; ++v) load_vec<StateT, VEC>(ss + thread_off + vec_step(i, v), s[i][v]);
      }
      scale_each(s, abar);
      // Records j = 0 .. t - 1 (the current token's at j = hist) in chunks of kFlushChunk: the warp first forms
      // w_j x_j at its RW rows for the chunk's records ([record][row] in its slice of cx), each value once per
      // warp instead of once per lane, then every record's products read them back; B_j comes from the ring
      // position, advanced with j. The same fp32 operations in the same order as before (w_j x, then one FMA
      // per record): the same bits.
      for (int j0 = 0; j0 < t; j0 += kFlushChunk) {
        const int pos0 = REPLAY ? ring_pos(origin, j0, L) : 0;  // j0 < t <= L
        __syncwarp();  // the previous chunk's (or unit's) products are read
        for (int e = lane; e < kFlushChunk * RW; e += 32) {
          const int jj = e / RW, r = e - jj * RW, j = j0 + jj;
          float v = 0.f;
          if (j < t) {
            const ActT* xr = j == hist ? x_s : rx_s + ring_pos(pos0, jj, L) * TR;
            v = (REPLAY ? w_s[hh * L + j] : dt) * to_float(xr[warp * RW + r]);
          }
          cx_w[e] = v;
        }
        __syncwarp();
        int pos = pos0;
        for (int jj = 0; jj < kFlushChunk && j0 + jj < t; ++jj) {
          float Bj[NV][VEC];
          if (j0 + jj == hist) {
#pragma unroll
            for (int v = 0; v < NV; ++v)
#pragma unroll
              for (int e = 0; e < VEC; ++e) Bj[v][e] = Bc[v][e];
          } else {
            const ActT* Bjs = rB_s + pos * N;
#pragma unroll
            for (int v = 0; v < NV; ++v) load_vec<ActT, VEC>(Bjs + (v * LPR + col_lane) * VEC, Bj[v]);
          }
          float cx[KI];
          if (RPI == 1) {
            load_vec<float, KI>(cx_w + jj * RW, cx);  // the thread's rows are the warp's (seg 0)
          } else {
#pragma unroll
            for (int i = 0; i < KI; ++i) cx[i] = cx_w[jj * RW + seg + i * RPI];
          }
#pragma unroll
          for (int i = 0; i < KI; ++i)
#pragma unroll
            for (int v = 0; v < NV; ++v)
#pragma unroll
              for (int e = 0; e < VEC; ++e) s[i][v][e] = fmaf(cx[i], Bj[v][e], s[i][v][e]);
          pos = pos + 1 == L ? 0 : pos + 1;
        }
      }
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        part[i] = lane_dot(s[i]);
#pragma unroll
        for (int v = 0; v < NV; ++v) store_stream(gstate + vec_step(i, v), pack<StateT, VEC>(s[i][v]));  // WRITES state
      }
      if constexpr (kNvfp4) {
        const int e0 = uu * TR * N + thread_off;
        store_read_copy_nvfp4<Tl>(s, codes_blk + e0 / 2, bscale_blk + e0 / kNvfp4Block,
                                  gscale_blk + (uu * TR + warp * RW) / kNvfp4Rows, lane, col_lane);
      } else if constexpr (kCopy) {
        store_read_copy<CopyT, Tl>(s, read_blk + (uu * TR * N + thread_off),
                                   kRowScale ? read_scale_blk + uu * TR + warp * RW + seg : nullptr, col_lane);
      }
      yv = reduce_scatter<KI, LPR>(part);
    } else {
      // y = abar (S0·C) + sum_j w_j (B_j·C) x_j; the SHARE lanes of a row split the window between them.
      if constexpr (kNvfp4) {
        const uint8_t* st = reinterpret_cast<const uint8_t*>(ss);
#pragma unroll
        for (int i = 0; i < KI; ++i)
          part[i] = lane_dot_nvfp4<Tl>(st + thread_off / 2, st + (TR * N) / 2 + thread_off / kNvfp4Block, i, Cc);
      } else {
#pragma unroll
        for (int i = 0; i < KI; ++i) {
          float s[NV][VEC];
#pragma unroll
          for (int v = 0; v < NV; ++v) load_vec<RT, VEC>(ss + thread_off + vec_step(i, v), s[v]);
          part[i] = lane_dot(s);
        }
      }
      yv = abar * reduce_scatter<KI, LPR>(part);
      // fp8 / nvfp4 copy: the row's (group's) scale, factored out of the dot product (row my_row of unit u).
      if constexpr (kRowScale) yv *= reinterpret_cast<const float*>(smem + sp.read_scale)[u * TR + my_row];
      if constexpr (kNvfp4) yv *= reinterpret_cast<const float*>(smem + sp.read_scale)[(u * TR + my_row) / kNvfp4Rows];
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
      // writes them), one lane each; a flush-only launch leaves them to the output-only launch.
      if (!shape.flush_only && warp == 0 && lane < RSSM_CURSOR_REPLICAS && (lane & (T - 1)) == tile)
        cursor_blk[(hh * RSSM_CURSOR_REPLICAS + lane) * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
    }
    stage = stage + 1 < S ? stage + 1 : 0;
  }
}

// Whether batch row b flushes in the block's chunk (any of its heads at history L-1; padding never does).
__device__ __forceinline__ bool row_flushes(const rssm_mamba2_decode_params& p, const Shape& shape, int b) {
  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return false;
  const int TL = shape.tiles_log2, T = shape.tiles, L = p.buffer_len;
  const int group = blockIdx.x / shape.chunks, unit0 = (blockIdx.x - group * shape.chunks) * shape.units;
  const int head0 = group * (p.nheads / p.ngroups) + (unit0 >> TL), tile_base = unit0 & (T - 1);
  const int heads = ((tile_base + shape.units - 1) >> TL) + 1;
  // (every head's history loaded before any is used: one round trip, not one per head; heads <= units)
  int hist[kMaxUnits];
#pragma unroll
  for (int h = 0; h < kMaxUnits; ++h) {
    const int u_first = max((h << TL) - tile_base, 0), tile = (tile_base + u_first) & (T - 1);
    hist[h] = h < heads ? p.cursor[((static_cast<int64_t>(slot) * p.nheads + head0 + h) * RSSM_CURSOR_REPLICAS + tile) *
                                       RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY]
                        : 0;
  }
  bool flushes = false;
#pragma unroll
  for (int h = 0; h < kMaxUnits; ++h) flushes |= h < heads && clamp_history(hist[h], L) == L - 1;
  return flushes;
}

// The decode launch. Normally one block per (batch row, group, chunk). A flush-only launch (replay, the flush
// route of a step whose other rows go to output_only.cuh) has gridDim.y blocks per (group, chunk) for the whole
// batch: each block finds the batch's flushing rows (in batch order, blockDim.x rows at a time) and takes the k-th
// of them for k = blockIdx.y mod gridDim.y. Few rows flush in a step (1/L of them with staggered phases), so the
// launch is as short as those rows' work allows instead of a grid of blocks that mostly find nothing to do.
// Blocks per multiprocessor the decode kernel's registers are bounded for: 2; 3 with an nvfp4 copy (80 registers,
// a few bytes of spills), whose flush-only launch then leaves room on the multiprocessors for the output-only launch
// that follows it (H200, Super L16, nvfp4 amortised, with the B / L row plan below: b256 174 us vs 179.5 at 2,
// b512 323 vs 339; fp16 copies lost with 3: A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200).
template <typename CopyT>
constexpr int kDecodeMinBlocks = std::is_same_v<CopyT, nvfp4x2> ? 3 : 2;

template <typename StateT, typename ActT, int N, bool REPLAY, typename CopyT>
__global__ void __launch_bounds__(kMaxWarps * 32, kDecodeMinBlocks<CopyT>)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const Shape shape, const SmemPlan sp) {
  if (!REPLAY || !shape.flush_only) {
    decode_row<StateT, ActT, N, REPLAY, CopyT>(p, shape, sp, blockIdx.y);
    return;
  }
  // First the whole batch's scan: the rows that flush for this block's heads (row_flushes reads their cursors), in
  // batch order; this block takes those of rank k = blockIdx.y mod gridDim.y and keeps them, in rank order, in
  // s_rows (at most ceil(batch / gridDim.y) rows: launch_mode plans gridDim.y >= batch / L rows, and L <= 64).
  __shared__ int s_rows[kMaxWarps * 32];
  __shared__ int s_warp_rows[kMaxWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int Y = static_cast<int>(gridDim.y), y = static_cast<int>(blockIdx.y);
  // The output-only launch after this one (output_only.cuh, a programmatic dependent) may start once every block
  // of this launch has: it advances the cursors of rows that do not flush, which the scans below may read before or
  // after, alike (a block of a row with a head that flushes or reaches history L - 1 waits for this launch to
  // finish before it writes a cursor).
  allow_dependent_launch();
  int seen = 0;  // flushing rows before this piece of the batch
  for (int b0 = 0; b0 < p.batch; b0 += blockDim.x) {
    const int bb = b0 + threadIdx.x;
    const bool f = bb < p.batch && row_flushes(p, shape, bb);
    const unsigned ballot = __ballot_sync(0xffffffffu, f);
    if (lane == 0) s_warp_rows[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < nwarps; ++w) {
      before += w < warp ? s_warp_rows[w] : 0;
      total += s_warp_rows[w];
    }
    const int rank = seen + before + __popc(ballot & ((1u << lane) - 1u));
    if (f && rank % Y == y && rank / Y < kMaxWarps * 32) s_rows[rank / Y] = bb;
    seen += total;
    __syncthreads();  // s_warp_rows is rewritten by the next piece; s_rows complete after the last
  }
  const int mine = min(seen > y ? (seen - y + Y - 1) / Y : 0, kMaxWarps * 32);
  for (int i = 0; i < mine; ++i) {
    decode_row<StateT, ActT, N, REPLAY, CopyT>(p, shape, sp, s_rows[i]);
    cp_async_wait_group<0>();
    __syncthreads();  // the row's shared memory is free for the next one
  }
}

template <typename StateT, typename ActT, int N, bool REPLAY, typename CopyT>
static cudaError_t launch_mode(const rssm_mamba2_decode_params& p, cudaStream_t stream, bool flush_only = false) {
  using Tl = Tiling<StateT, N>;
  int sms = 0;
  const cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const int L = REPLAY ? p.buffer_len : 0;
  constexpr bool kNvfp4 = std::is_same_v<CopyT, nvfp4x2>;
  auto plan = [&](const Shape& s) {
    // nvfp4 stage: the codes, then the block scales (each a multiple of 16 bytes: s.rows * N >= 256).
    const int tile_bytes = kNvfp4 ? s.rows * N / 2 + s.rows * N / kNvfp4Block
                                  : s.rows * N * static_cast<int>(sizeof(ReadT<StateT, CopyT>));
    const int unit_scales = kNvfp4 ? s.rows / kNvfp4Rows : std::is_same_v<CopyT, __nv_fp8_e4m3> ? s.rows : 0;
    return smem_plan(L, N, s.rows, s.units, std::max(1, s.units >> s.tiles_log2), tile_bytes, sizeof(ActT),
                     s.stages, unit_scales);
  };
  const auto kernel = decode_kernel<StateT, ActT, N, REPLAY, CopyT>;
  static const int overhead = block_smem_overhead(kernel);
  // Flush-only: blocks for B / L rows per (group, chunk) (the rows that flush in a step with staggered phases),
  // and the launch shape of that many rows (2 B / L: b256 179.5 us vs 174 with kDecodeMinBlocks 3).
  long long rows = flush_only ? std::min<long long>(p.batch, std::max(1, (p.batch + L - 1) / std::max(L, 1)))
                              : p.batch;
  Shape shape = launch_shape(p.head_dim, Tl::RW, p.nheads, p.ngroups, rows, sms);
  shape.flush_only = flush_only;
  if (flush_only) {
    // At most one wave of blocks: the output-only launch may start only once every block of this one has started,
    // so a second wave would hold it back until the first wave's scans end, even when no row flushes (a block then
    // takes its share of the flushing rows in turn, as the blocks of later waves would have). At least
    // ceil(batch / s_rows' capacity) blocks per (group, chunk).
    // (the occupancy query once per device, launch configuration and host thread, not at every step)
    thread_local int cached_device = -1, cached_threads = -1, cached_bytes = -1, per_sm = 0;
    int device = 0;
    cudaError_t occ = cudaGetDevice(&device);
    if (occ != cudaSuccess) return occ;
    const int threads = shape.warps * 32, bytes = plan(shape).bytes;
    if (device != cached_device || threads != cached_threads || bytes != cached_bytes) {
      occ = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, bytes);
      if (occ != cudaSuccess) return occ;
      cached_device = device;
      cached_threads = threads;
      cached_bytes = bytes;
    }
    const long long wave = std::max(1LL, static_cast<long long>(per_sm) * sms / (p.ngroups * shape.chunks));
    rows = std::max(std::min(rows, wave), (static_cast<long long>(p.batch) + kMaxWarps * 32 - 1) / (kMaxWarps * 32));
  }
  return launch_unit_pipeline(kernel, overhead, p, shape, p.ngroups, plan, stream, rows);
}

// Whether the replay step takes output_only.cuh's mapping (the "split" routes), and with how many heads per block
// (0: the combined kernel). It exists for the formats that route reads (the fp32 checkpoint, or an nvfp4 copy)
// with bf16 / fp16 activations and d_state 128; output_only::heads_per_block() gives the most heads a block can
// take. Measured on the H200 (benchmarks/routes_ab.md):
//   - fp32 checkpoint: one launch, flushing rows rebuilt in it. A flushing block takes ~2x a reading block, so the
//     last blocks to run decide the step: blocks of at most 8 heads (shorter flush blocks), 4 while 8 would give
//     fewer than 6 blocks per multiprocessor (12  the tail launch below),
//     taken from 6 blocks per multiprocessor up (Super shape: 4 heads at b32 / b48, 8 from b50, with a tail launch
//     to b131); smaller batches keep the combined kernel, whose flush units are finer. H200,
//     one run, Super L16 amortised, split with 8 / 4 heads against the combined kernel: b32 60.0 / 53.2
//     vs 56.2 us, b64 97.6 / 93.3 vs 98.9, b128 170.2 / 173.0 vs 181.5; b256 with 8 / 4 / 16 heads 315.2 / 333.6
//     / 351.6 (H200). Until then the route started at 24 blocks per multiprocessor (b >= 256).
//   - nvfp4 copy: a flush-only launch of decode_kernel first, then the output-only kernel with the most heads per
//     block, taken at two or more blocks per multiprocessor.
// RSSM_ROUTES and RSSM_OO_HEADS force either route or the heads per block (common/decode_tiling.cuh,
// split_route_heads, which both families share).
// Batches of a warp's rows asked of L2 ahead of its register loads (output_only_kernel's `ahead`): none. H200, one
// run (RSSM_OO_PREFETCH 0 / 1 / 2 / 3), Super L16 amortised at b256: 361.4 / 365.6 / 393.2 / 407.7 us
// (H200).
constexpr int kOutputOnlyPrefetch = 0;
// Fp32Read: the first batch of a warp's rows via L2 (output_only_kernel's kFirstL2) when a warp has at least this
// many batches and the launch at least kFirstL2MinBlocksPerSm blocks per multiprocessor. H200, one
// run, Super L16 amortised, first batch via L2 against registers: b256 308.7 / 308.9 vs 312.4 / 311.9 us, b512 604.3
// vs 610.5 (4 batches per warp); b64 91.8 vs 90.3 (2 batches: the first batch's register loads are what hides the
// prologue there). (8 lanes per row; b64 in 8-head blocks, 4 batches per warp, with a tail
// launch), one run: b64 85.0 in registers against 87.0 / 86.6 via L2 (non-flush 74.5 against 79.5; all-flush 171.5
// against 166.0); b128 (15.5 blocks per multiprocessor) 160.4 in registers against 159.8 via L2, b256 309.0 against
// 307.9. So a launch below 12 blocks per multiprocessor (Super: b50 to b98) keeps the first batch in registers.
// RSSM_OO_FIRST_L2 overrides.
constexpr int kFirstL2MinBatches = 4;
constexpr int kFirstL2MinBlocksPerSm = 12;
template <typename Fmt>
bool output_only_first_l2(const rssm_mamba2_decode_params& p, int hpb, int sms) {
  const int batches = hpb * p.head_dim / Fmt::kWarps / (Fmt::kRows * Fmt::kBatch);
  const bool big = static_cast<long long>(p.batch) * (p.nheads / hpb) >= static_cast<long long>(kFirstL2MinBlocksPerSm) * sms;
  return output_only_first_batch_l2(Fmt::kFlushRows && batches >= kFirstL2MinBatches && big);
}
// nvfp4 copy: the output-only launch as a programmatic dependent of the flush-only launch before it (it starts
// while the flush launch's last blocks run; common/dependent_launch.cuh). H200, Super b256 L16, nvfp4 amortised, two
// passes in one run: 220.0 / 219.7 us against 223.5 / 223.5 with two plain launches (false); fp16 copies unaffected.
// The flush-only blocks allow it before their scans (after them until then), the output-only
// blocks of a row with a head at L - 2 or L - 1 waiting for the flush-only launch before they write cursors. H200,
// Super L16, one run, two passes: non-flush b64 / b256 / b512 25.9 / 73.5 / 138.2 us against 26.9-27.0 / 75.2-75.4 /
// 142.4; amortised level (48.7 / 133.0 / 242.8 against 48.8 / 133.0 / 242.5; A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200).
constexpr bool kNvfp4DependentLaunch = true;
template <typename StateT, typename ActT, int N, typename CopyT>
constexpr bool kSplitRoutes = N == output_only::kN && sizeof(ActT) == 2 &&
                              (std::is_same_v<CopyT, nvfp4x2> || (std::is_void_v<CopyT> && std::is_same_v<StateT, float>));
constexpr int kFlushBlockHeads = 8;         // fp32: most heads per block
constexpr int kFlushBlockMinHeads = 4;      // fp32: fewest heads per block (small launches)
constexpr int kFlushFillBlocksPerSm = 6;    // fp32: heads per block halved while the launch has fewer per SM
constexpr int kFlushBlocksPerSm = 6;        // fp32: fewest blocks per multiprocessor for the split
// fp32: the tail launch (output_only::launch) for blocks of 8 heads below 16 blocks per multiprocessor, two rounds
// of resident blocks in blocks of 4 heads (Super: 16 rows from b50 to b131; 4-head blocks keep one launch: tail
// blocks of 2 heads cost Mamba-2's prologue too much). H200, Super L16 b64, one run: 4-head blocks (the policy
//  8 heads below 12 blocks per multiprocessor) 90.6 us; 8-head blocks
// with 16 / 32 tail rows 88.0 / 89.3; 4-head blocks with 8 / 16 / 32 tail rows of 2-head blocks 92.1 / 95.0 / 99.9
// against 91.0 (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200).
constexpr TailPolicy kFlushTail{8, 16, 2, output_only::kBlocksPerSm<output_only::Fp32Read>};
template <typename Fmt>
int output_only_heads(const rssm_mamba2_decode_params& p, int hpb, int sms) {
  const SplitRoutePolicy policy =
      Fmt::kFlushRows ? SplitRoutePolicy{kFlushBlockHeads, kFlushBlocksPerSm, true, kFlushBlockMinHeads,
                                         kFlushFillBlocksPerSm}
                      : SplitRoutePolicy{output_only::kMaxHeads, 2, true};
  return split_route_heads(hpb, p.head_dim, output_only::kRowQuantum<Fmt>, p.batch, p.nheads, sms, policy);
}

// The rows of the step's tail launch (fp32 reads only; output_only::launch).
template <typename Fmt>
int output_only_tail(const rssm_mamba2_decode_params& p, int hpb, int sms) {
  if constexpr (!Fmt::kFlushRows) return 0;
  return tail_rows_by_policy(p.batch, p.nheads, hpb, p.head_dim, output_only::kRowQuantum<Fmt>, sms, kFlushTail);
}

// The split routes' launches with read format Fmt: for an nvfp4 copy the flush-only launch, then the output-only
// launch (and its tail, fp32 reads). `taken` false: the route does not take this step (the caller launches the
// combined kernel).
template <typename StateT, typename ActT, int N, typename CopyT, typename Fmt>
cudaError_t launch_split(const rssm_mamba2_decode_params& p, int smem_per_sm, int sms, cudaStream_t stream,
                         bool& taken) {
  const int hpb = output_only_heads<Fmt>(p, output_only::heads_per_block<ActT, Fmt>(p, smem_per_sm), sms);
  taken = hpb > 0;
  if (!taken) return cudaSuccess;
  if constexpr (!Fmt::kFlushRows) {  // flush rows first (cursors untouched), then every other row and cursor
    const cudaError_t err = launch_mode<StateT, ActT, N, true, CopyT>(p, stream, /*flush_only=*/true);
    if (err != cudaSuccess) return err;
  }
  // The tail launch's blocks (half the heads, so half the batches per warp) decide their first batch's way
  // by their own batches per warp, and take L2 only where the first launch does.
  const bool first_l2 = output_only_first_l2<Fmt>(p, hpb, sms);
  const bool first_l2_tail = first_l2 && hpb >= 2 && output_only_first_l2<Fmt>(p, hpb / 2, sms);
  return output_only::launch<ActT, Fmt>(p, hpb, output_only_prefetch_batches(kOutputOnlyPrefetch), first_l2,
                                        first_l2_tail, output_only_tail<Fmt>(p, hpb, sms), stream,
                                        /*after_flush_launch=*/!Fmt::kFlushRows && kNvfp4DependentLaunch);
}

// nvfp4 copy: the output-only kernel in 80 registers, six blocks per multiprocessor and no staged ring of x records
// (output_only::Nvfp4Lean) from kNvfp4LeanMinBlocksPerSm blocks of the most heads per multiprocessor, in 128
// registers, four blocks, the ring staged (Nvfp4Mma) below. H200, Super L16, one run (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200):
// non-flush b256 86.5 / 86.8 us against 100.4 / 100.8, b512 164.7 / 164.6 against 188.0 / 187.9, amortised b256
// 145.2 / 145.4 against 159.0 / 159.4; but amortised b64 56.7 / 56.9 against 51.3 / 51.2 and b128 90.3 / 90.5 against
// 90.9 / 91.0 (fewer, larger waves). RSSM_NVFP4_LEAN=0 / 1 overrides (A/B runs).
constexpr int kNvfp4LeanMinBlocksPerSm = 12;
inline bool nvfp4_lean(const rssm_mamba2_decode_params& p, int sms) {
  if (const char* v = std::getenv("RSSM_NVFP4_LEAN")) return std::atoi(v) != 0;
  const int hpg = p.nheads / p.ngroups, blocks_per_group = (hpg + output_only::kMaxHeads - 1) / output_only::kMaxHeads;
  return static_cast<long long>(p.batch) * p.ngroups * blocks_per_group >=
         static_cast<long long>(kNvfp4LeanMinBlocksPerSm) * sms;
}

// Host launch for one (state dtype, activation dtype, dstate, read copy) specialisation; params already
// validated. CopyT void: no read copy, both modes; otherwise replay mode only (validation refuses the rest).
template <typename StateT, typename ActT, int N, typename CopyT>
cudaError_t launch_decode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if constexpr (std::is_void_v<CopyT>) {
    // The conventional step: one warp per tile of state rows (mamba2/conventional.cuh), bit-identical to
    // launch_mode<..., false, void>, which the replay kernel's L = 1 semantics are tested against.
    if (p.mode != RSSM_MAMBA2_REPLAY) return launch_conventional_warp<StateT, ActT, N>(p, stream);
    // The latency route (params.h latency_route_bytes): a step small enough to be latency-bound flushes every
    // row in the conventional kernel's mapping (validation checked the state dtype, the copy and the shape).
    if constexpr (std::is_same_v<StateT, float>)
      if (p.latency_route_bytes > 0 && latency_route_fits(p.head_dim, N) &&
          static_cast<int64_t>(p.batch) * p.nheads * p.head_dim * N * 4 <= p.latency_route_bytes)
        return launch_conventional_warp<StateT, ActT, N, true>(p, stream);
  }
  if constexpr (kSplitRoutes<StateT, ActT, N, CopyT>) {
    int smem_per_sm = 0, sms = 0;
    cudaError_t err = device_smem_per_sm(smem_per_sm);
    if (err == cudaSuccess) err = device_sms(sms);
    if (err != cudaSuccess) return err;
    bool taken = false;
    if constexpr (std::is_void_v<CopyT>)
      err = launch_split<StateT, ActT, N, CopyT, output_only::Fp32Read>(p, smem_per_sm, sms, stream, taken);
    else if (nvfp4_lean(p, sms))
      err = launch_split<StateT, ActT, N, CopyT, output_only::Nvfp4Lean>(p, smem_per_sm, sms, stream, taken);
    else
      err = launch_split<StateT, ActT, N, CopyT, output_only::Nvfp4Mma>(p, smem_per_sm, sms, stream, taken);
    if (err != cudaSuccess || taken) return err;
  }
  return launch_mode<StateT, ActT, N, true, CopyT>(p, stream);
}

}  // namespace mamba2
}  // namespace replayssm
