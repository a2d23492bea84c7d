// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; docs/mamba2.md has the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes: one block per (tile of R state rows, head, batch row). Everything a block reads
// from HBM is copied into shared memory with cp.async as the block's first action (the checkpoint tile of
// at most 32 KiB and, for replay, the head's ring records of x (R rows), B and dt), so a resident block has
// all its reads in flight at once and the step costs one memory latency, not a chain of them. 8 threads per
// state row then take N/8 elements each as 16-byte vectors (the 8 lanes of a row read 128 contiguous bytes:
// conflict-free); y[p] = S[p,:]·C is a partial dot per thread reduced over those 8 lanes.
//
// ReplaySSM, per row of the batch, with h = records in the ring since the checkpoint S0 (cursor history) and
// the current token as record h (t = h + 1 records in the window; record j sits at ring position
// (origin + j) mod L):
//   w_j  = dt_j * exp(A * sum_{i>j} dt_i),   abar = exp(A * sum_i dt_i)
//   non-flush (h < L-1): y = abar (S0·C) + sum_j w_j (B_j·C) x_j; append (x, B, dt) at ring position h
//   flush     (h = L-1): S = abar S0 + sum_j (w_j x_j) B_jᵀ; store S; y = S·C; history := 0
// B_j·C depends on the group only; each block computes the t dot products it needs from shared memory (the
// ring's B records of a group come from L2 for all but the first of its H/G heads).
//
// Ring staging: when the whole ring of a head fits kRingStageBytes, every record is copied at once with the
// tile (the unused ones cost (L-t)/L of a small read); otherwise only the window's records are copied, after
// the cursor is known (one more latency, for large L x N only).
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kThreadsPerRow = 8;
constexpr int kBlockThreads = 256;
constexpr int kRowsPerPass = kBlockThreads / kThreadsPerRow;  // 32
constexpr int kTileBytes = 32 * 1024;                          // checkpoint bytes a block stages
constexpr int kRingStageBytes = 16 * 1024;                     // ring bytes staged before the cursor is known
constexpr int kMaxBufferLen = 64;
constexpr int kMinBlocksPerSM = 4;  // caps registers at 64 so that 4 tiles (128 KiB) are in flight per SM

// Most rows a tile may hold: kTileBytes of state, and at most 64 (replay) or 128 rows.
__host__ __device__ constexpr int max_tile_rows(int dstate, int state_bytes, bool replay) {
  return (replay ? 64 : 128) < kTileBytes / (dstate * state_bytes) ? (replay ? 64 : 128)
                                                                    : kTileBytes / (dstate * state_bytes);
}

// Rows per tile: a divisor of head_dim, a multiple of 8, at most max_tile_rows and at least head_dim / 8
// (one cursor replica per tile). The largest such tile wins once the grid has two blocks per SM; small
// batches take smaller tiles so that every SM has loads in flight.
// Worked examples (132 SMs, fp32): Super (H=128, P=64, N=128) batch 256 -> 64 rows (one 32 KiB tile per
// head); batch 1 -> 16 rows (512 blocks of 8 KiB). head_dim 80, dstate 128 -> 40 rows (80 would be 40 KiB).
inline int tile_rows(int head_dim, int dstate, int state_bytes, bool replay, int batch, int nheads, int sms) {
  const int cap = max_tile_rows(dstate, state_bytes, replay);
  int chosen = 0;
  for (int tiles = 1; tiles <= RSSM_CURSOR_REPLICAS; ++tiles) {
    const int rows = head_dim / tiles;
    if (head_dim % tiles || rows % 8 || rows > cap) continue;
    chosen = rows;
    if (static_cast<long long>(batch) * nheads * tiles >= 2LL * sms) break;
  }
  return chosen;
}

