// Work split shared by the decode kernel families (Mamba-2, Gated DeltaNet): the thread-to-state mapping,
// the launch shape (units of head tiles per block), the window suffix scan, the reduce-scatter of per-row dot
// products, streaming state accesses. A state row is one row of a head's state matrix (Mamba-2: P rows of N;
// GDN: V rows of K), stored contiguously.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "replayssm/common/math.cuh"
#include "replayssm/common/types.h"

namespace replayssm {

constexpr int kMaxBufferLen = 64;
constexpr int kMaxWarps = 8;         // warps per block (256 threads)
constexpr int kElemsPerThread = 32;  // checkpoint elements each thread holds in registers

// Thread-to-state mapping for a checkpoint dtype and state rows of N elements. Every thread owns
// kElemsPerThread elements of a tile as 16-byte vectors. In a warp, LPR lanes cover one row (NV vectors each);
// one access instruction covers RPI = 32 / LPR rows; a thread holds KI such instructions, so a warp covers
// RW = KI x RPI rows. A row's dot product with a vector starts as one partial sum per (thread, instruction),
// reduce-scattered across the row's lanes (reduce_scatter), which leaves SHARE lanes per row that can split
// per-row work (the replayed terms) before their last shuffles.
template <typename StateT, int N>
struct Tiling {
  static constexpr int ROW = N;                              // elements per state row
  static constexpr int VEC = 16 / sizeof(StateT);            // elements per 16-byte vector
  static constexpr int VPT = kElemsPerThread / VEC;          // vectors per thread
  static constexpr int LPR = N / VEC < 32 ? N / VEC : 32;    // lanes per state row
  static constexpr int NV = N / VEC / LPR;                   // vectors per lane and row
  static constexpr int RPI = 32 / LPR;                       // rows per access instruction
  static constexpr int KI = VPT / NV;                        // instructions (row groups) per thread
  static constexpr int RW = KI * RPI;                        // rows per warp
  static constexpr int SHARE = LPR / KI;                     // lanes holding one row after the reduce-scatter
  static_assert(NV >= 1 && N % (VEC * LPR) == 0, "state rows must split into 16-byte vectors");
  static_assert(KI >= 1 && KI <= LPR && SHARE >= 1, "rows of a thread must reduce-scatter within a row's lanes");
  static_assert(16 % RW == 0, "rows per warp must divide 16 (every supported head_dim is a multiple of 16)");
};

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Byte offsets of consecutive regions, each 16-byte aligned: the shared-memory plans of every kernel family.
struct SmemBump {
  int off = 0;
  __host__ __device__ int take(int bytes) {
    const int at = off;
    off += round_up(bytes, 16);
    return at;
  }
};

constexpr int kMaxUnits = 8;   // (head, tile) units per block
constexpr int kMaxStages = 3;  // shared-memory stages per block: one computed, two in flight

// Launch shape. A head splits into `tiles` tiles of `rows` rows (one unit each, `warps` warps); the units of a
// group (heads_per_group x tiles) split into chunks of `units` consecutive units; one block per (batch row,
// group, chunk). Fewest tiles with at most kMaxWarps warps; small batches split heads further. The most units
// per block (up to kMaxUnits) that still leave a few blocks per SM: what depends on the group only (its ring
// records, their products with the current token's vectors) is loaded and computed once per block.
struct Shape {
  int tiles, tiles_log2, warps, rows, units, chunks, stages;
  int flush_only;  // replay: compute flush rows only and leave every cursor alone (a later launch owns the rest)
};

inline Shape launch_shape(int head_dim, int rows_per_warp, int nheads, int ngroups, long long batch, int sms) {
  Shape s{};
  const int head_warps = head_dim / rows_per_warp;
  s.tiles = 1;
  while (head_warps / s.tiles > kMaxWarps || head_warps % s.tiles) s.tiles *= 2;
  while (s.tiles * 2 <= RSSM_CURSOR_REPLICAS && head_warps % (s.tiles * 2) == 0 && batch * nheads * s.tiles < 2LL * sms)
    s.tiles *= 2;
  s.warps = head_warps / s.tiles;
  while ((1 << s.tiles_log2) < s.tiles) ++s.tiles_log2;
  s.rows = head_dim / s.tiles;
  const int group_units = nheads / ngroups * s.tiles;
  s.units = 1;
  for (int u = kMaxUnits; u > 1; u /= 2) {
    if (group_units % u == 0 && batch * ngroups * (group_units / u) >= 4LL * sms) {
      s.units = u;
      break;
    }
  }
  s.chunks = group_units / s.units;
  s.stages = std::min(s.units, kMaxStages);
  return s;
}

// The replay step's choice between a family's combined kernel and its output-only mapping (mamba2/output_only.cuh,
// gdn/output_only.cuh): the heads per output-only block, or 0 for the combined kernel. hpb: the most heads a block
// of the mapping can take (0: the mapping does not take this step); a block's rows (heads x rows_per_head) stay a
// multiple of row_quantum. The policy: at most max_heads heads per block, halved (down to min_heads) while the
// launch has fewer than fill_blocks_per_sm blocks per multiprocessor, taken by default (if by_default) when it has
// at least min_blocks_per_sm. RSSM_ROUTES=split / combined in the environment
// forces one or the other, RSSM_OO_HEADS=<n> takes n heads per block (a divisor of hpb, above max_heads too; A/B
// only); both are read at every launch (A/B measurements, the tests that compare the routes).
struct SplitRoutePolicy {
  int max_heads, min_blocks_per_sm;
  bool by_default;
  int min_heads = 1;           // the fewest heads per block the halving below goes to
  int fill_blocks_per_sm = 0;  // halve the heads per block while the launch has fewer blocks per multiprocessor
};
inline int split_route_heads(int hpb, int rows_per_head, int row_quantum, long long batch, int nheads, int sms,
                             const SplitRoutePolicy& policy) {
  const char* v = std::getenv("RSSM_ROUTES");
  const std::string forced = v ? v : "";
  if (hpb <= 0 || forced == "combined") return 0;
  const int most = hpb;
  while (hpb > policy.max_heads && (hpb / 2 * rows_per_head) % row_quantum == 0) hpb /= 2;
  const long long fill = static_cast<long long>(policy.fill_blocks_per_sm) * sms;
  while (hpb / 2 >= policy.min_heads && hpb % 2 == 0 && batch * (nheads / hpb) < fill &&
         (hpb / 2 * rows_per_head) % row_quantum == 0)
    hpb /= 2;
  if (const char* h = std::getenv("RSSM_OO_HEADS")) {  // any divisor of the most the block can take, cap or not
    const int want = std::atoi(h);
    if (want > 0 && want <= most && most % want == 0 && (want * rows_per_head) % row_quantum == 0) hpb = want;
  }
  if (forced == "split") return hpb;
  const long long blocks = batch * (nheads / hpb);
  return policy.by_default && blocks >= static_cast<long long>(policy.min_blocks_per_sm) * sms ? hpb : 0;
}

// How many batches of a warp's state rows the output-only kernels ask L2 for ahead of the batch their registers
// load (common/async_copy.cuh prefetch_l2): the rows are contiguous per warp, so one bulk prefetch per batch.
// RSSM_OO_PREFETCH overrides the family's default (A/B runs).
inline int output_only_prefetch_batches(int fallback) {
  const char* v = std::getenv("RSSM_OO_PREFETCH");
  return v ? std::max(0, std::atoi(v)) : fallback;
}

// Whether an output-only kernel sends a warp's first batch of state rows to L2 (a bulk prefetch, no register) and
// loads it into registers after the prologue (true), or into registers before the prologue (false). ptxas tracks the
// first batch's register loads and the prologue's own small global loads (cursor, gates, C, B) on one scoreboard
// (write barrier 5 in the sm_90 SASS), so with false the prologue's first use of a small load waits for the whole
// batch of state; with true the batch is not in registers when the prologue ends. The family's launch gives the
// fallback; RSSM_OO_FIRST_L2=0 / 1 overrides it (A/B runs).
inline bool output_only_first_batch_l2(bool fallback) {
  const char* v = std::getenv("RSSM_OO_FIRST_L2");
  return v && *v ? std::atoi(v) != 0 : fallback;
}

// How many batch rows at the end of an output-only step go to a second launch in blocks of half the heads, a
// programmatic dependent of the first that fills its tail with finer work. RSSM_OO_TAIL_ROWS overrides the
// family's default (A/B runs).
inline int output_only_tail_rows(int fallback) {
  const char* v = std::getenv("RSSM_OO_TAIL_ROWS");
  return v && *v ? std::max(0, std::atoi(v)) : fallback;
}

// The rows of an output-only step that go to the tail launch (output_only_tail_rows): at most the batch, and none
// when a block of half the heads would not keep whole row quanta.
inline int tail_launch_rows(int want, int batch, int hpb, int rows_per_head, int row_quantum) {
  if (hpb % 2 || (hpb / 2 * rows_per_head) % row_quantum) return 0;
  return std::max(0, std::min(want, batch));
}

// The tail launch's rows by a family's policy: a launch of fewer than below_blocks_per_sm blocks per
// multiprocessor whose blocks take at least min_heads heads sends `rounds` rounds of the multiprocessors' resident
// blocks (resident_per_sm each) of half the heads to the tail launch, when that is at most half the batch (small
// forced launches keep one launch); then the override (output_only_tail_rows) and tail_launch_rows' limits.
struct TailPolicy {
  int min_heads, below_blocks_per_sm, rounds, resident_per_sm;
};
inline int tail_rows_by_policy(int batch, int nheads, int hpb, int rows_per_head, int row_quantum, int sms,
                               const TailPolicy& t) {
  int rows = 0;
  const long long blocks = static_cast<long long>(batch) * (nheads / hpb);
  if (hpb >= t.min_heads && blocks < static_cast<long long>(t.below_blocks_per_sm) * sms)
    rows = t.rounds * t.resident_per_sm * sms / (2 * nheads / hpb);
  if (2 * rows > batch) rows = 0;
  return tail_launch_rows(output_only_tail_rows(rows), batch, hpb, rows_per_head, row_quantum);
}

// Halves the units per block (doubling the chunks): for a block whose per-block inputs do not fit.
inline void halve_units(Shape& s) {
  s.units /= 2;
  s.chunks *= 2;
  s.stages = std::min(s.units, kMaxStages);
}

// Static shared memory of a kernel plus the per-block reservation: what a block takes beyond its dynamic plan
// (queried from the runtime; an upper bound for the kernels of this library if the query fails).
template <typename Kernel>
inline int block_smem_overhead(Kernel kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return 6 * 1024;
  }
  return static_cast<int>(attr.sharedSizeBytes) + 1024;
}

