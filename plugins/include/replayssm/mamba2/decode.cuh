// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; docs/mamba2.md has the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes: one block per (batch row, head, tile of TR state rows), TR = warps x RW. Every
// thread owns 32 checkpoint elements as 16-byte vectors, all loaded into registers at the start of the block
// and left in flight while the block stages the small inputs (ring records, cursor, current token) in shared
// memory and computes the decay weights and B_j·C products. The only memory work on the critical path is one
// streaming read of the tile (plus its store on flush rows), so many blocks per SM keep HBM busy.
//
// In a warp, LPR lanes cover one state row (NV vectors each); an access instruction covers RPI = 32 / LPR rows;
// a thread holds KI such instructions (RW = KI x RPI rows per warp). y[p] = S[p,:]·C starts as one partial dot
// per (thread, instruction) and is reduce-scattered across the lanes of a row, leaving SHARE lanes per row that
// split the replayed terms of that row between them before the last two or three shuffles.
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
#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kMaxBufferLen = 64;
constexpr int kMaxWarps = 8;         // warps per block (256 threads)
constexpr int kElemsPerThread = 32;  // checkpoint elements each thread holds in registers

// Thread-to-state mapping for a checkpoint dtype and dstate (see the file comment).
template <typename StateT, int N>
struct Tiling {
  static constexpr int VEC = 16 / sizeof(StateT);            // elements per 16-byte vector
  static constexpr int VPT = kElemsPerThread / VEC;          // vectors per thread
  static constexpr int LPR = N / VEC < 32 ? N / VEC : 32;    // lanes per state row
  static constexpr int NV = N / VEC / LPR;                   // vectors per lane and row
  static constexpr int RPI = 32 / LPR;                       // rows per access instruction
  static constexpr int KI = VPT / NV;                        // instructions (row groups) per thread
  static constexpr int RW = KI * RPI;                        // rows per warp
  static constexpr int SHARE = LPR / KI;                     // lanes holding one row after the reduce-scatter
  static_assert(NV >= 1 && N % (VEC * LPR) == 0, "dstate must split into 16-byte vectors");
  static_assert(KI >= 1 && KI <= LPR && SHARE >= 1, "rows of a thread must reduce-scatter within a row's lanes");
  static_assert(16 % RW == 0, "rows per warp must divide 16 (every supported head_dim is a multiple of 16)");
};

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Launch shape: tiles per head (a power of two <= RSSM_CURSOR_REPLICAS) and warps per block. The fewest
// tiles with at most kMaxWarps warps; small batches split heads further so that every SM gets blocks.
struct Shape {
  int tiles, warps, rows;
};

inline Shape launch_shape(int head_dim, int rows_per_warp, long long batch_heads, int sms) {
  const int head_warps = head_dim / rows_per_warp;
  int tiles = 1;
  while (head_warps / tiles > kMaxWarps || head_warps % tiles) tiles *= 2;
  while (tiles * 2 <= RSSM_CURSOR_REPLICAS && head_warps % (tiles * 2) == 0 && batch_heads * tiles < 2LL * sms)
    tiles *= 2;
  return Shape{tiles, head_warps / tiles, head_dim / tiles};
}

// Dynamic shared memory of one block, byte offsets (all 16-byte aligned).
struct SmemPlan {
  int ring_B, ring_x, ring_dt, x, z, bytes;
};

inline SmemPlan smem_plan(int L, int N, int rows, int act_bytes) {
  SmemPlan s{};
  int off = 0;
  auto take = [&](int bytes) {
    const int at = off;
    off += round_up(bytes, 16);
    return at;
  };
  s.ring_B = take(L * N * act_bytes);
  s.ring_x = take(L * rows * act_bytes);
  s.ring_dt = take(round_up(L, 4) * 4);
  s.x = take(rows * act_bytes);
  s.z = take(rows * act_bytes);
  s.bytes = off;
  return s;
}

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

__device__ __forceinline__ int ring_pos(int origin, int j, int L) {
  const int pos = origin + j;
  return pos >= L ? pos - L : pos;
}

