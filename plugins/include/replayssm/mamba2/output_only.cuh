// Mamba-2 ReplaySSM: the replay step's rows in the read route's own mapping. docs/mamba2.md has the maths,
// the measurements that chose it. The fp32 checkpoint (Fp32Read) takes every row here, flushing
// ones included; with an nvfp4 read copy (Nvfp4Mma, Nvfp4Lean) flushing rows are skipped: decode.cuh's
// decode_kernel, in flush-only mode, wrote them in a launch before this one (its quantiser works in the unit
// pipeline's mapping).
//
// Why a kernel of its own: the flush route needs the checkpoint in the unit pipeline's thread mapping (a thread
// owns whole 16-byte vectors of its rows to rebuild and store them), and the combined kernel made the
// output-only route live with that mapping, its per-unit prologue and its per-row epilogue. This route only reads:
//   - One block per (batch row, group, chunk of `hpb` heads of the group). The prologue stages what depends on the
//     ring (the group's B records, the chunk heads' x records; Nvfp4Lean reads the window's x records from global
//     memory instead), computes B_j·C and the window weights once, then
//     the part of each row's output that does not depend on the checkpoint, once per row:
//         pre[r] = D x[r] + sum_pos coef_pos x_pos[r]   (coef_pos = w_j (B_j·C) by ring position, 0 outside)
//         gate[r] = silu(z[r])
//     and writes the current x into its ring record (coalesced, once per head).
//   - Each warp then streams its rows of the read tile: y[r] = (abar (S0·C)[r] + pre[r]) gate[r], the lanes of
//     a row (Fmt::kLanesPerRow: 8 for Fp32Read, 4 for the nvfp4 formats) summing their partials with shuffles. The
//     first rows' loads are issued before the prologue (they depend on the slot only), so the prologue's latency
//     hides behind them.
//   - The nvfp4 formats take the rows first: with its B fragments built from C in registers, each warp streams its
//     rows (loading each step's successor into the registers it frees) and keeps every row's dot in shared memory;
//     then the ring prologue above, whose loads have arrived meanwhile, and per lane a few consecutive rows of a
//     head: pre, the gate and y together. (H200, Super b256 L16, one run: non-flush 78.2 / 78.1 us against 85.6 /
//     86.0 with the prologue first; A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200.)
//   - A flushing head's rows (Fp32Read), in the same mapping: S = abar S0 + sum_j (w_j x_j) B_j at the lane's 16
//     columns (the group's B records widened to fp32 in shared memory once per block), stored in place, then
//     y = S·C + D x, gated. The same fp32 operations in the same order as decode.cuh's flush route, so the
//     checkpoint is bit-identical to the combined kernel's; each block owns its heads' cursors, so both routes
//     run in one launch with nothing racing on a cursor.
//   - The nvfp4 formats skip a flushing head's rows (the flush launch wrote them). This launch writes every head's
//     cursor (history + 1, or 0 for a flush head): the flush launch leaves the cursor alone so that both launches
//     see the same history.
// Read formats (Fmt):
//   - Fp32Read: the fp32 checkpoint; 8 lanes per row (4 before, as GDN's output-only kernel),
//     lane (h, cl) holding the 16 columns 16 m + 4 cl + e of the vectors m = 2 q + h (q < 4, e < 4), so that the
//     eight lanes of a row read 128 contiguous bytes per load instruction.
//   - Nvfp4Mma / Nvfp4Lean: the nvfp4 read copy on the tensor cores (mma.m16n8k16, codes widened to fp16; described
//     below), in 128 or 80 registers (decode.cuh nvfp4_lean chooses).
// Same results as the combined kernel's output-only rows up to the order of fp32 sums; same writes.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/dependent_launch.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/common/mma.cuh"
#include "replayssm/common/nvfp4.cuh"
#include "replayssm/mamba2/head_inputs.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {
namespace output_only {

constexpr int kN = 128;           // d_state of this route (others take the combined kernel)
// Warps per block: a read format's kWarps (Fp32Read 8, Nvfp4Mma 4); blocks per multiprocessor planned for: its
// kBlocksPerSm (16 warps, 128 registers; Nvfp4Lean 24 warps, 80 registers). The row quantum follows the warps: a
// block's rows (heads x P) are a multiple, whole 16-row steps per warp.
template <typename Fmt>
constexpr int kBlocksPerSm = Fmt::kBlocksPerSm;
template <typename Fmt>
constexpr int kRowQuantum = 16 * Fmt::kWarps;
constexpr int kMaxHeads = 16;     // heads per block
constexpr int kMaxLen = 32;       // L of this route (one lane per ring record in the weights' scan)

// Shared memory of one block, byte offsets (each 16-byte aligned).
struct Smem {
  int ring_B, ring_x, ring_dt, x, z, C, coef, gscale, pre, gate, w, B32, bytes;
};
// Fmt::kFlushRows: the block rebuilds flushing heads' rows itself (Fp32Read), which needs w_j by record and the B
// records in fp32. Fmt::kRingInSmem: the heads' ring of x records is staged (else the window sums read it from
// global memory).
template <typename Fmt>
__host__ __device__ inline Smem smem_layout(int L, int heads, int P, int act_bytes) {
  constexpr bool flush_rows = Fmt::kFlushRows, ring_x = Fmt::kRingInSmem;
  Smem s{};
  SmemBump bump;  // consecutive 16-byte-aligned regions
  s.ring_B = bump.take(L * Fmt::kRingBStride * act_bytes);  // [L][N] the group's ring of B records (row stride)
  s.ring_x = bump.take(ring_x ? heads * L * P * act_bytes : 0);  // [heads][L][P] the chunk heads' ring of x
  s.ring_dt = bump.take(heads * round_up(L, 4) * 4);  // [heads][round_up(L, 4)] their ring of dt (fp32)
  s.x = bump.take(heads * P * act_bytes);           // [heads * P]
  s.z = bump.take(heads * P * act_bytes);           // [heads * P]
  s.C = bump.take(kN * 4);                          // [N] fp32
  s.coef = bump.take(heads * L * 4);                // [heads][L] w_j (B_j·C) by ring position
  s.gscale = bump.take(heads * P);  // [heads * P / kNvfp4Rows] fp32 group scales (nvfp4; 4 rows)
  s.pre = bump.take(heads * P * 4);                 // [heads * P] D x + the window's sum; nvfp4: the rows' dots
  s.gate = bump.take(flush_rows ? heads * P * 4 : 0);  // [heads * P] silu(z), or 1 (Fp32Read)
  s.w = bump.take(flush_rows ? heads * L * 4 : 0);  // [heads][L] w_j by record j (flush rows)
  s.B32 = bump.take(flush_rows ? (L + 1) * kN * 4 : 0);  // [L + 1][N] fp32 B records by position, the current at L
  s.bytes = bump.off;
  return s;
}

// ---- Read formats. A warp step covers kRows rows (4: 8 lanes per row; 16: the MMA tile, rows g and g + 8 of lane
// (g, c), 4 lanes per row), kRowsPerLane of them per lane (row lane / kLanesPerRow + (kRows / kRowsPerLane) i); a
// row's kLanesPerRow lanes are consecutive, so its partials sum with log2(kLanesPerRow) shuffles (row_sum).
// lane_base() takes the warp's first row (a global row index: (slot, head, row) flattened) and load() a warp step
// from it; dot() gives the lane's partial dots (nvfp4: block scales applied; the group scale, 2^6 / sC and abar
// come after the rows' sums, as one factor per group of 4 rows in the rows' loop after the ring prologue).

struct Fp32Read {
  static constexpr int kLanesPerRow = 8, kRows = 32 / kLanesPerRow, kRowsPerLane = 1, kBatch = 16 / kRows;
  static constexpr int kWarps = 8, kBlocksPerSm = 2;
  static constexpr bool kFlushRows = true;  // flushing heads' rows are rebuilt here
  static constexpr bool kRingInSmem = true;  // the window sums read the staged ring of x records
  static constexpr int kRingBStride = kN;  // elements per staged ring B record (read a record per warp)
  // Lane (h, cl) = (lane / 4 % 2, lane % 4) of a row holds vector m = 2 q + h (float4 index 4 m + cl of the row) as
  // v[q]: vector q of the lane is float4 index 8 q + lane % 8.
  struct Regs {
    float4 v[4];
  };
  struct Ctx {
    float C[16];
  };
  __device__ static Ctx context(const float* C_s, int lane) {
    Ctx c;
#pragma unroll
    for (int k = 0; k < 16; ++k) c.C[k] = C_s[(k / 4) * 32 + (lane % 8) * 4 + k % 4];
    return c;
  }
  struct Lane {
    const float4* src;  // the lane's first vector of its first row
  };
  __device__ static Lane lane_base(const rssm_mamba2_decode_params& p, int64_t row0, int lane) {
    return {reinterpret_cast<const float4*>(static_cast<const float*>(p.state) + (row0 + lane / kLanesPerRow) * kN) +
            lane % kLanesPerRow};
  }
  __device__ static Regs load(const Lane& l, int step) {
    Regs r;
    const float4* src = l.src + step * (kRows * kN / 4);
#pragma unroll
    for (int q = 0; q < 4; ++q) r.v[q] = __ldcs(src + q * 8);
    return r;
  }
  // L2 prefetch of `rows` consecutive rows from row0 (see the kernel's `ahead`).
  __device__ static void prefetch(const rssm_mamba2_decode_params& p, int64_t row0, int rows) {
    prefetch_l2(static_cast<const float*>(p.state) + row0 * kN, rows * kN * 4);
  }
  __device__ static void dot(const Regs& r, const Ctx& c, int, float (&part)[1]) {
    float d = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      d = fmaf(r.v[q].x, c.C[4 * q], d);
      d = fmaf(r.v[q].y, c.C[4 * q + 1], d);
      d = fmaf(r.v[q].z, c.C[4 * q + 2], d);
      d = fmaf(r.v[q].w, c.C[4 * q + 3], d);
    }
    part[0] = d;
  }
};