// Shared-memory layout of one block (bytes from the start of the dynamic allocation).
struct SmemLayout {
  size_t ring_x, ring_B, ring_dt, total;  // offsets of the replay ring copies; tile at 0
  static SmemLayout make(int rows, int dstate, int state_bytes, int act_bytes, int buffer_len, bool replay) {
    SmemLayout s{};
    size_t off = static_cast<size_t>(rows) * dstate * state_bytes;
    if (replay) {
      s.ring_x = off;  // [L][R] activation dtype, by ring position
      off += static_cast<size_t>(buffer_len) * rows * act_bytes;
      s.ring_B = off;  // [L][N] activation dtype, by ring position
      off += static_cast<size_t>(buffer_len) * dstate * act_bytes;
      s.ring_dt = off;  // [L] fp32, by ring position
      off += static_cast<size_t>(buffer_len) * sizeof(float);
    }
    s.total = off;
    return s;
  }
  static size_t ring_bytes(int rows, int dstate, int act_bytes, int buffer_len) {
    return static_cast<size_t>(buffer_len) * (static_cast<size_t>(rows + dstate) * act_bytes + sizeof(float));
  }
};

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

// Copies `bytes` (a multiple of 16) from global to shared memory with the block's threads.
__device__ __forceinline__ void stage_async(void* dst, const void* src, int bytes) {
  for (int c = threadIdx.x; c < bytes / 16; c += blockDim.x)
    cp_async16(static_cast<char*>(dst) + c * 16, static_cast<const char*>(src) + c * 16);
}