// Whether a launch with `dynamic_bytes` needs the opt-in above the default 48 KB (static arrays count too).
inline bool needs_smem_opt_in(int dynamic_bytes, int overhead) { return dynamic_bytes + overhead > 48 * 1024; }

// Exclusive suffix sums of a window of up to 64 values held two per lane (record l in v0, record 32 + l in
// v1; records past the window hold 0 so every sum is exact at t = 1). Returns sum_{i>j} for both records of
// the lane and the total.
__device__ __forceinline__ void warp_suffix_sums(float v0, float v1, float& ex0, float& ex1, float& total) {
  const int lane = threadIdx.x % 32;
  float in0 = v0, in1 = v1;  // inclusive reverse scans
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float u0 = __shfl_down_sync(0xffffffffu, in0, off);
    const float u1 = __shfl_down_sync(0xffffffffu, in1, off);
    if (lane + off < 32) {
      in0 += u0;
      in1 += u1;
    }
  }
  const float total1 = __shfl_sync(0xffffffffu, in1, 0);
  const float next0 = __shfl_down_sync(0xffffffffu, in0, 1);
  const float next1 = __shfl_down_sync(0xffffffffu, in1, 1);
  ex1 = lane < 31 ? next1 : 0.f;
  ex0 = (lane < 31 ? next0 : 0.f) + total1;
  total = __shfl_sync(0xffffffffu, in0, 0) + total1;
}