// nvfp4 read copy (quant.py's format: e2m1 codes two per byte, an e4m3 scale per 16 elements, an fp32 scale per
// 4 rows) on the tensor cores, mma.m16n8k16 with fp16 operands and fp32 accumulation (common/mma.cuh):
//   - A: a code's magnitude bits go to bits 2-4 of an e4m3 byte and its sign to bit 7, a few integer operations per
//     word of 8 codes (the e4m3 value is the e2m1 value times 2^-6, exactly); the hardware widens two e4m3 bytes
//     to an fp16 pair in one instruction. (Hopper has no fp8 mma.sync: an e4m3 m16n8k32 compiles to these same
//     widenings, the B operand's too at every call, and two fp16 MMAs into fresh accumulators added with fp32
//     adds; issuing the fp16 MMAs here keeps B widened once per warp and accumulates in the tensor core.)
//   - B: C sC in fp16, sC a power of two putting max |C| at most 2^15: exact for a bf16 C (and an fp16 one down
//     to fp16's subnormal range). The block scales differ per 16 columns and per row, so they apply to D.
//   - Lane (g, c) loads 16 bytes of codes of rows g and g + 8 (word q: columns 32 c + 8 q + j, element j) and the
//     block-scale bytes 2 c, 2 c + 1 of both rows. k is permuted freely (only A and B see it): MMA (q, par), for
//     word q and parity par, takes at lane (g, c)'s k slots 2 c, 2 c + 1, 2 c + 8, 2 c + 9 the elements par,
//     2 + par, 4 + par, 6 + par of its word q, all in block n = 2 c + q / 2 of the row, and B column n holds C at
//     lane c's k slots in that MMA and 0 elsewhere: one accumulator, D[row][n] the row's dot over block n, so that
//     lane (g, c) ends with blocks 2 c and 2 c + 1 of rows g and g + 8, the blocks of its two scale bytes. (Until
//     columns 4..7 were 0 and two accumulators held blocks 2 n and 2 n + 1: 8 block-scale
//     products per lane and step against 4.)
// The products are exact and summed in the tensor core's fp32 accumulator: the result differs from an fp32 FMA
// chain over the dequantised copy by the order (and accumulator rounding) of the sum.
//
// kLean (Nvfp4Lean): 80 registers (batches of three steps) for six blocks of four warps per multiprocessor, and no ring
// of x records in shared memory (the window sums read the window's records from global memory, asked of L2 once the
// cursor is known, 16 bytes per lane and record): the shared memory of a 16-head block drops from ~53 to ~21 KB.
// Otherwise (Nvfp4Mma) 128 registers, batches of four steps, four blocks per multiprocessor, the whole ring staged.
template <bool kLean>
struct Nvfp4MmaT {
  // Staged ring B records padded by 16 bytes, so that bc_ring_mma's fragment loads (lane (g, t): word t of rows g
  // and g + 8) fall in 32 distinct banks: with 256-byte rows the eight rows of a load shared a bank, an 8-way
  // conflict (H200, Super L16, non-flush b256 72.1 against 72.9-73.1 us, b512 133.3 against
  // 137.0; A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200).
  static constexpr int kRingBStride = kN + 8;
  static constexpr int kLanesPerRow = 4, kRows = 16, kRowsPerLane = 2, kBatch = kLean ? 3 : 4;
  // Four warps, four blocks per multiprocessor: its non-flush step is set by the prologue (ring and window), not
  // by the codes, and smaller blocks overlap more prologues. H200, one run, Super b256 L16: 137.1 us against 158.5
  // with eight warps (fp32 reads: 289.5 against 287.0, so they keep eight; docs/mamba2.md, design alternatives).
  static constexpr int kWarps = 4, kBlocksPerSm = kLean ? 6 : 4;
  static constexpr bool kFlushRows = false;  // the flush launch writes them (codes and scales in its mapping)
  static constexpr bool kRingInSmem = !kLean;
  struct Regs {
    uint4 c0, c1;     // codes of rows g and g + 8, columns 32 c .. 32 c + 31
    uint32_t s0, s1;  // block scales of rows g and g + 8, blocks 2 c and 2 c + 1 (the low 16 bits)
  };
  struct Ctx {
    uint32_t b[4][2][2];  // B fragments of MMA (word q, parity): b0, b1
    float unscale;        // 2^6 / sC
  };
  // The warp's B fragments from C in registers, four columns per lane (lane l: columns 4 l .. 4 l + 3), so that no
  // block barrier (for a shared copy of C) comes before the rows (H200, Super L16, two calls:
  // non-flush b256 level, and 72.4-72.5 us against 73.2 with C from shared memory after a barrier;
  // A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200). sC from max |C| (every warp finds the same). Lane (g, c) holds nonzero fragments
  // only for g / 2 == c (column g is lane c's block in MMAs q = 2 (g % 2) + qq, qq < 2), whose k slots take columns
  // 16 g + 8 qq + par + i (i = 0, 2, 4, 6): lane 4 g + 2 qq + (par + i) / 4 holds them as its element (par + i) % 4,
  // so 16 shuffles gather them.
  __device__ static Ctx context(const float (&c4)[4], int lane) {
    float m = fmaxf(fmaxf(fabsf(c4[0]), fabsf(c4[1])), fmaxf(fabsf(c4[2]), fabsf(c4[3])));
    m = group_max<32>(m);
    // sC = 2^k, k = min(floor(log2(2^15 / m)), 126), from m's bits: m = 2^e (1 + f) gives k = 15 - e, less one
    // where f > 0 (an fp32 subnormal m only gives k > 126).
    const int mb = __float_as_int(m), k = min(15 - ((mb >> 23) - 127) - ((mb & 0x7fffff) != 0), 126);
    const float sC = m > 0.f ? __int_as_float((k + 127) << 23) : 1.f;
    const int g = lane / 4, c = lane % 4;
    const bool holder = g / 2 == c;
    Ctx x;
#pragma unroll
    for (int qq = 0; qq < 2; ++qq)
#pragma unroll
      for (int par = 0; par < 2; ++par) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int e = par + 2 * i;  // (element e of the word's 8, column 8 qq + e of the 16)
          v[i] = __shfl_sync(0xffffffffu, c4[e % 4], 4 * g + 2 * qq + e / 4);
        }
        const uint32_t b0 = holder ? half2_bits(v[0] * sC, v[1] * sC) : 0u;
        const uint32_t b1 = holder ? half2_bits(v[2] * sC, v[3] * sC) : 0u;
        // (through an opaque move: else ptxas recomputes the selects inside the rows' loop to save registers)
        const auto held = [](uint32_t v) {
          asm volatile("mov.b32 %0, %0;" : "+r"(v));
          return v;
        };
#pragma unroll
        for (int q2 = 0; q2 < 2; ++q2) {
          const bool mine = (g & 1) == q2;
          x.b[2 * q2 + qq][par][0] = held(mine ? b0 : 0u);
          x.b[2 * q2 + qq][par][1] = held(mine ? b1 : 0u);
        }
      }
    x.unscale = m > 0.f ? __int_as_float((127 + 6 - k) << 23) : 64.f;  // 2^6 / sC (exact: sC = 2^k)
    return x;
  }
  struct Lane {
    const uint4* codes;           // row g's 16 bytes of codes at columns 32 c .. 32 c + 31, in the warp's first step
    const unsigned short* scale;  // row g's block-scale bytes 2 c, 2 c + 1, in the warp's first step
  };
  __device__ static Lane lane_base(const rssm_mamba2_decode_params& p, int64_t row0, int lane) {
    const int64_t row = row0 + lane / 4;
    const int c = lane % 4;
    const uint8_t* const codes = static_cast<const uint8_t*>(p.read_state);
    const uint8_t* const bscale = static_cast<const uint8_t*>(p.read_block_scale);
    return {reinterpret_cast<const uint4*>(codes + row * (kN / 2) + c * 16),
            reinterpret_cast<const unsigned short*>(bscale + row * (kN / kNvfp4Block) + c * 2)};
  }
  // Warp step `step` (rows g and g + 8 of its 16): word offsets from the lane's base, so that a batch's steps
  // address with immediates from one base.
  static constexpr int kCodeWords = kN / 2 / 16, kScaleWords = kN / kNvfp4Block / 2;  // uint4 / 2 bytes per row
  // The lane's addresses `steps` warp steps on.
  __device__ static Lane advance(const Lane& l, int steps) {
    return {l.codes + steps * kRows * kCodeWords, l.scale + steps * kRows * kScaleWords};
  }
  __device__ static Regs load(const Lane& l, int step) {
    Regs r;
    r.c0 = __ldcs(l.codes + step * kRows * kCodeWords);
    r.c1 = __ldcs(l.codes + (step * kRows + 8) * kCodeWords);
    r.s0 = __ldcs(l.scale + step * kRows * kScaleWords);
    r.s1 = __ldcs(l.scale + (step * kRows + 8) * kScaleWords);
    return r;
  }
  __device__ static void prefetch(const rssm_mamba2_decode_params& p, int64_t row0, int rows) {
    prefetch_l2(static_cast<const uint8_t*>(p.read_state) + row0 * (kN / 2), rows * (kN / 2));
    prefetch_l2(static_cast<const uint8_t*>(p.read_block_scale) + row0 * (kN / kNvfp4Block), rows * (kN / kNvfp4Block));
  }
  __device__ static void dot(const Regs& r, const Ctx& x, int, float (&part)[2]) {
    const uint32_t w0[4] = {r.c0.x, r.c0.y, r.c0.z, r.c0.w}, w1[4] = {r.c1.x, r.c1.y, r.c1.z, r.c1.w};
    float d[4] = {};
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int par = 0; par < 2; ++par) {
        const uint32_t e0 = par ? e2m1_odd_to_e4m3(w0[q]) : e2m1_even_to_e4m3(w0[q]);
        const uint32_t e1 = par ? e2m1_odd_to_e4m3(w1[q]) : e2m1_even_to_e4m3(w1[q]);
        uint32_t a[4];  // rows g, g + 8 at k slots 2 c, 2 c + 1; then at 2 c + 8, 2 c + 9
        e4m3x4_to_half2x2(e0, a[0], a[2]);
        e4m3x4_to_half2x2(e1, a[1], a[3]);
        mma_f16_m16n8k16(d, a, x.b[q][par][0], x.b[q][par][1]);
      }
    // Rows g and g + 8: D columns 2 c, 2 c + 1 (blocks 2 c, 2 c + 1) times the row's two block scales.
    const float2 sg = e4m3x2_to_float2(r.s0), s8 = e4m3x2_to_float2(r.s1);
    part[0] = fmaf(d[1], sg.y, d[0] * sg.x);
    part[1] = fmaf(d[3], s8.y, d[2] * s8.x);
  }
};
using Nvfp4Mma = Nvfp4MmaT<false>;
using Nvfp4Lean = Nvfp4MmaT<true>;

