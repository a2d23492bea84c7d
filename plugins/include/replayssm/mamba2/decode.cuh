// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; see docs/mamba2.md for the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes: one block per (P tile, head, batch row); 8 threads per state row, each holding N/8
// state elements in registers as 16-byte vectors (row-contiguous across the 8 threads, so a warp reads four
// whole 128..1024-byte rows per instruction). The output y[p] = S[p,:]·C is a partial dot per thread reduced
// over the 8 lanes of the row.
//
// ReplaySSM, per row of the batch, with h = records in the ring since the checkpoint S0 (cursor history) and
// the current token as record h (t = h + 1 records in the window):
//   w_j  = dt_j * exp(A * sum_{i>j} dt_i),   abar = exp(A * sum_i dt_i)
//   non-flush (h < L-1): y = abar (S0·C) + sum_j w_j (B_j·C) x_j; append (x, B, dt) at ring position h
//   flush     (h = L-1): S = abar S0 + sum_j (w_j x_j) B_jᵀ; store S; y = S·C; history := 0
// B_j·C depends on the group only; each block computes the t dot products it needs (the ring's B records of
// a group stay in L2 while its H/G heads read them).
//
// Latency chain of a replay block (what bounds the bytes in flight): {checkpoint slice, cursor, current token}
// -> barrier -> {x window, dt window, B window dots} -> barrier -> FMAs and stores. The per-row cursor advance
// rides on an arrival counter taken right after the cursor read, so it adds no step to the chain.
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kThreadsPerRow = 8;
constexpr int kMaxRowsPerBlock = 32;
constexpr int kMaxBufferLen = 64;
constexpr int kFlushChunk = 16;  // B records staged in shared memory at a time by a flushing block

// Rows per block: 32 when the head dim allows, 16 otherwise (head_dim 80 = 5 x 16).
inline int rows_per_block(int head_dim) { return head_dim % 32 == 0 ? 32 : 16; }

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