// The same in segments of `seg` lanes (a power of two, 8 to 32; warp-uniform), a window of up to seg values per
// segment, one per lane: each segment's sums as a 32-lane scan would give them for its window alone, bit for bit
// (the 32-lane scan only adds the zeros of the lanes past a window).
__device__ __forceinline__ void segment_suffix_sums(float v, int seg, float& ex, float& total) {
  const int sl = threadIdx.x & (seg - 1);
  float in = v;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    if (off >= seg) break;
    const float u = __shfl_down_sync(0xffffffffu, in, off, seg);
    if (sl + off < seg) in += u;
  }
  const float next = __shfl_down_sync(0xffffffffu, in, 1, seg);
  ex = sl < seg - 1 ? next : 0.f;
  total = __shfl_sync(0xffffffffu, in, 0, seg);
}

// The same for a window of up to 32 values, one per lane: the one-segment case.
__device__ __forceinline__ void warp_suffix_sums(float v, float& ex, float& total) {
  segment_suffix_sums(v, 32, ex, total);
}

// A cursor as the kernels read it: the history clamped to [0, L - 1] and the origin wrapped into [0, L), so that a
// corrupted cursor never indexes outside the ring.
__device__ __forceinline__ int clamp_history(int history, int L) { return min(max(history, 0), L - 1); }
__device__ __forceinline__ int wrap_origin(int origin, int L) {
  return (origin < 0 || origin >= L) ? ((origin % L) + L) % L : origin;
}

__device__ __forceinline__ int ring_pos(int origin, int j, int L) {
  const int pos = origin + j;
  return pos >= L ? pos - L : pos;
}