// A flushing head's rows in Fp32Read's mapping, K warp steps at once (the lane's rows r, r + 4, ...; its columns
// 32 q + 4 (lane % 8) + e): S = abar S0, then for every record j of the full window (history L - 1: records
// 0 .. L - 1, the current token last) S += (w_j x_j) B_j, then S stored in place (WRITES state). The same fp32
// operations in the same order as decode.cuh's flush route. A B vector read from shared memory serves the K rows
// (the loop is bound by shared-memory reads). rx: the first row's x records by ring position (stride P; the
// current x is in its slot), B32: [L + 1][N] B records by position (the current at L), row: the first row.
template <int K, typename ActT>
__device__ __forceinline__ void flush_rows(Fp32Read::Regs (&s)[K], float abar, int origin, int L, const float* w,
                                           const ActT* rx, int P, const float* B32, float* row, int lane) {
#pragma unroll
  for (int k = 0; k < K; ++k) scale_each(s[k].v, abar);
#pragma unroll 1
  for (int j = 0; j < L; ++j) {
    const int pos = ring_pos(origin, j, L);
    float cx[K];
#pragma unroll
    for (int k = 0; k < K; ++k) cx[k] = w[j] * to_float(rx[pos * P + Fp32Read::kRows * k]);
    const float4* Bj = reinterpret_cast<const float4*>(B32 + (j == L - 1 ? L : pos) * kN) + lane % 8;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 b = Bj[q * 8];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        s[k].v[q].x = fmaf(cx[k], b.x, s[k].v[q].x);
        s[k].v[q].y = fmaf(cx[k], b.y, s[k].v[q].y);
        s[k].v[q].z = fmaf(cx[k], b.z, s[k].v[q].z);
        s[k].v[q].w = fmaf(cx[k], b.w, s[k].v[q].w);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float4* const dst = reinterpret_cast<float4*>(row + Fp32Read::kRows * k * kN) + lane % 8;
#pragma unroll
    for (int q = 0; q < 4; ++q) __stcs(dst + q * 8, s[k].v[q]);
  }
}