template <typename StateT, typename ActT, int N, bool REPLAY>
__global__ void __launch_bounds__(kThreadsPerRow * kMaxRowsPerBlock)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p) {
  constexpr int TPR = kThreadsPerRow;
  constexpr int VEC = 16 / sizeof(StateT);  // state elements per 16-byte access
  constexpr int NV = N / (TPR * VEC);       // accesses per thread per row
  static_assert(NV >= 1 && N % (TPR * VEC) == 0, "dstate must split into 16-byte accesses over 8 threads");
  constexpr int MAXL = REPLAY ? kMaxBufferLen : 1;

  __shared__ float Bs[N], Cs[N];                // current token's B and C, fp32
  __shared__ float xs[MAXL][kMaxRowsPerBlock];  // window of x for this tile's rows (record j, row r)
  __shared__ float coef[MAXL];
  __shared__ float Bw[REPLAY ? kFlushChunk : 1][REPLAY ? N : 1];  // flush: a chunk of the window's B records                  // w_j (B_j·C) on non-flush rows, w_j on flush rows
  __shared__ float s_abar;
  __shared__ int s_hist, s_origin;

  const int b = blockIdx.z;
  const int head = blockIdx.y;
  const int tile = blockIdx.x;
  const int slot_raw = p.slot_idx ? p.slot_idx[b] : b;
  if (slot_raw == p.pad_slot_id || slot_raw < 0 || slot_raw >= p.num_slots) return;  // padding: touch nothing
  const int64_t slot = slot_raw;
  const int H = p.nheads, P = p.head_dim, L = p.buffer_len;
  const int group = head / (H / p.ngroups);
  const int rows = blockDim.x / TPR;
  const int r = threadIdx.x / TPR;
  const int k = threadIdx.x % TPR;
  const int prow = tile * rows + r;
  const bool row_ok = prow < P;

  // Issue the dominant load first: this thread's slice of the checkpoint row.
  StateT* srow = static_cast<StateT*>(p.state) + ((slot * H + head) * P + (row_ok ? prow : 0)) * N;
  float s[NV][VEC];
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (row_ok) {
      load_vec<StateT, VEC>(srow + (i * TPR + k) * VEC, s[i]);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) s[i][e] = 0.f;
    }
  }

  // Replay: read the cursor, then arrive. The arrival count tells the last block of the row that every block
  // has read the cursor, so it may advance it (at its end). The arrival carries a data dependency on the
  // values read, so it cannot be performed before them; it is relaxed so that nothing waits for it until the
  // end of the block.
  int32_t* cur = REPLAY ? p.cursor + slot * RSSM_CURSOR_FIELDS : nullptr;
  int arrivals_before = 0;
  if (REPLAY && threadIdx.x == 0) {
    const int hist_raw = __ldcg(cur + RSSM_CURSOR_HISTORY);
    const int origin_raw = __ldcg(cur + RSSM_CURSOR_ORIGIN);
    s_hist = min(max(hist_raw, 0), L - 1);  // clamped: a corrupted cursor never indexes outside the ring
    s_origin = ((origin_raw % L) + L) % L;
    arrivals_before = atomicAdd(cur + RSSM_CURSOR_ARRIVALS, 1 + depends_on(hist_raw ^ origin_raw));
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
  const float xv = row_ok ? to_float(x_t[prow]) : 0.f;
  __syncthreads();

  float acc = 0.f;    // this thread's part of S·C (S the state the output reads)
  float extra = 0.f;  // this thread's part of the replayed sum_j w_j (B_j·C) x_j (non-flush rows)
  bool flush = true;
  int hist = 0, origin = 0;

  if constexpr (!REPLAY) {
    const float dA = expf(A * dt);
    const float cx = dt * xv;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const int n = (i * TPR + k) * VEC + e;
        s[i][e] = fmaf(cx, Bs[n], s[i][e] * dA);
        acc = fmaf(s[i][e], Cs[n], acc);
      }
    }
  } else {
    hist = s_hist;
    origin = s_origin;
    flush = hist == L - 1;
    const int t = hist + 1;
    const float* rdt = p.ring_dt + (slot * H + head) * L;
    const ActT* rx = static_cast<const ActT*>(p.ring_x) + (slot * H + head) * L * P;
    const ActT* rB = static_cast<const ActT*>(p.ring_B) + (slot * p.ngroups + group) * L * N;

    // The window of x for this tile's rows, into shared memory.
    for (int idx = threadIdx.x; idx < hist * rows; idx += blockDim.x) {
      const int j = idx / rows, rr = idx % rows, pr = tile * rows + rr;
      int pos = origin + j;
      pos -= pos >= L ? L : 0;
      xs[j][rr] = pr < P ? to_float(rx[pos * P + pr]) : 0.f;
    }
    if (k == 0) xs[hist][r] = xv;

    // Every warp computes the decay weights of the whole window (two records per lane), then the
    // coefficients of the records it owns: j = warp, warp + nwarps, ...
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    auto window_dt = [&](int j) -> float {
      if (j > hist) return 0.f;
      if (j == hist) return dt;
      const int pos = origin + j;
      return __ldg(rdt + (pos >= L ? pos - L : pos));
    };
    const float dt0 = window_dt(lane), dt1 = window_dt(lane + 32);
    float ex0, ex1, total;
    warp_suffix_sums(dt0, dt1, ex0, ex1, total);
    const float w0 = dt0 * expf(A * ex0), w1 = dt1 * expf(A * ex1);
    for (int j = warp; j < t; j += nwarps) {
      const float wj = __shfl_sync(0xffffffffu, j < 32 ? w0 : w1, j % 32);
      float c = wj;
      if (!flush) {
        int pos = origin + j;
        pos -= pos >= L ? L : 0;
        const ActT* Bj = rB + pos * N;
        float d = 0.f;
#pragma unroll
        for (int n = lane; n < N; n += 32) d = fmaf(j == hist ? Bs[n] : to_float(Bj[n]), Cs[n], d);
        c *= group_sum<32>(d);
      }
      if (lane == 0) coef[j] = c;
    }
    if (threadIdx.x == 0) s_abar = expf(A * total);
    __syncthreads();
    const float abar = s_abar;

    if (!flush) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc = fmaf(s[i][e], Cs[(i * TPR + k) * VEC + e], acc);
      }
      acc *= abar;
      for (int j = k; j < t; j += TPR) extra = fmaf(coef[j], xs[j][r], extra);
    } else {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[i][e] *= abar;
      }
      // The window's B records pass through shared memory in chunks: one cooperative 16-byte-wide load per
      // chunk instead of a dependent global load per record and thread.
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
            int pos = origin + j;
            pos -= pos >= L ? L : 0;
            load_vec<ActT, AV>(rB + pos * N + n0, v);
          }