template <typename StateT, typename ActT, int N, bool REPLAY>
__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerSM)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const int R, const SmemLayout lay,
                  const bool stage_ring) {
  constexpr int TPR = kThreadsPerRow;
  constexpr int VEC = 16 / sizeof(StateT);  // state elements per 16-byte access
  constexpr int NV = N / (TPR * VEC);       // accesses per thread per row
  static_assert(NV >= 1 && N % (TPR * VEC) == 0, "dstate must split into 16-byte accesses over 8 threads");
  constexpr int MAXR = max_tile_rows(N, sizeof(StateT), REPLAY);
  constexpr int PASSES = MAXR / kRowsPerPass > 0 ? MAXR / kRowsPerPass : 1;

  extern __shared__ float4 dyn_smem[];
  char* smem = reinterpret_cast<char*>(dyn_smem);
  StateT* tile_s = reinterpret_cast<StateT*>(smem);            // [R][N] checkpoint rows
  ActT* rx_s = reinterpret_cast<ActT*>(smem + lay.ring_x);      // [L][R] x records (replay)
  ActT* rB_s = reinterpret_cast<ActT*>(smem + lay.ring_B);      // [L][N] B records (replay)
  float* rdt_s = reinterpret_cast<float*>(smem + lay.ring_dt);  // [L] dt records (replay)
  __shared__ float Bs[N], Cs[N];         // current token's B and C, fp32
  __shared__ float xcur[MAXR];           // current token's x for the tile's rows
  __shared__ float coef[kMaxBufferLen];  // w_j (B_j·C) on non-flush rows, w_j on flush rows
  __shared__ float s_abar;
  __shared__ int s_hist, s_origin;

  const int b = blockIdx.z;
  const int head = blockIdx.y;
  const int row0 = blockIdx.x * R;  // first head row of this tile
  const int slot_raw = p.slot_idx ? p.slot_idx[b] : b;
  if (slot_raw == p.pad_slot_id || slot_raw < 0 || slot_raw >= p.num_slots) return;  // padding: touch nothing
  const int64_t slot = slot_raw;
  const int H = p.nheads, P = p.head_dim, L = p.buffer_len;
  const int group = head / (H / p.ngroups);
  const int rows_per_pass = blockDim.x / TPR;  // min(R, 32)
  const int r = threadIdx.x / TPR;            // row within a pass
  const int k = threadIdx.x % TPR;

  // ---- Phase 0: issue every read that does not depend on the cursor.
  StateT* gstate = static_cast<StateT*>(p.state) + ((slot * H + head) * P + row0) * N;
  stage_async(tile_s, gstate, R * N * static_cast<int>(sizeof(StateT)));
  const ActT* ring_x = nullptr;
  const ActT* ring_B = nullptr;
  if constexpr (REPLAY) {
    ring_x = static_cast<const ActT*>(p.ring_x) + (slot * H + head) * L * P + row0;
    ring_B = static_cast<const ActT*>(p.ring_B) + (slot * p.ngroups + group) * L * N;
    if (stage_ring) {
      for (int c = threadIdx.x; c < L * (R * static_cast<int>(sizeof(ActT)) / 16); c += blockDim.x) {
        const int pos = c / (R * sizeof(ActT) / 16), part = c % (R * sizeof(ActT) / 16);
        cp_async16(reinterpret_cast<char*>(rx_s + pos * R) + part * 16,
                   reinterpret_cast<const char*>(ring_x + pos * P) + part * 16);
      }
      stage_async(rB_s, ring_B, L * N * static_cast<int>(sizeof(ActT)));
    }
    const float* ring_dt = p.ring_dt + (slot * H + head) * L;
    for (int pos = threadIdx.x; pos < L; pos += blockDim.x) rdt_s[pos] = ring_dt[pos];
    if (threadIdx.x == 0) {
      // This block's cursor replica (common/types.h); clamped so that a corrupted cursor never indexes
      // outside the ring.
      const int32_t* mine = p.cursor + ((slot * H + head) * RSSM_CURSOR_REPLICAS + blockIdx.x) * RSSM_CURSOR_FIELDS;
      s_hist = min(max(mine[RSSM_CURSOR_HISTORY], 0), L - 1);
      s_origin = ((mine[RSSM_CURSOR_ORIGIN] % L) + L) % L;
    }
  }
  cp_async_commit();

  const ActT* x_t = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head * p.x_head_stride;
  const ActT* B_t = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* C_t = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  const ActT* z_t = p.z ? static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head * p.z_head_stride : nullptr;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    Bs[n] = to_float(B_t[n]);
    Cs[n] = to_float(C_t[n]);
  }
  for (int rr = threadIdx.x; rr < R; rr += blockDim.x) xcur[rr] = to_float(x_t[row0 + rr]);
  float dt = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + head * p.dt_head_stride]);
  if (p.dt_bias) dt += p.dt_bias[head];
  if (p.dt_softplus) dt = softplus_thresholded(dt);
  const float A = p.A[head];
  const float Dh = p.D ? p.D[head] : 0.f;
  // The gate of each of this thread's rows (read by lane k == 0 of the row, which writes y).
  float zrow[PASSES];
