// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; docs/mamba2.md has the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes: one block of 256 threads per (tile of R state rows, head, batch row). The tile
// (R x N, at most 32 KiB) is copied into shared memory with cp.async as the block's first action, so each
// resident block keeps a whole tile of HBM reads in flight whatever else it waits for. 8 threads per state
// row then take N/8 elements each as 16-byte vectors (the 8 lanes of a row read 128 contiguous bytes:
// conflict-free); the output y[p] = S[p,:]·C is a partial dot per thread reduced over those 8 lanes. A block
// covers its R rows in passes of 32.
//
// ReplaySSM, per row of the batch, with h = records in the ring since the checkpoint S0 (cursor history) and
// the current token as record h (t = h + 1 records in the window):
//   w_j  = dt_j * exp(A * sum_{i>j} dt_i),   abar = exp(A * sum_i dt_i)
//   non-flush (h < L-1): y = abar (S0·C) + sum_j w_j (B_j·C) x_j; append (x, B, dt) at ring position h
//   flush     (h = L-1): S = abar S0 + sum_j (w_j x_j) B_jᵀ; store S; y = S·C; history := 0
// B_j·C depends on the group only; each block computes the t dot products it needs (the ring's B records of
// a group stay in L2 while its H/G heads read them).
//
// Latency chain of a replay block: {checkpoint tile (async), cursor, current token} -> barrier ->
// {x, dt and B windows} -> barrier (tile landed) -> FMAs and stores. Each block reads and advances its own
// cursor replica (common/types.h), so the cursor adds no synchronisation between blocks.
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
constexpr int kMaxBufferLen = 64;
constexpr int kFlushChunk = 8;  // B records staged in shared memory at a time by a flushing block
constexpr int kMinBlocksPerSM = 4;  // caps registers at 64 so that 4 tiles (128 KiB) are in flight per SM

// Most rows a tile may hold: kTileBytes of state, and at most 64 rows for replay (its x window is L x R).
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