// B_j·C for the ring positions j0 .. j0 + 15 (< L) of the group's ring of B records (rB, [L][N], the activation
// dtype) on the tensor cores, one warp: m16n8k16 with A = the 16 records (rows past L - 1 zero) and B = C in column
// 0 (lanes 0-3 hold it, the other columns are zero), eight MMAs over N = 128 with fp32 accumulation; the products
// are exact (C came from the activation dtype), the sum differs from an fp32 FMA chain by its order. Lanes 4 g
// write positions j0 + g and j0 + g + 8 of bc.
template <int kStride, typename ActT>
__device__ __forceinline__ void bc_ring_mma(const ActT* rB, const float* C, int L, int j0, int lane, float* bc) {
  static_assert(sizeof(ActT) == 2, "16-bit records");
  const int g = lane / 4, t = lane % 4, r0 = j0 + g, r1 = j0 + g + 8;
  const uint32_t* const a_lo = reinterpret_cast<const uint32_t*>(rB + r0 * kStride) + t;
  const uint32_t* const a_hi = reinterpret_cast<const uint32_t*>(rB + r1 * kStride) + t;
  const auto pair = [](float lo, float hi) {  // two values of the activation dtype (exact), as one word
    Packed<ActT, 2> q;
    q.v[0] = from_float<ActT>(lo);
    q.v[1] = from_float<ActT>(hi);
    return reinterpret_cast<const uint32_t&>(q);
  };
  float d[4] = {};
#pragma unroll
  for (int kc = 0; kc < kN / 16; ++kc) {  // columns 16 kc .. 16 kc + 15: words 8 kc + t, 8 kc + t + 4 of a row
    uint32_t a[4];
    a[0] = r0 < L ? a_lo[8 * kc] : 0u;
    a[1] = r1 < L ? a_hi[8 * kc] : 0u;
    a[2] = r0 < L ? a_lo[8 * kc + 4] : 0u;
    a[3] = r1 < L ? a_hi[8 * kc + 4] : 0u;
    const float* const c = C + 16 * kc + 2 * t;
    const uint32_t b0 = g == 0 ? pair(c[0], c[1]) : 0u, b1 = g == 0 ? pair(c[8], c[9]) : 0u;
    if constexpr (std::is_same_v<ActT, __nv_bfloat16>)
      mma_bf16_m16n8k16(d, a, b0, b1);
    else
      mma_f16_m16n8k16(d, a, b0, b1);
  }
  if (t == 0) {  // column 0: d[0] row g, d[2] row g + 8
    if (r0 < L) bc[r0] = d[0];
    if (r1 < L) bc[r1] = d[2];
  }
}

// The window's sum for R consecutive rows of a head: w += sum over the ring's positions of coef_pos x_pos, the
// current token included; v = the current x. coef: the head's coef by position; rx: the head's ring of x records
// at the first row (position 0); x: the current x of the first row. kRingInSmem: rx is the staged ring (every
// position, coef 0 outside the window); otherwise the pool's ring, read by record 0 .. hist - 1 (none for a
// flushing head, hist = L - 1), the current x last with the coef at its position. With nvfp4 a lane takes 4
// consecutive rows of a head (Nvfp4Lean 8; P is a multiple of 16): one 8-byte (16-byte) read per ring record, each
// row's sum in the same order as one row at a time (Fp32Read keeps one row per lane: it holds a batch (16 rows) of
// fp32 state in registers through this loop, and 4 rows spill).
template <int R, bool kRingInSmem, typename ActT>
__device__ __forceinline__ void window_sum(const float* coef, const ActT* rx, const ActT* x, int L, int P, int hist,
                                           int origin, float (&w)[R], float (&v)[R]) {
  if constexpr (kRingInSmem) {
    for (int pos = 0; pos < L; ++pos, rx += P) {  // (advanced by a record per position: no multiply per record)
      load_vec<ActT, R>(rx, v);
      const float c = coef[pos];
#pragma unroll
      for (int e = 0; e < R; ++e) w[e] = fmaf(c, v[e], w[e]);
    }
    load_vec<ActT, R>(x, v);
  } else {
    if (hist < L - 1) {
#pragma unroll 8
      for (int j = 0; j < hist; ++j) {
        const int pos = ring_pos(origin, j, L);
        load_vec<ActT, R>(rx + pos * P, v);
        const float c = coef[pos];
#pragma unroll
        for (int e = 0; e < R; ++e) w[e] = fmaf(c, v[e], w[e]);
      }
    }
    load_vec<ActT, R>(x, v);
    const float c = coef[ring_pos(origin, hist, L)];
#pragma unroll
    for (int e = 0; e < R; ++e) w[e] = fmaf(c, v[e], w[e]);
  }
}