#pragma unroll
          for (int e = 0; e < AV; ++e) Bw[rec][n0 + e] = v[e];
        }
        __syncthreads();
        for (int rec = 0; rec < nrec; ++rec) {
          const float cx = coef[j0 + rec] * xs[j0 + rec][r];
#pragma unroll
          for (int i = 0; i < NV; ++i) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[i][e] = fmaf(cx, Bw[rec][(i * TPR + k) * VEC + e], s[i][e]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < NV; ++i) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc = fmaf(s[i][e], Cs[(i * TPR + k) * VEC + e], acc);
      }
    }
  }

  // Epilogue shared by both modes: the output, then the state store (flush rows / conventional).
  float yv = group_sum<TPR>(acc + extra);
  if (row_ok && k == 0) {
    if (p.D) yv = fmaf(p.D[head], xv, yv);
    if (p.z) {
      const ActT* z_t = static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head * p.z_head_stride;
      yv *= silu_gate(to_float(z_t[prow]));
    }
    // WRITES y[b, head, prow]
    static_cast<ActT*>(p.y)[b * p.y_batch_stride + head * p.y_head_stride + prow] = from_float<ActT>(yv);
  }
  if (flush && row_ok) {
#pragma unroll
    for (int i = 0; i < NV; ++i) store_vec<StateT, VEC>(srow + (i * TPR + k) * VEC, s[i]);  // WRITES state
  }

  if constexpr (REPLAY) {
    if (!flush) {
      int pos = origin + hist;
      pos -= pos >= L ? L : 0;
      // WRITES ring_x / ring_dt of (slot, head) and, from one block per group, ring_B of (slot, group).
      ActT* rx = static_cast<ActT*>(p.ring_x) + ((slot * H + head) * L + pos) * P;
      if (row_ok && k == 0) rx[prow] = x_t[prow];
      if (threadIdx.x == 0) p.ring_dt[(slot * H + head) * L + pos] = dt;
      if (tile == 0 && head % (H / p.ngroups) == 0) {
        ActT* rB = static_cast<ActT*>(p.ring_B) + ((slot * p.ngroups + group) * L + pos) * N;
        for (int n = threadIdx.x; n < N; n += blockDim.x) rB[n] = B_t[n];
      }
    }
    if (threadIdx.x == 0 && arrivals_before == static_cast<int>(gridDim.x * gridDim.y) - 1) {
      cur[RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;  // WRITES cursor: every block of the row has read it
      cur[RSSM_CURSOR_ARRIVALS] = 0;
    }
  }
}

// Host launch for one (state dtype, activation dtype, dstate) specialisation; params already validated.
template <typename StateT, typename ActT, int N>
cudaError_t launch_decode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const int rows = rows_per_block(p.head_dim);
  const dim3 grid((p.head_dim + rows - 1) / rows, p.nheads, p.batch);
  const dim3 block(rows * kThreadsPerRow);
  if (p.mode == RSSM_MAMBA2_REPLAY) {
    decode_kernel<StateT, ActT, N, true><<<grid, block, 0, stream>>>(p);
  } else {
    decode_kernel<StateT, ActT, N, false><<<grid, block, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace mamba2
}  // namespace replayssm