#pragma unroll
  for (int ps = 0; ps < PASSES; ++ps) {
    const int rr = r + ps * rows_per_pass;
    zrow[ps] = (z_t && k == 0 && rr < R) ? to_float(z_t[row0 + rr]) : 0.f;
  }

  // ---- Phase 1 (replay): the window's coefficients.
  bool flush = true;
  int hist = 0, origin = 0, t = 1;
  float abar = 1.f;
  if constexpr (REPLAY) {
    if (stage_ring) cp_async_wait_all();
    __syncthreads();
    hist = s_hist;
    origin = s_origin;
    flush = hist == L - 1;
    t = hist + 1;
    if (!stage_ring) {
      // Only the window's records, now that the cursor is known.
      for (int c = threadIdx.x; c < hist * (R * static_cast<int>(sizeof(ActT)) / 16); c += blockDim.x) {
        const int j = c / (R * sizeof(ActT) / 16), part = c % (R * sizeof(ActT) / 16);
        const int pos = ring_pos(origin, j, L);
        cp_async16(reinterpret_cast<char*>(rx_s + pos * R) + part * 16,
                   reinterpret_cast<const char*>(ring_x + pos * P) + part * 16);
      }
      for (int c = threadIdx.x; c < hist * (N * static_cast<int>(sizeof(ActT)) / 16); c += blockDim.x) {
        const int j = c / (N * sizeof(ActT) / 16), part = c % (N * sizeof(ActT) / 16);
        const int pos = ring_pos(origin, j, L);
        cp_async16(reinterpret_cast<char*>(rB_s + pos * N) + part * 16,
                   reinterpret_cast<const char*>(ring_B + pos * N) + part * 16);
      }
      cp_async_commit();
      cp_async_wait_all();
      __syncthreads();
    }
    // Every warp computes the decay weights of the whole window (two records per lane), then the
    // coefficients of the records it owns: j = warp, warp + nwarps, ...
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    auto window_dt = [&](int j) -> float {
      if (j > hist) return 0.f;
      return j == hist ? dt : rdt_s[ring_pos(origin, j, L)];
    };
    const float dt0 = window_dt(lane), dt1 = window_dt(lane + 32);
    float ex0, ex1, total;
    warp_suffix_sums(dt0, dt1, ex0, ex1, total);
    const float w0 = dt0 * expf(A * ex0), w1 = dt1 * expf(A * ex1);
    for (int j = warp; j < t; j += nwarps) {
      const float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j % 32);
      float c = wj;
      if (!flush) {
        const ActT* Bj = rB_s + ring_pos(origin, j, L) * N;
        float d = 0.f;
#pragma unroll
        for (int n = lane; n < N; n += 32) d = fmaf(j == hist ? Bs[n] : to_float(Bj[n]), Cs[n], d);
        c *= group_sum<32>(d);
      }
      if (lane == 0) coef[j] = c;
    }
    if (threadIdx.x == 0) s_abar = expf(A * total);
  }
  cp_async_wait_all();
  __syncthreads();
  if constexpr (REPLAY) abar = s_abar;

  // ---- Phase 2: this thread's rows rr = r + rows_per_pass * pass; rows past R compute on zeros (their
  // warp still takes part in the reductions) and store nothing.
  ActT* y_t = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head * p.y_head_stride;
  const int pos_new = REPLAY ? ring_pos(origin, hist, L) : 0;
  auto x_rec = [&](int j, int rr) -> float {  // x of window record j for tile row rr
    return j == hist ? xcur[rr] : to_float(rx_s[ring_pos(origin, j, L) * R + rr]);
  };
  auto B_rec = [&](int j, int n) -> float { return j == hist ? Bs[n] : to_float(rB_s[ring_pos(origin, j, L) * N + n]); };
  auto finish_row = [&](int ps, float acc, const float (*state_row)[VEC]) {
    const int rr = r + ps * rows_per_pass;
    float yv = group_sum<TPR>(acc);
    if (rr >= R) return;
    const int prow = row0 + rr;
    if (k == 0) {
      yv = fmaf(Dh, xcur[rr], yv);
      if (z_t) yv *= silu_gate(zrow[ps]);
      y_t[prow] = from_float<ActT>(yv);  // WRITES y[b, head, prow]
      if (REPLAY && !flush) {
        // WRITES ring_x[slot, head, pos_new, prow] (an exact copy of x: from_float(to_float(v)) == v)
        static_cast<ActT*>(p.ring_x)[((slot * H + head) * L + pos_new) * P + prow] = from_float<ActT>(xcur[rr]);
      }
    }
    if (state_row) {
#pragma unroll
      for (int i = 0; i < NV; ++i) store_vec<StateT, VEC>(gstate + rr * N + (i * TPR + k) * VEC, state_row[i]);  // WRITES state
    }
  };
  auto load_row = [&](int ps, float (&row)[NV][VEC]) {
    const int rr = r + ps * rows_per_pass;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (rr < R) {
        load_vec<StateT, VEC>(tile_s + rr * N + (i * TPR + k) * VEC, row[i]);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) row[i][e] = 0.f;
      }
    }
  };

  if (!REPLAY) {
    const float dA = expf(A * dt);
#pragma unroll 1
    for (int ps = 0; ps < PASSES; ++ps) {
      const int rr = min(r + ps * rows_per_pass, R - 1);
      float row[NV][VEC];
      load_row(ps, row);
      const float cx = dt * xcur[rr];
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int n = (i * TPR + k) * VEC + e;
          row[i][e] = fmaf(cx, Bs[n], row[i][e] * dA);
          acc = fmaf(row[i][e], Cs[n], acc);
        }
      }
      finish_row(ps, acc, row);
    }
  } else if (!flush) {
#pragma unroll 1
    for (int ps = 0; ps < PASSES; ++ps) {
      const int rr = min(r + ps * rows_per_pass, R - 1);
      float row[NV][VEC];
      load_row(ps, row);
      float dot = 0.f, extra = 0.f;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) dot = fmaf(row[i][e], Cs[(i * TPR + k) * VEC + e], dot);
      }
      for (int j = k; j < t; j += TPR) extra = fmaf(coef[j], x_rec(j, rr), extra);
      finish_row(ps, fmaf(abar, dot, extra), nullptr);
    }
  } else {
    float s[PASSES][NV][VEC];
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      load_row(ps, s[ps]);
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[ps][i][e] *= abar;
      }
    }
    for (int j = 0; j < t; ++j) {
#pragma unroll
      for (int ps = 0; ps < PASSES; ++ps) {
        const float cx = coef[j] * x_rec(j, min(r + ps * rows_per_pass, R - 1));
#pragma unroll
        for (int i = 0; i < NV; ++i) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) s[ps][i][e] = fmaf(cx, B_rec(j, (i * TPR + k) * VEC + e), s[ps][i][e]);
        }
      }
    }
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc = fmaf(s[ps][i][e], Cs[(i * TPR + k) * VEC + e], acc);
      }
      finish_row(ps, acc, s[ps]);
    }
  }

  if constexpr (REPLAY) {
    if (!flush) {
      // WRITES ring_dt of (slot, head) and, from one block per group, ring_B of (slot, group).
      if (threadIdx.x == 0) p.ring_dt[(slot * H + head) * L + pos_new] = dt;
      if (blockIdx.x == 0 && head % (H / p.ngroups) == 0) {
        ActT* rB_new = static_cast<ActT*>(p.ring_B) + ((slot * p.ngroups + group) * L + pos_new) * N;
        for (int n = threadIdx.x; n < N; n += blockDim.x) rB_new[n] = B_t[n];
      }
    }
    if (threadIdx.x == 0) {
      // WRITES the cursor replicas this block owns in this launch: blockIdx.x, + gridDim.x, ... (no other
      // block reads or writes them in this launch).
      int32_t* cur = p.cursor + (slot * H + head) * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
      for (int rep = blockIdx.x; rep < RSSM_CURSOR_REPLICAS; rep += gridDim.x)
        cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
    }
  }
}

template <typename StateT, typename ActT, int N, bool REPLAY>
static cudaError_t launch_mode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const int rows = tile_rows(p.head_dim, N, sizeof(StateT), REPLAY, p.batch, p.nheads, sms);
  const SmemLayout lay = SmemLayout::make(rows, N, sizeof(StateT), sizeof(ActT), p.buffer_len, REPLAY);
  const bool stage_ring = SmemLayout::ring_bytes(rows, N, sizeof(ActT), p.buffer_len) <= kRingStageBytes;
  auto kernel = decode_kernel<StateT, ActT, N, REPLAY>;
  if (lay.total > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(lay.total));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.head_dim / rows, p.nheads, p.batch);
  const int threads = rows < kRowsPerPass ? rows * kThreadsPerRow : kBlockThreads;
  kernel<<<grid, threads, lay.total, stream>>>(p, rows, lay, stage_ring);
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