// kFirstL2: the warp's first batch of rows goes to L2 before the prologue and into registers after it
// (common/decode_tiling.cuh output_only_first_batch_l2), instead of into registers before it.
template <typename ActT, typename Fmt, bool kFirstL2 = false>
__global__ void __launch_bounds__(Fmt::kWarps * 32, kBlocksPerSm<Fmt>)
    output_only_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const int hpb, const int ahead,
                       const int row0, const int tail_follows) {
  if (tail_follows) allow_dependent_launch();  // (the tail launch may start once every block of this one has)
  constexpr int kRows = Fmt::kRows, kBatch = Fmt::kBatch, RPL = Fmt::kRowsPerLane, kWarps = Fmt::kWarps;
  constexpr int kLanesPerRow = Fmt::kLanesPerRow;
  // A row's sum over its lanes (every lane of the row gets it).
  const auto row_sum = [](float v) {
#pragma unroll
    for (int off = 1; off < kLanesPerRow; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
  };
  constexpr bool kNvfp4 = !std::is_same_v<Fmt, Fp32Read>;
  const int b = row0 + blockIdx.y, hpg = p.nheads / p.ngroups, chunks = hpg / hpb;
  const int group = blockIdx.x / chunks, chunk = blockIdx.x - group * chunks;
  const int H = p.nheads, head0 = group * hpg + chunk * hpb, L = p.buffer_len, P = p.head_dim;
  const int ldt = round_up(L, 4);
  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) {  // padding: touch nothing
    if (!Fmt::kFlushRows && blockIdx.x == 0 && blockIdx.y == 0) wait_for_primary();  // (see the end of the kernel)
    if constexpr (Fmt::kFlushRows) wait_for_first_launch(row0);
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ __align__(16) char smem[];
  const Smem sp = smem_layout<Fmt>(L, hpb, P, sizeof(ActT));
  ActT* const rB_s = reinterpret_cast<ActT*>(smem + sp.ring_B);
  ActT* const rx_s = reinterpret_cast<ActT*>(smem + sp.ring_x);
  ActT* const x_s = reinterpret_cast<ActT*>(smem + sp.x);
  ActT* const z_s = reinterpret_cast<ActT*>(smem + sp.z);
  float* const C_s = reinterpret_cast<float*>(smem + sp.C);
  float* const coef_s = reinterpret_cast<float*>(smem + sp.coef);
  float* const gs_s = reinterpret_cast<float*>(smem + sp.gscale);
  float* const pre_s = reinterpret_cast<float*>(smem + sp.pre);
  float* const gate_s = reinterpret_cast<float*>(smem + sp.gate);
  float* const w_s = reinterpret_cast<float*>(smem + sp.w);
  float* const rdt_s = reinterpret_cast<float*>(smem + sp.ring_dt);
  float* const B32_s = reinterpret_cast<float*>(smem + sp.B32);
  __shared__ float s_bc[kMaxLen + 1];
  __shared__ float s_abar[kMaxHeads], s_dt[kMaxHeads], s_D[kMaxHeads], s_A[kMaxHeads];
  __shared__ __align__(16) float s_Bcur[kN];  // the current token's B in fp32 (read as float4 with nvfp4)
  __shared__ int s_hist[kMaxHeads], s_origin[kMaxHeads];

  const int64_t sg = static_cast<int64_t>(slot) * p.ngroups + group, sh0 = static_cast<int64_t>(slot) * H + head0;
  const ActT* const x_b = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head0 * p.x_head_stride;
  const ActT* const z_b = p.z ? static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head0 * p.z_head_stride : nullptr;
  ActT* const y_b = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;
  ActT* const ring_x = static_cast<ActT*>(p.ring_x);
  int32_t* const cursor = p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;  // of (slot, head0)
  // What the ring prologue stages in shared memory (read after the rows with nvfp4, before them with Fp32Read).
  const auto stage_ring_prologue = [&] {
    const int act = sizeof(ActT);
    if constexpr (Fmt::kRingBStride == kN) {
      cp_async_block<kWarps * 32>(rB_s, static_cast<const ActT*>(p.ring_B) + sg * L * kN, L * kN * act);
    } else {
      constexpr int kPieces = kN * sizeof(ActT) / 16;  // 16-byte pieces of a record
      for (int i = threadIdx.x; i < L * kPieces; i += blockDim.x) {
        const int j = i / kPieces, c = i - j * kPieces;
        cp_async<16>(reinterpret_cast<char*>(rB_s + j * Fmt::kRingBStride) + c * 16,
                     reinterpret_cast<const char*>(static_cast<const ActT*>(p.ring_B) + (sg * L + j) * kN) + c * 16);
      }
    }
    if constexpr (Fmt::kRingInSmem) cp_async_block<kWarps * 32>(rx_s, ring_x + sh0 * L * P, hpb * L * P * act);
    // every dt record: which ones count needs the cursor
    cp_async_block<kWarps * 32>(rdt_s, p.ring_dt + sh0 * ldt, hpb * ldt * 4);
    const int x16 = P * act / 16;  // 16-byte pieces of a head's x (and z); one loop over the block's heads
    for (int i = threadIdx.x; i < hpb * x16; i += blockDim.x) {
      const int hh = i / x16, c16 = i - hh * x16;
      cp_async<16>(reinterpret_cast<char*>(x_s + hh * P) + c16 * 16,
                   reinterpret_cast<const char*>(x_b + hh * p.x_head_stride) + c16 * 16);
      if (z_b)
        cp_async<16>(reinterpret_cast<char*>(z_s + hh * P) + c16 * 16,
                     reinterpret_cast<const char*>(z_b + hh * p.z_head_stride) + c16 * 16);
    }
    if (kNvfp4)  // 4-byte aligned (the ABI promises no more)
      for (int i = threadIdx.x; i < hpb * P / kNvfp4Rows; i += blockDim.x)
        cp_async<4>(gs_s + i, p.read_scale + sh0 * P / kNvfp4Rows + i);
    cp_async_commit();
  };
  if constexpr (!kNvfp4) stage_ring_prologue();
  // The first rows' loads go out now: they depend on the slot only, not on the cursor or the prologue.
  const int rpw = hpb * P / kWarps, steps = rpw / kRows;
  const int64_t warp_row0 = sh0 * P + warp * rpw;  // (slot, head0 + row / P, row % P) flattened
  const typename Fmt::Lane lane_src = Fmt::lane_base(p, warp_row0, lane);  // the lane's loads: offsets from here
  typename Fmt::Regs regs[kBatch];
  if constexpr (!kFirstL2) {  // (else the row loop loads the first batch)
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (k < steps) regs[k] = Fmt::load(lane_src, k);
  }
  // The next `ahead` batches of the warp's rows (contiguous) are asked of L2 too: memory stays busy through the
  // prologue and between batches without holding registers; batch i + ahead is asked for when batch i loads.
  const auto prefetch_batch = [&](int s) {
    if (lane == 0 && s < steps) Fmt::prefetch(p, warp_row0 + s * kRows, min(kBatch, steps - s) * kRows);
  };
  for (int a = kFirstL2 ? 0 : 1; a <= ahead; ++a) prefetch_batch(a * kBatch);

  // The prologue's own loads (the current B: a thread per column; C: a thread per column, or with an nvfp4 copy
  // four columns per lane, every warp, and warp 0 writes C_s from them; per head: the cursor (replica 0; all
  // replicas agree at the start of a step), dt, dt_bias, A, D) all go out before any of them is used
  // (issue_loads_here): used as they arrived, each waited for the one before (five memory round trips in a row
  // before the block's first barrier, in the SASS of the H200 build).
  static_assert(kN <= kWarps * 32, "a thread per column of C and B");
  const ActT* const Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  const ActT* const Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const bool column = threadIdx.x < kN, head_thread = threadIdx.x < hpb;
  const ActT c_raw = column && !kNvfp4 ? Cg[threadIdx.x] : ActT{}, b_raw = column ? Bg[threadIdx.x] : ActT{};
  // nvfp4: the lane's four columns of C (one vector), for its B fragments (context) and, from warp 0, C_s. H200,
  // Super L16, one run, three passes against the column threads' own loads of C (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200):
  // non-flush b512 131.9-132.3 us against 133.0-133.1, b256 71.4-71.8 against 71.5-71.7.
  Packed<ActT, 4> c4_raw{};
  if constexpr (kNvfp4) c4_raw = *reinterpret_cast<const Packed<ActT, 4>*>(Cg + lane * 4);
  const int head = head0 + (head_thread ? threadIdx.x : 0);
  const int32_t* const cur = cursor + (head - head0) * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
  const int hist_word = head_thread ? cur[RSSM_CURSOR_HISTORY] : 0;
  const int origin_word = head_thread ? cur[RSSM_CURSOR_ORIGIN] : 0;
  const HeadInputs head_in =
      head_thread ? load_head_inputs<ActT>(p, b * p.dt_batch_stride + head * p.dt_head_stride, head) : HeadInputs{};
  // nvfp4, after the flush-only launch: the histories of the row's heads (row_waits below), the first head this
  // thread scans loaded with the prologue's loads (else a round trip of its own before the block's first barrier),
  // and only then the staging of the ring prologue, which nothing reads before the rows' end: the loads the rows
  // wait for go out first (A/B of `benchmarks/ab_variants.sh` / `ab_step.py`, H200 section 3).
  const int32_t* const row_cursor =
      p.cursor + static_cast<int64_t>(slot) * H * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
  const auto row_history = [&](int h) {
    return row_cursor[h * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY];
  };
  const int first_hist = !Fmt::kFlushRows && static_cast<int>(threadIdx.x) < H ? row_history(threadIdx.x) : 0;
  if constexpr (kNvfp4) stage_ring_prologue();
  issue_loads_here();
  if (column) {
    if constexpr (!kNvfp4) C_s[threadIdx.x] = to_float(c_raw);
    s_Bcur[threadIdx.x] = to_float(b_raw);
  }
  if constexpr (kNvfp4)
    if (warp == 0)
      reinterpret_cast<float4*>(C_s)[lane] =
          make_float4(to_float(c4_raw.v[0]), to_float(c4_raw.v[1]), to_float(c4_raw.v[2]), to_float(c4_raw.v[3]));
  if (head_thread) {
    s_hist[threadIdx.x] = clamp_history(hist_word, L);
    s_origin[threadIdx.x] = wrap_origin(origin_word, L);
    if constexpr (!Fmt::kRingInSmem) {
      // The window's ring x records (0 .. hist - 1: one or two ranges of positions) asked of L2 now, for the window
      // sums that read them from global memory after the prologue. None for a flushing head (its rows are skipped).
      const int hist = s_hist[threadIdx.x], origin = s_origin[threadIdx.x];
      if (hist > 0 && hist < L - 1) {
        const int rec = P * static_cast<int>(sizeof(ActT)), first = min(hist, L - origin);
        const ActT* const ring = ring_x + (sh0 + threadIdx.x) * L * P;
        prefetch_l2(ring + origin * P, first * rec);
        if (hist > first) prefetch_l2(ring, (hist - first) * rec);
      }
    }
    s_dt[threadIdx.x] = processed_dt(p, head_in);
    s_A[threadIdx.x] = head_in.A;
    s_D[threadIdx.x] = head_in.D;
  }
  // nvfp4, after the flush-only launch: whether any head of this row flushes or reaches L - 1 in this step (then
  // this block waits for that launch before it writes cursors; see the end of the kernel). Another block of the row
  // may already have advanced its heads' cursors: a head read one further that way only makes this block wait
  // needlessly; a head that reaches L - 1, or flushes, keeps its cursor until that launch has finished.
  bool row_waits = false;
  if constexpr (!Fmt::kFlushRows) {
    row_waits = static_cast<int>(threadIdx.x) < H && clamp_history(first_hist, L) >= L - 2;
    for (int h = threadIdx.x + blockDim.x; h < H; h += blockDim.x)
      row_waits |= clamp_history(row_history(h), L) >= L - 2;
  }
  typename Fmt::Ctx ctx;
  if constexpr (kNvfp4) {
    // The rows first: the warp's B fragments from its lanes' columns of C (no block barrier; the ring prologue's
    // loads stay in flight), then its steps in order, each 16 rows of one head (P is a multiple of 16), with rolling
    // loads: step s + kBatch goes into the registers step s is done with, so that a warp always has steps of rows in
    // flight. Rows g and g + 8 of lane (g, c) are reduce-scattered over the row's four lanes: lanes c < 2 end with
    // row g's sum, c >= 2 with row g + 8's, and lanes 0 and 2 of the four keep the row's dot (pre_s). A flushing
    // head's rows are read and summed too (the flush launch may be rewriting them) and skipped below.
    {
      float c4[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) c4[e] = to_float(c4_raw.v[e]);
      ctx = Fmt::context(c4, lane);
    }
    {
      const bool hi = lane & 2;
      int lrow = warp * rpw + lane / kLanesPerRow + (hi ? kRows / 2 : 0);  // the lane's row in the block
      typename Fmt::Lane next = Fmt::advance(lane_src, kBatch);
      for (int s0 = 0; s0 < steps; s0 += kBatch) {
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          const int s = s0 + k;
          if (s >= steps) break;
          float part[RPL];
          Fmt::dot(regs[k], ctx, lane, part);
          float v = (hi ? part[1] : part[0]) + __shfl_xor_sync(0xffffffffu, hi ? part[0] : part[1], 2);
          v += __shfl_xor_sync(0xffffffffu, v, 1);
          if ((lane & 1) == 0) pre_s[lrow] = v;
          if (s + kBatch < steps) {
            regs[k] = Fmt::load(next, 0);
            next = Fmt::advance(next, 1);
          }
          lrow += kRows;
        }
      }
    }
  }
  cp_async_wait_group<0>();
  row_waits = __syncthreads_or(row_waits);
  // B·C of every ring position (by position) and of the current token (index L). nvfp4: the ring's records on the
  // tensor cores, warp t taking positions 16 t .. 16 t + 15 (bc_ring_mma), and the current token by the last warp
  // (a lane's four columns as one vector of each); Fp32Read: a warp per position.
  if constexpr (kNvfp4) {
    if (warp * 16 < L) bc_ring_mma<Fmt::kRingBStride>(rB_s, C_s, L, warp * 16, lane, s_bc);
    if (warp == kWarps - 1) {
      static_assert(kN == 4 * 32, "four columns per lane");
      const float4 bv = reinterpret_cast<const float4*>(s_Bcur)[lane], cv = reinterpret_cast<const float4*>(C_s)[lane];
      float d = fmaf(bv.w, cv.w, fmaf(bv.z, cv.z, fmaf(bv.y, cv.y, fmaf(bv.x, cv.x, 0.f))));
      d = group_sum<32>(d);
      if (lane == 0) s_bc[L] = d;
    }
  } else {
    for (int j = warp; j <= L; j += kWarps) {
      float d = 0.f;
#pragma unroll
      for (int e = 0; e < kN / 32; ++e) {
        const int n = lane * (kN / 32) + e;
        d = fmaf(j < L ? to_float(rB_s[j * kN + n]) : s_Bcur[n], C_s[n], d);
      }
      d = group_sum<32>(d);
      if (lane == 0) s_bc[j] = d;
    }
  }
  if constexpr (Fmt::kFlushRows) {  // a flushing head's records in fp32 (exact), the current B at index L
    bool flushes = false;
    for (int hh = 0; hh < hpb; ++hh) flushes |= s_hist[hh] == L - 1;
    if (flushes)
      for (int i = threadIdx.x; i < (L + 1) * kN; i += blockDim.x)
        B32_s[i] = i < L * kN ? to_float(rB_s[i]) : s_Bcur[i - L * kN];
  }
  __syncthreads();
  // Window weights, a segment of `seg` lanes per head (the fewest lanes, 8 to 32, that hold a window of L records:
  // 32 / seg heads per warp at a time; decode.cuh's prologue in its order, so the same bits), and the current x into
  // its ring record: in shared memory (the window below) and, for a non-flush head, in the pool.
  {
    const int seg = L <= 8 ? 8 : L <= 16 ? 16 : 32, per_warp = 32 / seg;
    for (int hh0 = warp * per_warp; hh0 < hpb; hh0 += kWarps * per_warp) {
      const int hh = hh0 + lane / seg, j = lane & (seg - 1);
      const bool live = hh < hpb;  // (the segments of a warp past the block's heads only take part in the scan)
      const int hist = live ? s_hist[hh] : -1, origin = live ? s_origin[hh] : 0;
      const float A = live ? s_A[hh] : 0.f, dt = live ? s_dt[hh] : 0.f;
      const float dtj = j > hist ? 0.f : (j == hist ? dt : rdt_s[hh * ldt + ring_pos(origin, j, L)]);
      float ex, total;
      segment_suffix_sums(dtj, seg, ex, total);
      if (!live) continue;
      const float w = dtj * expf(A * ex);
      if (j < L) {
        const float bc = j > hist ? 0.f : (j == hist ? s_bc[L] : s_bc[ring_pos(origin, j, L)]);
        coef_s[hh * L + ring_pos(origin, j, L)] = w * bc;
        if constexpr (Fmt::kFlushRows) w_s[hh * L + j] = w;
      }
      if (j == 0) s_abar[hh] = expf(A * total);
      const int pos_cur = ring_pos(origin, hist, L);
      ActT* const rx_g = ring_x + ((sh0 + hh) * L + pos_cur) * P;
      for (int c = j; c < P * static_cast<int>(sizeof(ActT)) / 16; c += seg) {
        const uint4 v = reinterpret_cast<const uint4*>(x_s + hh * P)[c];
        if constexpr (Fmt::kRingInSmem) reinterpret_cast<uint4*>(rx_s + (hh * L + pos_cur) * P)[c] = v;
        if (hist < L - 1) reinterpret_cast<uint4*>(rx_g)[c] = v;  // WRITES ring_x[slot, head, pos_cur, :]
      }
    }
  }
  __syncthreads();
  // The window sums (window_sum, above the kernel): kPreRows rows per lane, the ring of x records they read.
  constexpr int kPreRows = kNvfp4 ? (Fmt::kRingInSmem ? 4 : 8) : 1;
  const ActT* const ring_rows = Fmt::kRingInSmem ? rx_s : ring_x + sh0 * L * P;
  if constexpr (kNvfp4) {
    // Then the ring prologue, whose loads have arrived by now, and per lane kPreRows consecutive rows of a head:
    // y = (abar 2^6 / sC) g dot + D x + window sum, times silu(z) (g the rows' group scale of the copy), stored
    // together where y's alignment allows.
    const bool y_vec =
        ((reinterpret_cast<uintptr_t>(y_b) | (p.y_head_stride * sizeof(ActT))) % (kPreRows * sizeof(ActT))) == 0;
    for (int lrow = warp * rpw + kPreRows * lane; lrow < (warp + 1) * rpw; lrow += kPreRows * 32) {
      const int hh = lrow / P, r = lrow - hh * P;
      if (s_hist[hh] == L - 1) continue;  // (a flushing head: the flush launch wrote its rows)
      float w[kPreRows] = {}, v[kPreRows], d[kPreRows], y[kPreRows];
      window_sum<kPreRows, Fmt::kRingInSmem>(coef_s + hh * L, ring_rows + hh * L * P + r, x_s + lrow, L, P,
                                             s_hist[hh], s_origin[hh], w, v);
      load_vec<float, kPreRows>(pre_s + lrow, d);
      const float f = s_abar[hh] * ctx.unscale;
#pragma unroll
      for (int e = 0; e < kPreRows; ++e)
        y[e] = fmaf(gs_s[(lrow + e) / kNvfp4Rows] * f, d[e], fmaf(s_D[hh], v[e], w[e]));
      if (z_b) {
        load_vec<ActT, kPreRows>(z_s + lrow, v);
#pragma unroll
        for (int e = 0; e < kPreRows; ++e) y[e] *= silu_gate(v[e]);
      }
      ActT* const dst = y_b + hh * p.y_head_stride + r;
      if (y_vec) {  // (one 16- or 8-byte store: an intrinsic, so that ptxas keeps it apart from the loop below)
        static_assert(kPreRows * sizeof(ActT) == 16 || kPreRows * sizeof(ActT) == 8, "a 16- or 8-byte vector");
        using Word = std::conditional_t<kPreRows * sizeof(ActT) == 16, uint4, uint2>;
        Packed<ActT, kPreRows> q;
#pragma unroll
        for (int e = 0; e < kPreRows; ++e) q.v[e] = from_float<ActT>(y[e]);
        __stwb(reinterpret_cast<Word*>(dst), reinterpret_cast<const Word&>(q));  // WRITES y[b, head, r ..]
      } else {
#pragma unroll
        for (int e = 0; e < kPreRows; ++e) dst[e] = from_float<ActT>(y[e]);  // WRITES y[b, head, r + e]
      }
    }
  } else {
    // Fp32Read: per row, once: pre = D x + the window's sum, gate = silu(z). Each warp its own rows, the only ones
    // it reads below (flushing or not): a warp barrier, not a block barrier.
    for (int lrow = warp * rpw + lane; lrow < (warp + 1) * rpw; lrow += 32) {
      const int hh = lrow / P, r = lrow - hh * P;
      float w[kPreRows] = {}, v[kPreRows], pre[kPreRows], gate[kPreRows];
      window_sum<kPreRows, Fmt::kRingInSmem>(coef_s + hh * L, ring_rows + hh * L * P + r, x_s + lrow, L, P,
                                             s_hist[hh], s_origin[hh], w, v);
      pre[0] = fmaf(s_D[hh], v[0], w[0]);
      if (z_b) load_vec<ActT, kPreRows>(z_s + lrow, v);
      gate[0] = z_b ? silu_gate(v[0]) : 1.f;
      store_vec<float, kPreRows>(pre_s + lrow, pre);
      store_vec<float, kPreRows>(gate_s + lrow, gate);
    }
    __syncwarp();
    ctx = Fmt::context(C_s, lane);  // (C in 16 registers; reloaded after a flush)
    // The head of a batch's first row and its row in the head, advanced per batch (no division in the loop). A batch
    // (kBatch * kRows <= 64 rows, P >= 64) crosses at most one head boundary, and only between steps.
    static_assert(kBatch * kRows <= 64, "a batch spans at most two heads (head_dim >= 64)");
    int batch_head = warp * rpw / P, batch_row = warp * rpw - batch_head * P;
    for (int s0 = 0; s0 < steps; s0 += kBatch) {
      if (s0 > 0) {
        batch_row += kBatch * kRows;
        if (batch_row >= P) {
          batch_row -= P;
          ++batch_head;
        }
        if (ahead > 0) prefetch_batch(s0 + ahead * kBatch);  // (ahead 0: the batch loaded next, no use asking)
      }
      if (s0 > 0 || kFirstL2) {
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (s0 + k < steps) regs[k] = Fmt::load(lane_src, s0 + k);
      }
      if constexpr (Fmt::kFlushRows) {
        // A flushing head: the batch's kBatch steps together (16 rows from a multiple of 16: the warp's rows are a
        // multiple of 16 (kRowQuantum) and so is P, so they lie in one head).
        const int lrow0 = warp * rpw + s0 * kRows, hh = batch_head;
        if (s_hist[hh] == L - 1) {
          const int r0 = lrow0 - hh * P + lane / kLanesPerRow;
          flush_rows(regs, s_abar[hh], s_origin[hh], L, w_s + hh * L, rx_s + hh * L * P + r0, P, B32_s,
                     static_cast<float*>(p.state) + (warp_row0 + s0 * kRows + lane / kLanesPerRow) * kN, lane);
          // C again from shared memory: ctx is dead through the rebuild above, so its 16 registers are free there
          // (with them held, ptxas gave the loop one register quad for the 8 B vectors of a record, each read
          // waited for before its FMAs).
          ctx = Fmt::context(C_s, lane);
#pragma unroll
          for (int k = 0; k < kBatch; ++k) {
            float part[1];
            Fmt::dot(regs[k], ctx, lane, part);
            const float v = row_sum(part[0]);
            const int r = r0 + k * kRows;
            if (lane % kLanesPerRow == 0)  // WRITES y[b, head, r]: S·C + D x, gated, as decode.cuh's flush route
              y_b[hh * p.y_head_stride + r] =
                  from_float<ActT>(fmaf(s_D[hh], to_float(x_s[hh * P + r]), v) * gate_s[hh * P + r]);
          }
          continue;
        }
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        if (s0 + k >= steps) break;
        // A step's rows share a head (P is a multiple of kRows).
        const int lrow0 = warp * rpw + (s0 + k) * kRows, hh = batch_head + (batch_row + k * kRows >= P);
        const float abar = s_abar[hh];
        if (s_hist[hh] == L - 1) continue;  // (not reached: the batch's flush path above)
        float part[RPL];
        Fmt::dot(regs[k], ctx, lane, part);
#pragma unroll
        for (int i = 0; i < RPL; ++i) {
          const float v = row_sum(part[i]);
          const int lrow = lrow0 + lane / kLanesPerRow + (kRows / RPL) * i, r = lrow - hh * P;
          if (lane % kLanesPerRow == 0)  // WRITES y[b, head, r]
            y_b[hh * p.y_head_stride + r] = from_float<ActT>(fmaf(abar, v, pre_s[lrow]) * gate_s[lrow]);
        }
      }
    }
  }
  // The nvfp4 formats run as a programmatic dependent of the flush-only launch (launch below), which starts it as
  // soon as its every block has started, before their scans of the batch's cursors for flushing rows (decode.cuh).
  // Above, the two overlap only where the value is discarded: this kernel loads the flushing heads' codes and
  // scales (skipped before any use) while that launch rewrites them, and writes non-flushing heads' ring x records
  // that the flush launch's prologue may stage but never reads (it skips those units). Below it writes the cursors
  // and the ring of B and dt records. A scan, or that launch's prologue, reading a head's history before or after
  // this block advances it from h < L - 2 finds it below L - 1 either way (not flushing), so only a block of a row
  // with a head at L - 2 (its new history L - 1 would read as flushing) or flushing (reset to 0 once flushed)
  // waits for that launch to finish, and block (0, 0) (so that this launch never ends before that one); the others
  // end without waiting and free their multiprocessor for the rest of this launch.
  if constexpr (!Fmt::kFlushRows)
    if (row_waits || (blockIdx.x == 0 && blockIdx.y == 0)) wait_for_primary();
  // Per head: ring dt and the cursor (every replica; a flush head's history goes back to 0); per group: the ring
  // B record (the group's first block, by its first head, as decode.cuh).
  if (threadIdx.x < hpb) {
    const int hh = threadIdx.x, hist = s_hist[hh], flush = hist == L - 1;
    if (!flush) p.ring_dt[(sh0 + hh) * ldt + ring_pos(s_origin[hh], hist, L)] = s_dt[hh];  // WRITES ring_dt
    int32_t* cur = cursor + hh * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
    for (int rep = 0; rep < RSSM_CURSOR_REPLICAS; ++rep)  // WRITES cursor history
      cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
  }
  if (chunk == 0 && s_hist[0] < L - 1) {
    ActT* rB = static_cast<ActT*>(p.ring_B) + (sg * L + ring_pos(s_origin[0], s_hist[0], L)) * kN;
    // WRITES ring_B[slot, group, pos, :] (the activation dtype's value back from fp32: exact)
    if (threadIdx.x < kN) rB[threadIdx.x] = from_float<ActT>(s_Bcur[threadIdx.x]);
  }
  if constexpr (Fmt::kFlushRows) wait_for_first_launch(row0);
}