// Dynamic shared memory of one block: the tile, then (replay) the x window [L][R] and the flush B chunk.
inline size_t smem_bytes(int rows, int dstate, int state_bytes, int buffer_len, bool replay) {
  size_t bytes = static_cast<size_t>(rows) * dstate * state_bytes;
  if (replay) bytes += sizeof(float) * (static_cast<size_t>(buffer_len) * rows + kFlushChunk * dstate);
  return bytes;
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

template <typename StateT, typename ActT, int N, bool REPLAY>
__global__ void __launch_bounds__(kBlockThreads, kMinBlocksPerSM)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const int R) {
  constexpr int TPR = kThreadsPerRow;
  constexpr int VEC = 16 / sizeof(StateT);  // state elements per 16-byte access
  constexpr int NV = N / (TPR * VEC);       // accesses per thread per row
  static_assert(NV >= 1 && N % (TPR * VEC) == 0, "dstate must split into 16-byte accesses over 8 threads");
  constexpr int PASSES = max_tile_rows(N, sizeof(StateT), REPLAY) / kRowsPerPass > 0
                             ? max_tile_rows(N, sizeof(StateT), REPLAY) / kRowsPerPass
                             : 1;

  extern __shared__ float4 dyn_smem[];
  StateT* tile_s = reinterpret_cast<StateT*>(dyn_smem);                   // [R][N] checkpoint rows
  float* xs = reinterpret_cast<float*>(tile_s + static_cast<size_t>(R) * N);  // [L][R] x window (replay)
  float* Bw = xs + static_cast<size_t>(p.buffer_len) * R;                    // [kFlushChunk][N] (flush)
  __shared__ float Bs[N], Cs[N];             // current token's B and C, fp32
  __shared__ float coef[kMaxBufferLen];      // w_j (B_j·C) on non-flush rows, w_j on flush rows
  __shared__ float bc[kMaxBufferLen];        // B_j·C
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

  // The dominant load, first and asynchronous: the checkpoint tile (contiguous R*N elements).
  StateT* gstate = static_cast<StateT*>(p.state) + ((slot * H + head) * P + row0) * N;
  {
    const int chunks = R * N * static_cast<int>(sizeof(StateT)) / 16;
    const char* src = reinterpret_cast<const char*>(gstate);
    char* dst = reinterpret_cast<char*>(tile_s);
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) cp_async16(dst + c * 16, src + c * 16);
    cp_async_commit();
  }

  // Replay: this block's cursor replica (see common/types.h).
  int32_t* cur = REPLAY ? p.cursor + (slot * H + head) * (RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS) : nullptr;
  if (REPLAY && threadIdx.x == 0) {
    const int32_t* mine = cur + blockIdx.x * RSSM_CURSOR_FIELDS;
    s_hist = min(max(mine[RSSM_CURSOR_HISTORY], 0), L - 1);  // clamped: a corrupted cursor never indexes outside the ring
    s_origin = ((mine[RSSM_CURSOR_ORIGIN] % L) + L) % L;
  }

  const ActT* x_t = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head * p.x_head_stride;
  const ActT* B_t = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
  const ActT* C_t = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    Bs[n] = to_float(B_t[n]);
    Cs[n] = to_float(C_t[n]);
  }
  float dt = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + head * p.dt_head_stride]);
  if (p.dt_bias) dt += p.dt_bias[head];
  if (p.dt_softplus) dt = softplus_thresholded(dt);
  const float A = p.A[head];
  __syncthreads();

  bool flush = true;
  int hist = 0, origin = 0, t = 1;
  float abar = 1.f;
  const ActT* rB = nullptr;
  (void)abar;
  if constexpr (REPLAY) {
    hist = s_hist;
    origin = s_origin;
    flush = hist == L - 1;
    t = hist + 1;
    const float* rdt = p.ring_dt + (slot * H + head) * L;
    const ActT* rx = static_cast<const ActT*>(p.ring_x) + (slot * H + head) * L * P;
    rB = static_cast<const ActT*>(p.ring_B) + (slot * p.ngroups + group) * L * N;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;

    // All window loads are issued before anything waits on them: dt (every warp keeps the whole window,
    // two records per lane), x for this tile's rows, B for the dot products.
    auto window_dt = [&](int j) -> float {
      if (j > hist) return 0.f;
      return j == hist ? dt : __ldg(rdt + ring_pos(origin, j, L));
    };
    const float dt0 = window_dt(lane), dt1 = window_dt(lane + 32);
    for (int idx = threadIdx.x; idx < t * R; idx += blockDim.x) {
      const int j = idx / R, rr = idx % R;
      xs[idx] = to_float(j == hist ? x_t[row0 + rr] : rx[ring_pos(origin, j, L) * P + row0 + rr]);
    }
    if (!flush) {
      for (int j = warp; j < t; j += nwarps) {
        const ActT* Bj = rB + ring_pos(origin, j, L) * N;
        float d = 0.f;
#pragma unroll
        for (int n = lane; n < N; n += 32) d = fmaf(j == hist ? Bs[n] : to_float(Bj[n]), Cs[n], d);
        d = group_sum<32>(d);
        if (lane == 0) bc[j] = d;
      }
      __syncwarp();
    }
    float ex0, ex1, total;
    warp_suffix_sums(dt0, dt1, ex0, ex1, total);
    const float w0 = dt0 * expf(A * ex0), w1 = dt1 * expf(A * ex1);
    for (int j = warp; j < t; j += nwarps) {
      const float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j % 32);
      if (lane == 0) coef[j] = flush ? wj : wj * bc[j];
    }
    if (threadIdx.x == 0) s_abar = expf(A * total);
  }
  cp_async_wait_all();
  __syncthreads();
  if constexpr (REPLAY) abar = s_abar;

  // Output, state store and ring record of one of this thread's rows (rr = r + 32 * pass). Rows past R
  // reduce zeros with their warp and store nothing.
  const ActT* z_t = p.z ? static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head * p.z_head_stride : nullptr;
  ActT* y_t = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head * p.y_head_stride;
  const int pos = REPLAY ? ring_pos(origin, hist, L) : 0;
  auto finish_row = [&](int rr, float acc, const float (*state_row)[VEC]) {
    float yv = group_sum<TPR>(acc);
    if (rr >= R) return;
    const int prow = row0 + rr;
    if (k == 0) {
      const float xv = to_float(x_t[prow]);
      if (p.D) yv = fmaf(p.D[head], xv, yv);
      if (z_t) yv *= silu_gate(to_float(z_t[prow]));
      y_t[prow] = from_float<ActT>(yv);  // WRITES y[b, head, prow]
      if (REPLAY && !flush) {
        // WRITES ring_x[slot, head, pos, prow]
        static_cast<ActT*>(p.ring_x)[((slot * H + head) * L + pos) * P + prow] = x_t[prow];
      }
    }
    if (state_row) {
#pragma unroll
      for (int i = 0; i < NV; ++i) store_vec<StateT, VEC>(gstate + rr * N + (i * TPR + k) * VEC, state_row[i]);  // WRITES state
    }
  };
  auto load_row = [&](int rr, float (&row)[NV][VEC]) {
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
      const int rr = r + ps * rows_per_pass;
      float row[NV][VEC];
      load_row(rr, row);
      const float cx = dt * (rr < R ? to_float(x_t[row0 + rr]) : 0.f);
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
      finish_row(rr, acc, row);
    }
  } else if (!flush) {
#pragma unroll 1
    for (int ps = 0; ps < PASSES; ++ps) {
      const int rr = r + ps * rows_per_pass;
      float row[NV][VEC];
      load_row(rr, row);
      float dot = 0.f, extra = 0.f;
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) dot = fmaf(row[i][e], Cs[(i * TPR + k) * VEC + e], dot);
      }
      const int rx = min(rr, R - 1);
      for (int j = k; j < t; j += TPR) extra = fmaf(coef[j], xs[j * R + rx], extra);
      finish_row(rr, fmaf(abar, dot, extra), nullptr);
    }
  } else {
    float s[PASSES][NV][VEC];
#pragma unroll
    for (int ps = 0; ps < PASSES; ++ps) {
      load_row(r + ps * rows_per_pass, s[ps]);
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[ps][i][e] *= abar;
      }
    }
    // The window's B records pass through shared memory in chunks (one cooperative 16-byte-wide load per
    // chunk instead of a dependent global load per record and thread).
    constexpr int AV = access_elems<ActT, 16>();  // activation elements per 16-byte access
    for (int j0 = 0; j0 < t; j0 += kFlushChunk) {
      const int nrec = min(kFlushChunk, t - j0);
      if (j0 > 0) __syncthreads();  // the previous chunk has been consumed
      for (int idx = threadIdx.x; idx < nrec * (N / AV); idx += blockDim.x) {
        const int rec = idx / (N / AV), n0 = (idx % (N / AV)) * AV, j = j0 + rec;
        float v[AV];
        if (j == hist) {
#pragma unroll
          for (int e = 0; e < AV; ++e) v[e] = Bs[n0 + e];
        } else {
          load_vec<ActT, AV>(rB + ring_pos(origin, j, L) * N + n0, v);
        }
#pragma unroll
        for (int e = 0; e < AV; ++e) Bw[rec * N + n0 + e] = v[e];
      }
      __syncthreads();
      for (int rec = 0; rec < nrec; ++rec) {
#pragma unroll
        for (int ps = 0; ps < PASSES; ++ps) {
          const int rr = min(r + ps * rows_per_pass, R - 1);
          const float cx = coef[j0 + rec] * xs[(j0 + rec) * R + rr];
#pragma unroll
          for (int i = 0; i < NV; ++i) {
#pragma unroll
            for (int e = 0; e < VEC; ++e)
              s[ps][i][e] = fmaf(cx, Bw[rec * N + (i * TPR + k) * VEC + e], s[ps][i][e]);
          }
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
      finish_row(r + ps * rows_per_pass, acc, s[ps]);
    }
  }

  if constexpr (REPLAY) {
    if (!flush) {
      // WRITES ring_dt of (slot, head) and, from one block per group, ring_B of (slot, group).
      if (threadIdx.x == 0) p.ring_dt[(slot * H + head) * L + pos] = dt;
      if (blockIdx.x == 0 && head % (H / p.ngroups) == 0) {
        ActT* rB_new = static_cast<ActT*>(p.ring_B) + ((slot * p.ngroups + group) * L + pos) * N;
        for (int n = threadIdx.x; n < N; n += blockDim.x) rB_new[n] = B_t[n];
      }
    }
    if (threadIdx.x == 0) {
      // WRITES the cursor replicas this block owns in this launch: blockIdx.x, + gridDim.x, ...
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
  const size_t smem = smem_bytes(rows, N, sizeof(StateT), p.buffer_len, REPLAY);
  auto kernel = decode_kernel<StateT, ActT, N, REPLAY>;
  if (smem > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.head_dim / rows, p.nheads, p.batch);
  kernel<<<grid, rows < kRowsPerPass ? rows * kThreadsPerRow : kBlockThreads, smem, stream>>>(p, rows);
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