// The latency route's fold (both families' conventional kernels): for j = 0 .. hist - 1 in that order,
// S += (w_j r_j) v_jᵀ over the thread's vectors s (Tiling Tl; its rows row0 + i * RPI), record j at ring position
// pos = ring_pos(origin, j, L). w_j: the window weight held by lane j % 32 (w0 for j < 32, w1 above); r_j: the
// record's per-row scalar, rows[pos * row_stride + i * RPI] (rows points at the thread's first row); v_j: the
// record's per-column vector, vecs + pos * vec_stride (the lane's columns). Mamba-2: r = x, v = B; GDN: r = u, v = k.
template <typename Tl, typename ActT>
__device__ __forceinline__ void fold_ring_records(float (&s)[Tl::KI][Tl::NV][Tl::VEC], int hist, int origin, int L,
                                                  float w0, float w1, const ActT* rows, int row_stride,
                                                  const ActT* vecs, int vec_stride, int col_lane) {
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI;
#pragma unroll 1
  for (int j = 0; j < hist; ++j) {
    const float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j % 32);
    const int pos = ring_pos(origin, j, L);
    float vj[NV][VEC];
#pragma unroll
    for (int c = 0; c < NV; ++c) load_vec<ActT, VEC>(vecs + pos * vec_stride + (c * LPR + col_lane) * VEC, vj[c]);
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      const float cr = wj * to_float(rows[pos * row_stride + i * RPI]);
#pragma unroll
      for (int c = 0; c < NV; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[i][c][e] = fmaf(cr, vj[c][e], s[i][c][e]);
    }
  }
}

// Streaming 16-byte store of the checkpoint (written at most once per step, not read again in it).
__device__ __forceinline__ void store_stream(void* p, uint4 v) { __stcs(reinterpret_cast<uint4*>(p), v); }

template <typename T, int VEC>
__device__ __forceinline__ uint4 pack(const float (&in)[VEC]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC; ++i) e[i] = from_float<T>(in[i]);
  return raw;
}

// Reduce-scatter of KI per-lane values over the LPR lanes of a row: afterwards each lane holds one row's sum
// over LPR / SHARE lanes (which row: scattered_row) and the SHARE lanes of a row hold disjoint partial sums.
template <int KI, int LPR>
__device__ __forceinline__ float reduce_scatter(float (&v)[KI]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int half = KI / 2, mask = LPR / 2; half >= 1; half /= 2, mask /= 2) {
    const bool upper = lane & mask;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half];
      const float keep = upper ? v[i + half] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
    }
  }
  return v[0];
}

// Instruction index (0..KI-1) whose rows reduce_scatter left in this lane.
template <int KI, int LPR>
__device__ __forceinline__ int scattered_instr(int lane) {
  int instr = 0;
#pragma unroll
  for (int half = KI / 2, mask = LPR / 2; half >= 1; half /= 2, mask /= 2)
    if (lane & mask) instr += half;
  return instr;
}

// Multiprocessor count of the current device, queried once per device.
inline cudaError_t device_sms(int& sms) {
  static int cache[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 64 && cache[device] > 0) {
    sms = cache[device];
    return cudaSuccess;
  }
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess && device < 64) cache[device] = sms;
  return err;
}

// Shared memory per multiprocessor of the current device, queried once per device.
inline cudaError_t device_smem_per_sm(int& bytes) {
  static int cache[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 64 && cache[device] > 0) {
    bytes = cache[device];
    return cudaSuccess;
  }
  err = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  if (err == cudaSuccess && device < 64) cache[device] = bytes;
  return err;
}

// Launches a decode kernel of the unit pipeline (one block per (batch row, group, chunk of units); the kernel
// takes (params, Shape, plan)): fewer units per block until two blocks fit on a multiprocessor (the per-block
// inputs grow with the units), the shared-memory opt-in, the grid. `plan(shape)` gives the kernel's shared-memory
// plan (a struct with `bytes`); `groups` is the number of groups (Mamba-2 B/C groups, GDN key heads);
// `overhead` is block_smem_overhead(kernel), which callers query once per kernel; `rows`: blocks along y (default:
// the batch).
template <typename Kernel, typename Params, typename PlanFn>
cudaError_t launch_unit_pipeline(Kernel kernel, int overhead, const Params& p, Shape shape, int groups, PlanFn plan,
                                 cudaStream_t stream, long long rows = -1) {
  int smem_per_sm = 0;
  cudaError_t err = device_smem_per_sm(smem_per_sm);
  if (err != cudaSuccess) return err;
  while (shape.units > 1 && 2 * (plan(shape).bytes + overhead) > smem_per_sm) halve_units(shape);
  const auto sp = plan(shape);
  if (needs_smem_opt_in(sp.bytes, overhead)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sp.bytes);
    if (err != cudaSuccess) return err;
  }
  const unsigned grid_rows = static_cast<unsigned>(rows < 0 ? p.batch : rows);  // rows < 0: one block row per batch row
  kernel<<<dim3(groups * shape.chunks, grid_rows), shape.warps * 32, sp.bytes, stream>>>(p, shape, sp);
  return cudaGetLastError();
}

}  // namespace replayssm