// Streaming 16-byte global accesses of the checkpoint (read once, written at most once per step).
__device__ __forceinline__ uint4 load_stream(const void* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ void store_stream(void* p, uint4 v) { __stcs(reinterpret_cast<uint4*>(p), v); }

template <typename T, int VEC>
__device__ __forceinline__ void unpack(const uint4& raw, float (&out)[VEC]) {
  static_assert(VEC * sizeof(T) == 16, "one 16-byte vector");
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = to_float(e[i]);
}

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

template <typename StateT, typename ActT, int N, bool REPLAY>
__global__ void __launch_bounds__(kMaxWarps * 32, 3)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const Shape shape, const SmemPlan sp) {
  using Tl = Tiling<StateT, N>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;

  extern __shared__ __align__(16) char smem[];
  __shared__ float s_w[kMaxBufferLen];   // w_j of the window
  __shared__ float s_bc[kMaxBufferLen];  // B_j·C of the window (non-flush)
  __shared__ float s_abar;

  const int H = p.nheads, P = p.head_dim, L = REPLAY ? p.buffer_len : 1, T = shape.tiles, TR = shape.rows;
  const int b = blockIdx.y, head = blockIdx.x / T, tile = blockIdx.x % T;
  const int row0 = tile * TR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hpg = H / p.ngroups, group = head / hpg;

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing
  const int64_t sh = static_cast<int64_t>(slot) * H + head;

  // ---- Issue the checkpoint tile loads first: they stay in flight through the staging and phase 1.
  const int seg = lane / LPR, col_lane = lane % LPR;
  char* gstate = static_cast<char*>(p.state) + ((sh * P + row0 + warp * RW + seg) * N) * sizeof(StateT);
  uint4 raw[KI][NV];
#pragma unroll
  for (int i = 0; i < KI; ++i)
#pragma unroll
    for (int v = 0; v < NV; ++v)
      raw[i][v] = load_stream(gstate + (static_cast<int64_t>(i * RPI) * N + (v * LPR + col_lane) * VEC) * sizeof(StateT));

  // Current token: this lane's columns of B and C, the head's scalars.
  const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  float Bc[NV][VEC], Cc[NV][VEC];
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    load_vec<ActT, VEC>(Bg + (v * LPR + col_lane) * VEC, Bc[v]);
    load_vec<ActT, VEC>(Cg + (v * LPR + col_lane) * VEC, Cc[v]);
  }
  float dt = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + head * p.dt_head_stride]);
  dt += p.dt_bias ? p.dt_bias[head] : 0.f;
  if (p.dt_softplus) dt = softplus_thresholded(dt);
  const float A = p.A[head];

  int hist = 0, origin = 0;
  if (REPLAY) {
    // This block's cursor replica (common/types.h); clamped so that a corrupted cursor never indexes outside
    // the ring.
    const int2 cur = *reinterpret_cast<const int2*>(p.cursor + (sh * RSSM_CURSOR_REPLICAS + tile) * RSSM_CURSOR_FIELDS);
    hist = min(max(cur.x, 0), L - 1);
    origin = ((cur.y % L) + L) % L;
  }
  const bool flush = !REPLAY || hist == L - 1;
  const int t = hist + 1;

  // ---- Stage the small inputs in shared memory with asynchronous copies (no register round trip, so no
  // load waits behind another): the current x and z rows of the tile and (replay) the whole ring of the head
  // (B records of the group, x records of the tile rows, dt), so that no copy waits for the cursor either.
  // TR * sizeof(ActT) is a multiple of 8 bytes and every row starts on 8 (x, z, ring x) or 16 bytes.
  ActT* rB_s = reinterpret_cast<ActT*>(smem + sp.ring_B);
  ActT* rx_s = reinterpret_cast<ActT*>(smem + sp.ring_x);
  float* rdt_s = reinterpret_cast<float*>(smem + sp.ring_dt);
  ActT* x_s = reinterpret_cast<ActT*>(smem + sp.x);
  ActT* z_s = reinterpret_cast<ActT*>(smem + sp.z);
  {
    const int chunks = TR * static_cast<int>(sizeof(ActT)) / 8;  // 8-byte chunks per row of the tile
    const ActT* xg = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head * p.x_head_stride + row0;
    for (int i = threadIdx.x; i < chunks; i += blockDim.x) cp_async<8>(x_s + i * 8 / sizeof(ActT), xg + i * 8 / sizeof(ActT));
    if (p.z) {
      const ActT* zg = static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head * p.z_head_stride + row0;
      for (int i = threadIdx.x; i < chunks; i += blockDim.x) cp_async<8>(z_s + i * 8 / sizeof(ActT), zg + i * 8 / sizeof(ActT));
    }
    if (REPLAY) {
      const int64_t sg = static_cast<int64_t>(slot) * p.ngroups + group;
      const char* rBg = reinterpret_cast<const char*>(static_cast<const ActT*>(p.ring_B) + sg * L * N);
      const int nB = L * N * static_cast<int>(sizeof(ActT)) / 16;
      for (int i = threadIdx.x; i < nB; i += blockDim.x) cp_async<16>(reinterpret_cast<char*>(rB_s) + i * 16, rBg + i * 16);
      const ActT* rxg = static_cast<const ActT*>(p.ring_x) + sh * L * P + row0;
      for (int i = threadIdx.x; i < L * chunks; i += blockDim.x) {
        const int pos = i / chunks, c = i % chunks;
        cp_async<8>(reinterpret_cast<char*>(rx_s) + i * 8, reinterpret_cast<const char*>(rxg + pos * P) + c * 8);
      }
      const int ldt = round_up(L, 4);
      for (int i = threadIdx.x; i < ldt / 4; i += blockDim.x) cp_async<16>(rdt_s + i * 4, p.ring_dt + sh * ldt + i * 4);
    }
    cp_async_wait_all();
  }
  __syncthreads();

  // ---- Phase 1 (replay): decay weights (warp 0) and, on non-flush rows, B_j·C for the window.
  auto x_rec = [&](int j, int r) -> float {  // x of window record j for tile row r
    return j == hist ? to_float(x_s[r]) : to_float(rx_s[ring_pos(origin, j, L) * TR + r]);
  };
  auto B_rec = [&](int j, float (&out)[NV][VEC]) {  // this lane's columns of B of window record j
    if (j == hist) {
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int e = 0; e < VEC; ++e) out[v][e] = Bc[v][e];
    } else {
      const ActT* Bj = rB_s + ring_pos(origin, j, L) * N;
#pragma unroll
      for (int v = 0; v < NV; ++v) load_vec<ActT, VEC>(Bj + (v * LPR + col_lane) * VEC, out[v]);
    }
  };
  float abar = 0.f;
  if (REPLAY) {
    if (warp == 0) {
      auto window_dt = [&](int j) -> float {
        if (j > hist) return 0.f;
        return j == hist ? dt : rdt_s[ring_pos(origin, j, L)];
      };
      const float dt0 = window_dt(lane), dt1 = window_dt(lane + 32);
      float ex0, ex1, total;
      warp_suffix_sums(dt0, dt1, ex0, ex1, total);
      s_w[lane] = dt0 * expf(A * ex0);
      s_w[lane + 32] = dt1 * expf(A * ex1);
      if (lane == 0) s_abar = expf(A * total);
    }
    if (!flush) {
      // Segment seg of warp w takes records w * RPI + seg, + nseg, ...; the loop is warp-uniform (shuffles).
      const int nseg = blockDim.x / 32 * RPI;
      for (int j0 = warp * RPI; j0 < t; j0 += nseg) {
        const int j = j0 + seg;
        float d = 0.f;
        if (j < t) {
          float Bj[NV][VEC];
          B_rec(j, Bj);
#pragma unroll
          for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) d = fmaf(Bj[v][e], Cc[v][e], d);
        }
        d = group_sum<LPR>(d);
        if (col_lane == 0 && j < t) s_bc[j] = d;
      }
    }
    __syncthreads();
    abar = s_abar;
  } else {
    abar = expf(A * dt);  // the replay weights at t = 1: abar = exp(A dt), w_0 = dt
  }
  auto weight = [&](int j) { return REPLAY ? s_w[j] : dt; };

  // ---- Phase 2: per-lane partial dots with C, reduce-scattered across each row's lanes.
  auto lane_dot = [&](const float (&s)[NV][VEC]) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};  // four chains: the sum is not one long dependency
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e % 4] = fmaf(s[v][e], Cc[v][e], acc[e % 4]);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
  };
  const int my_row = warp * RW + scattered_instr<KI, LPR>(lane) * RPI + seg;  // tile row this lane finishes
  const int q = lane % SHARE;
  float part[KI];
  float yv;
  if (flush) {
    // S = abar S0 + sum_j (w_j x_j) B_jᵀ, stored; y = S·C.
    float s[KI][NV][VEC];
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        unpack<StateT, VEC>(raw[i][v], s[i][v]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[i][v][e] *= abar;
      }
    for (int j = 0; j < t; ++j) {
      float Bj[NV][VEC];
      B_rec(j, Bj);
      const float wj = weight(j);
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        const float cx = wj * x_rec(j, warp * RW + i * RPI + seg);
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
      for (int v = 0; v < NV; ++v)  // WRITES state (the new checkpoint)
        store_stream(gstate + (static_cast<int64_t>(i * RPI) * N + (v * LPR + col_lane) * VEC) * sizeof(StateT),
                     pack<StateT, VEC>(s[i][v]));
    }
    yv = reduce_scatter<KI, LPR>(part);
  } else {
    // y = abar (S0·C) + sum_j w_j (B_j·C) x_j; the SHARE lanes of a row split the window between them.
#pragma unroll
    for (int i = 0; i < KI; ++i) {
      float s[NV][VEC];
#pragma unroll
      for (int v = 0; v < NV; ++v) unpack<StateT, VEC>(raw[i][v], s[v]);
      part[i] = lane_dot(s);
    }
    yv = abar * reduce_scatter<KI, LPR>(part);
    for (int j = q; j < t; j += SHARE) yv = fmaf(s_w[j] * s_bc[j], x_rec(j, my_row), yv);
  }
  yv = group_sum<SHARE>(yv);

  // ---- Epilogue: y, and (replay) the ring record and the cursor.
  const int pos_new = REPLAY ? ring_pos(origin, hist, L) : 0;
  if (q == 0) {
    const float xv = to_float(x_s[my_row]);
    float out = fmaf(p.D ? p.D[head] : 0.f, xv, yv);
    if (p.z) out *= silu_gate(to_float(z_s[my_row]));
    // WRITES y[b, head, row0 + my_row]
    static_cast<ActT*>(p.y)[b * p.y_batch_stride + head * p.y_head_stride + row0 + my_row] = from_float<ActT>(out);
    // WRITES ring_x[slot, head, pos_new, row0 + my_row] (from_float(to_float(v)) == v: an exact copy)
    if (REPLAY && !flush) static_cast<ActT*>(p.ring_x)[(sh * L + pos_new) * P + row0 + my_row] = from_float<ActT>(xv);
  }
  if (REPLAY) {
    if (!flush) {
      // WRITES ring_dt of (slot, head) and, from one block per group, ring_B of (slot, group).
      if (threadIdx.x == 0) p.ring_dt[sh * round_up(L, 4) + pos_new] = dt;
      if (tile == 0 && head % hpg == 0 && warp == 0 && seg == 0) {
        ActT* rB = static_cast<ActT*>(p.ring_B) + ((static_cast<int64_t>(slot) * p.ngroups + group) * L + pos_new) * N;
#pragma unroll
        for (int v = 0; v < NV; ++v) store_vec<ActT, VEC>(rB + (v * LPR + col_lane) * VEC, Bc[v]);
      }
    }
    if (threadIdx.x == 0) {
      // WRITES the cursor replicas this block owns: tile, tile + T, ... (no other block of this launch reads
      // or writes them).
      int32_t* cur = p.cursor + sh * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
      for (int rep = tile; rep < RSSM_CURSOR_REPLICAS; rep += T)
        cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
    }
  }
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

template <typename StateT, typename ActT, int N, bool REPLAY>
static cudaError_t launch_mode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const Shape shape = launch_shape(p.head_dim, Tl::RW, static_cast<long long>(p.batch) * p.nheads, sms);
  const SmemPlan sp = smem_plan(REPLAY ? p.buffer_len : 0, N, shape.rows, sizeof(ActT));
  auto kernel = decode_kernel<StateT, ActT, N, REPLAY>;
  if (sp.bytes > 48 * 1024) {  // only long rings of wide records (L > 32 with fp32 records or dstate 256)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sp.bytes);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.nheads * shape.tiles, p.batch);
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