// Heads per block for this step, or 0 when the route does not take it (the combined kernel then does): d_state
// 128, L <= 32, bf16 / fp16 activations, and a block of the most heads (<= 16, dividing the heads per group)
// whose rows are whole 16-row steps per warp and whose shared memory leaves kBlocksPerSm blocks per multiprocessor.
template <typename ActT, typename Fmt>
inline int heads_per_block(const rssm_mamba2_decode_params& p, int smem_per_sm) {
  if (sizeof(ActT) != 2 || p.dstate != kN || p.buffer_len < 2 || p.buffer_len > kMaxLen) return 0;
  const int hpg = p.nheads / p.ngroups;
  static const int overhead = block_smem_overhead(output_only_kernel<ActT, Fmt>);  // static arrays + reserved
  for (int hpb = kMaxHeads; hpb >= 1; hpb /= 2) {
    if (hpg % hpb || (hpb * p.head_dim) % kRowQuantum<Fmt>) continue;
    const int bytes = smem_layout<Fmt>(p.buffer_len, hpb, p.head_dim, sizeof(ActT)).bytes;
    if (kBlocksPerSm<Fmt> * (bytes + overhead) <= smem_per_sm) return hpb;
  }
  return 0;
}

// after_flush_launch: the stream's previous kernel is decode.cuh's flush-only launch (Nvfp4Mma): this one is
// launched as its programmatic dependent and starts as soon as every block of that launch has (see the kernel's
// wait_for_primary for what waits).
// first_l2: kFirstL2 (Fp32Read only; Nvfp4Mma keeps its first batch in registers).
template <typename ActT, typename Fmt>
cudaError_t launch(const rssm_mamba2_decode_params& p, int hpb, int ahead, bool first_l2, bool first_l2_tail,
                   int tail_rows, cudaStream_t stream, bool after_flush_launch = false) {
  const auto variant = [](bool l2) {
    return l2 && Fmt::kFlushRows ? output_only_kernel<ActT, Fmt, Fmt::kFlushRows>
                                 : output_only_kernel<ActT, Fmt, false>;
  };
  const auto kernel = variant(first_l2), tail_kernel = variant(first_l2_tail);
  if (!Fmt::kFlushRows) ahead = 0;  // (nvfp4: rolling loads keep the next steps in flight; no L2 prefetch)
  const int bytes = smem_layout<Fmt>(p.buffer_len, hpb, p.head_dim, sizeof(ActT)).bytes;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && tail_kernel != kernel)
    err = cudaFuncSetAttribute(tail_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) return err;
  const int hpg = p.nheads / p.ngroups;
  const auto shape = [&](int h) {
    const int smem = smem_layout<Fmt>(p.buffer_len, h, p.head_dim, sizeof(ActT)).bytes;
    return RowsLaunchShape{p.ngroups * (hpg / h), smem};
  };
  // The tail launch (decode_tiling.cuh output_only_tail_rows) for the format that rebuilds its flushing rows only.
  const int tail = Fmt::kFlushRows ? tail_launch_rows(tail_rows, p.batch, hpb, p.head_dim, kRowQuantum<Fmt>) : 0;
  return launch_rows_with_tail(kernel, tail_kernel, p, p.batch, hpb, ahead, tail, dim3(Fmt::kWarps * 32), shape, stream,
                               after_flush_launch);
}

}  // namespace output_only
}  // namespace mamba2
}  // namespace replayssm
