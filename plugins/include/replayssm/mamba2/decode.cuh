// Mamba-2 single-token decode: the conventional kernel (load, update, store) and the ReplaySSM kernel
// (checkpoint + ring of recent inputs; docs/mamba2.md has the maths). Framework-free; the host launch
// function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Work split, both modes: the step is a list of items, one per (batch row, head, tile of R state rows).
// A persistent grid of a few blocks per SM walks the list; each block keeps `stages` items in flight: while
// it computes item k from one shared-memory stage, the copy engine fills the other stages with items k+1..
// (cp.async.bulk on an mbarrier: the checkpoint tile, the head's ring records of x (R rows), B and dt, the
// cursor line, and the current token's x, z, B, C). Loads therefore never wait behind arithmetic, and
// one thread issues a whole item with a handful of instructions.
// In a stage, 8 threads per state row take N/8 elements each as 16-byte vectors (the 8 lanes of a row read
// 128 contiguous bytes: conflict-free); y[p] = S[p,:]·C is a partial dot per thread reduced over those 8
// lanes, then one thread per row finishes it (D, gate, store).
//
// ReplaySSM, per row of the batch, with h = records in the ring since the checkpoint S0 (cursor history) and
// the current token as record h (t = h + 1 records in the window; record j sits at ring position
// (origin + j) mod L):
//   w_j  = dt_j * exp(A * sum_{i>j} dt_i),   abar = exp(A * sum_i dt_i)
//   non-flush (h < L-1): y = abar (S0·C) + sum_j w_j (B_j·C) x_j; append (x, B, dt) at ring position h
//   flush     (h = L-1): S = abar S0 + sum_j (w_j x_j) B_jᵀ; store S; y = S·C; history := 0
// B_j·C depends on the group only; each item computes the t dot products it needs from shared memory (the
// ring's B records of a group come from L2 for all but the first of its H/G heads). The whole ring of the
// head is staged (the unused records cost (L-t)/L of a small read) so that no load waits for the cursor.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>

#include "replayssm/common/bulk_copy.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kThreadsPerRow = 8;
constexpr int kBlockThreads = 256;
constexpr int kRowsPerPass = kBlockThreads / kThreadsPerRow;  // 32
constexpr int kTileBytes = 32 * 1024;                          // checkpoint bytes per item
constexpr int kMaxBufferLen = 64;
constexpr int kMaxStages = 2;
constexpr int kSmemBudget = 220 * 1024;  // dynamic shared memory one SM gives to this kernel's blocks

// Most rows an item may hold: kTileBytes of state, and at most 64 (replay) or 128 rows.
__host__ __device__ constexpr int max_tile_rows(int dstate, int state_bytes, bool replay) {
  return (replay ? 64 : 128) < kTileBytes / (dstate * state_bytes) ? (replay ? 64 : 128)
                                                                    : kTileBytes / (dstate * state_bytes);
}

// Rows per item: a divisor of head_dim, a multiple of 8, at most max_tile_rows and at least head_dim / 8
// (one cursor replica per tile). The largest such tile wins once there are two items per SM; small batches
// take smaller tiles so that every SM has loads in flight.
// Worked examples (132 SMs, fp32): Super (H=128, P=64, N=128) batch 256 -> 64 rows (one 32 KiB tile per
// head); batch 1 -> 32 rows (256 items); head_dim 80, dstate 128 -> 40 rows (80 would be 40 KiB).
inline int tile_rows(int head_dim, int dstate, int state_bytes, bool replay, int batch, int nheads, int sms) {
  const int cap = max_tile_rows(dstate, state_bytes, replay);
  int chosen = 0;
  for (int tiles = 1; tiles <= RSSM_CURSOR_REPLICAS; ++tiles) {
    const int rows = head_dim / tiles;
    if (head_dim % tiles || rows % 8 || rows > cap) continue;
    chosen = rows;
    if (static_cast<long long>(batch) * nheads * tiles >= sms) break;
  }
  return chosen;
}

inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Byte offsets of one stage's buffers (all 16-byte aligned), and the launch shape.
struct Plan {
  int rows, tiles, items, stages, ring_dt_len;
  int stage_bytes;
  int tile, ring_x, ring_B, ring_dt, cursor, x, z, B, C;  // offsets in a stage
};

inline Plan make_plan(const rssm_mamba2_decode_params& p, int state_bytes, int act_bytes, bool replay, int sms) {
  Plan pl{};
  const int N = p.dstate, L = replay ? p.buffer_len : 0;
  pl.rows = tile_rows(p.head_dim, N, state_bytes, replay, p.batch, p.nheads, sms);
  pl.tiles = p.head_dim / pl.rows;
  pl.items = p.batch * p.nheads * pl.tiles;
  pl.ring_dt_len = round_up(L, 4);
  int off = 0;
  auto take = [&](int bytes) {
    const int at = off;
    off += round_up(bytes, 16);
    return at;
  };
  pl.tile = take(pl.rows * N * state_bytes);
  pl.ring_x = take(L * pl.rows * act_bytes);
  pl.ring_B = take(L * N * act_bytes);
  pl.ring_dt = take(pl.ring_dt_len * 4);
  pl.cursor = take(replay ? RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS * 4 : 0);
  pl.x = take(pl.rows * act_bytes);
  pl.z = take(pl.rows * act_bytes);
  pl.B = take(N * act_bytes);
  pl.C = take(N * act_bytes);
  pl.stage_bytes = round_up(off, 128);
  pl.stages = 2 * 2 * pl.stage_bytes <= kSmemBudget ? 2 : 1;  // two stages when two blocks per SM fit
  return pl;
}

// Per-item scalars, prepared once by thread 0 for the whole block.
struct ItemHeader {
  int slot;  // < 0: padding item, skipped
  int b, head, tile;
  float dt, A, D;
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

template <typename StateT, typename ActT, int N, bool REPLAY>
__global__ void __launch_bounds__(kBlockThreads, 2)
    decode_kernel(const __grid_constant__ rssm_mamba2_decode_params p, const Plan pl) {
  constexpr int TPR = kThreadsPerRow;
  constexpr int VEC = 16 / sizeof(StateT);  // state elements per 16-byte access
  constexpr int NV = N / (TPR * VEC);       // accesses per thread per row
  static_assert(NV >= 1 && N % (TPR * VEC) == 0, "dstate must split into 16-byte accesses over 8 threads");
  constexpr int MAXR = max_tile_rows(N, sizeof(StateT), REPLAY);
  constexpr int PASSES = MAXR / kRowsPerPass > 0 ? MAXR / kRowsPerPass : 1;

  extern __shared__ __align__(128) char smem[];
  __shared__ uint64_t bars[kMaxStages];
  // Per-item buffers read by the epilogue are double-buffered by item parity, so the next item's phase 1 may
  // start while the epilogue of this one runs; headers are written `stages` items ahead.
  __shared__ ItemHeader hdr[2];
  __shared__ __align__(16) float Bf[2][N];            // current token's B, fp32
  __shared__ __align__(16) float Cf[N];               // current token's C, fp32
  __shared__ float xf[2][MAXR], zf[2][MAXR];  // current token's x and z rows, fp32
  __shared__ float ysum[2][MAXR];         // S·C (+ replayed terms) per row, before the epilogue
  __shared__ float wts[kMaxBufferLen];    // w_j
  __shared__ float bc[kMaxBufferLen];     // B_j·C (non-flush)
  __shared__ float s_abar;

  const int H = p.nheads, P = p.head_dim, L = p.buffer_len, R = pl.rows, T = pl.tiles;
  const int hpg = H / p.ngroups;
  const int G = gridDim.x;
  const int rows_per_pass = blockDim.x / TPR;  // min(R, 32)
  const int r = threadIdx.x / TPR;            // row within a pass
  const int k = threadIdx.x % TPR;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;

  // ---- Thread 0: item bookkeeping and copies.
  auto item_coords = [&](int item, int& b, int& head, int& tile) {
    tile = item % T;
    const int bh = item / T;
    head = bh % H;
    b = bh / H;
  };
  auto valid_slot = [&](int slot) { return slot != p.pad_slot_id && slot >= 0 && slot < p.num_slots; };
  // Issues every copy of `item` into `stage` (or a bare arrival for a padding item, so the phase completes).
  auto issue = [&](int item, int slot, int stage) {
    uint64_t* bar = &bars[stage];
    if (!valid_slot(slot)) {
      mbarrier_arrive(bar);
      return;
    }
    int b, head, tile;
    item_coords(item, b, head, tile);
    const int group = head / hpg, row0 = tile * R;
    const int64_t sh = static_cast<int64_t>(slot) * H + head;
    char* st = smem + stage * pl.stage_bytes;
    const int a = sizeof(ActT);
    uint32_t bytes = R * N * sizeof(StateT) + (R + N + N) * a + (p.z ? R * a : 0);
    if (REPLAY) bytes += L * R * a + L * N * a + pl.ring_dt_len * 4 + RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS * 4;
    mbarrier_arrive_expect_tx(bar, bytes);
    bulk_copy_g2s(st + pl.tile, static_cast<const StateT*>(p.state) + (sh * P + row0) * N, R * N * sizeof(StateT), bar);
    const ActT* x = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head * p.x_head_stride + row0;
    bulk_copy_g2s(st + pl.x, x, R * a, bar);
    if (p.z) {
      const ActT* z = static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head * p.z_head_stride + row0;
      bulk_copy_g2s(st + pl.z, z, R * a, bar);
    }
    bulk_copy_g2s(st + pl.B, static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride, N * a, bar);
    bulk_copy_g2s(st + pl.C, static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride, N * a, bar);
    if (REPLAY) {
      const ActT* rx = static_cast<const ActT*>(p.ring_x) + sh * L * P + row0;
      if (R == P) {
        bulk_copy_g2s(st + pl.ring_x, rx, L * P * a, bar);
      } else {
        for (int pos = 0; pos < L; ++pos) bulk_copy_g2s(st + pl.ring_x + pos * R * a, rx + pos * P, R * a, bar);
      }
      const int64_t sg = static_cast<int64_t>(slot) * p.ngroups + group;
      bulk_copy_g2s(st + pl.ring_B, static_cast<const ActT*>(p.ring_B) + sg * L * N, L * N * a, bar);
      bulk_copy_g2s(st + pl.ring_dt, p.ring_dt + sh * pl.ring_dt_len, pl.ring_dt_len * 4, bar);
      bulk_copy_g2s(st + pl.cursor, p.cursor + sh * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS,
                    RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS * 4, bar);
    }
  };
  auto slot_of = [&](int item) {
    int b, head, tile;
    item_coords(item, b, head, tile);
    return p.slot_idx ? p.slot_idx[b] : b;
  };
  // Raw per-item scalars, loaded ahead into registers and turned into a header later.
  struct Scalars {
    int slot, b, head, tile;
    float dt, A, D, bias;
  };
  auto load_scalars = [&](int item, int slot) {
    Scalars sc{};
    item_coords(item, sc.b, sc.head, sc.tile);
    sc.slot = valid_slot(slot) ? slot : -1;
    sc.dt = to_float(static_cast<const ActT*>(p.dt)[sc.b * p.dt_batch_stride + sc.head * p.dt_head_stride]);
    sc.A = p.A[sc.head];
    sc.D = p.D ? p.D[sc.head] : 0.f;
    sc.bias = p.dt_bias ? p.dt_bias[sc.head] : 0.f;
    return sc;
  };
  auto write_header = [&](const Scalars& sc, int parity) {
    float dt = sc.dt + sc.bias;
    if (p.dt_softplus) dt = softplus_thresholded(dt);
    hdr[parity] = ItemHeader{sc.slot, sc.b, sc.head, sc.tile, dt, sc.A, sc.D};
  };

  const int first = blockIdx.x;
  // The producer (lane 0 of the last warp, which has no epilogue rows) issues copies and writes headers.
  const bool producer = threadIdx.x == blockDim.x - 32;
  if (producer) {
    for (int s = 0; s < pl.stages; ++s) mbarrier_init(&bars[s], 1);
    mbarrier_init_fence();
    for (int s = 0; s < pl.stages; ++s) {
      const int item = first + s * G;
      if (item >= pl.items) break;
      const int slot = slot_of(item);
      issue(item, slot, s);
      write_header(load_scalars(item, slot), s & 1);
    }
  }
  __syncthreads();

  int n = 0;  // items this block has finished
  for (int item = first; item < pl.items; item += G, ++n) {
    const int stage = n % pl.stages;
    const int buf = n & 1;
    // The producer prefetches, into registers, the slot and scalars of the item that will refill this stage.
    const int refill = item + pl.stages * G;
    int refill_slot = -1;
    Scalars refill_sc{};
    if (producer && refill < pl.items) {
      refill_slot = slot_of(refill);
      refill_sc = load_scalars(refill, refill_slot);
    }

    mbarrier_wait(&bars[stage], (n / pl.stages) & 1);
    const ItemHeader h = hdr[buf];
    const char* st = smem + stage * pl.stage_bytes;
    const StateT* tile_s = reinterpret_cast<const StateT*>(st + pl.tile);
    const ActT* x_s = reinterpret_cast<const ActT*>(st + pl.x);
    const ActT* rx_s = reinterpret_cast<const ActT*>(st + pl.ring_x);
    const ActT* rB_s = reinterpret_cast<const ActT*>(st + pl.ring_B);
    const float* rdt_s = reinterpret_cast<const float*>(st + pl.ring_dt);
    const bool live = h.slot >= 0;
    const int row0 = h.tile * R;
    int hist = 0, origin = 0;
    if (REPLAY && live) {
      // This item's cursor replica (common/types.h); clamped so that a corrupted cursor never indexes
      // outside the ring.
      const int32_t* cur = reinterpret_cast<const int32_t*>(st + pl.cursor) + h.tile * RSSM_CURSOR_FIELDS;
      hist = min(max(cur[RSSM_CURSOR_HISTORY], 0), L - 1);
      origin = ((cur[RSSM_CURSOR_ORIGIN] % L) + L) % L;
    }
    const bool flush = !REPLAY || hist == L - 1;
    const int t = hist + 1;

    // ---- Phase 1: fp32 copies of B and C; (replay) decay weights in warp 0, B_j·C in the other warps.
    if (live) {
      const ActT* B_s = reinterpret_cast<const ActT*>(st + pl.B);
      const ActT* C_s = reinterpret_cast<const ActT*>(st + pl.C);
      for (int i = threadIdx.x; i < N; i += blockDim.x) {
        Bf[buf][i] = to_float(B_s[i]);
        Cf[i] = to_float(C_s[i]);
      }
      const ActT* z_s = reinterpret_cast<const ActT*>(st + pl.z);
      for (int rr = threadIdx.x; rr < R; rr += blockDim.x) {
        xf[buf][rr] = to_float(x_s[rr]);
        zf[buf][rr] = p.z ? to_float(z_s[rr]) : 0.f;
      }
      if (REPLAY) {
        if (warp == 0) {
          auto window_dt = [&](int j) -> float {
            if (j > hist) return 0.f;
            return j == hist ? h.dt : rdt_s[ring_pos(origin, j, L)];
          };
          const float dt0 = window_dt(lane), dt1 = window_dt(lane + 32);
          float ex0, ex1, total;
          warp_suffix_sums(dt0, dt1, ex0, ex1, total);
          wts[lane] = dt0 * expf(h.A * ex0);
          wts[lane + 32] = dt1 * expf(h.A * ex1);
          if (lane == 0) s_abar = expf(h.A * total);
        } else if (!flush) {
          const ActT* B_cur = reinterpret_cast<const ActT*>(st + pl.B);
          const ActT* C_cur = reinterpret_cast<const ActT*>(st + pl.C);
          for (int j = warp - 1; j < t; j += nwarps - 1) {
            const ActT* Bj = j == hist ? B_cur : rB_s + ring_pos(origin, j, L) * N;
            float d = 0.f;
#pragma unroll
            for (int i = lane; i < N; i += 32) d = fmaf(to_float(Bj[i]), to_float(C_cur[i]), d);
            d = group_sum<32>(d);
            if (lane == 0) bc[j] = d;
          }
        }
      }
    }
    __syncthreads();

    // ---- Phase 2: this thread's rows rr = r + rows_per_pass * pass (rows past R compute on zeros; their
    // warp still takes part in the reductions, and they store nothing).
    if (live) {
      const int64_t sh = static_cast<int64_t>(h.slot) * H + h.head;
      StateT* gstate = static_cast<StateT*>(p.state) + (sh * P + row0) * N;
      const float abar = REPLAY ? s_abar : 0.f;
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
      auto dot_C = [&](const float (&row)[NV][VEC]) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};  // four chains: the sum is not one long dependency
#pragma unroll
        for (int i = 0; i < NV; ++i) {
#pragma unroll
          for (int e = 0; e < VEC; e += 4) {
            const float4 c4 = *reinterpret_cast<const float4*>(Cf + (i * TPR + k) * VEC + e);
            acc[0] = fmaf(row[i][e], c4.x, acc[0]);
            acc[1] = fmaf(row[i][e + 1], c4.y, acc[1]);
            acc[2] = fmaf(row[i][e + 2], c4.z, acc[2]);
            acc[3] = fmaf(row[i][e + 3], c4.w, acc[3]);
          }
        }
        return (acc[0] + acc[1]) + (acc[2] + acc[3]);
      };
      auto store_row = [&](int rr, const float (&row)[NV][VEC]) {
        if (rr >= R) return;
#pragma unroll
        for (int i = 0; i < NV; ++i) store_vec<StateT, VEC>(gstate + rr * N + (i * TPR + k) * VEC, row[i]);  // WRITES state
      };
      auto x_rec = [&](int j, int rr) -> float {  // x of window record j for tile row rr
        return j == hist ? xf[buf][rr] : to_float(rx_s[ring_pos(origin, j, L) * R + rr]);
      };
      auto put_y = [&](int rr, float acc) {
        acc = group_sum<TPR>(acc);
        if (k == 0 && rr < R) ysum[buf][rr] = acc;
      };

      if (!REPLAY) {
        const float dA = expf(h.A * h.dt);
#pragma unroll 1
        for (int ps = 0; ps < PASSES; ++ps) {
          const int rr = r + ps * rows_per_pass;
          float row[NV][VEC];
          load_row(rr, row);
          const float cx = h.dt * (rr < R ? xf[buf][rr] : 0.f);
#pragma unroll
          for (int i = 0; i < NV; ++i) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) row[i][e] = fmaf(cx, Bf[buf][(i * TPR + k) * VEC + e], row[i][e] * dA);
          }
          put_y(rr, dot_C(row));
          store_row(rr, row);
        }
      } else if (!flush) {
#pragma unroll 1
        for (int ps = 0; ps < PASSES; ++ps) {
          const int rr = r + ps * rows_per_pass;
          float row[NV][VEC];
          load_row(rr, row);
          const int rx = min(rr, R - 1);
          float extra = 0.f;
          for (int j = k; j < t; j += TPR) extra = fmaf(wts[j] * bc[j], x_rec(j, rx), extra);
          put_y(rr, fmaf(abar, dot_C(row), extra));
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
        for (int j = 0; j < t; ++j) {
          const float* Bj = nullptr;
          const ActT* Bj_ring = rB_s + ring_pos(origin, j, L) * N;
          if (j == hist) Bj = Bf[buf];
#pragma unroll
          for (int ps = 0; ps < PASSES; ++ps) {
            const float cx = wts[j] * x_rec(j, min(r + ps * rows_per_pass, R - 1));
#pragma unroll
            for (int i = 0; i < NV; ++i) {
              float bj[VEC];
              if (Bj) {
#pragma unroll
                for (int e = 0; e < VEC; ++e) bj[e] = Bj[(i * TPR + k) * VEC + e];
              } else {
                load_vec<ActT, VEC>(Bj_ring + (i * TPR + k) * VEC, bj);
              }
#pragma unroll
              for (int e = 0; e < VEC; ++e) s[ps][i][e] = fmaf(cx, bj[e], s[ps][i][e]);
            }
          }
        }
#pragma unroll
        for (int ps = 0; ps < PASSES; ++ps) {
          put_y(r + ps * rows_per_pass, dot_C(s[ps]));
          store_row(r + ps * rows_per_pass, s[ps]);
        }
      }
    }
    __syncthreads();

    // The stage is free: the producer refills it and writes the refill's header; meanwhile the epilogue,
    // which reads only the double-buffered per-item copies, finishes this item.
    if (producer && refill < pl.items) {
      issue(refill, refill_slot, stage);
      write_header(refill_sc, (n + pl.stages) & 1);
    }

    // ---- Epilogue: one thread per row finishes y; the ring record and the cursor (replay, non-flush).
    if (live) {
      const int64_t sh = static_cast<int64_t>(h.slot) * H + h.head;
      const int pos_new = REPLAY ? ring_pos(origin, hist, L) : 0;
      for (int rr = threadIdx.x; rr < R; rr += blockDim.x) {
        const int prow = row0 + rr;
        const float xv = xf[buf][rr];
        float yv = fmaf(h.D, xv, ysum[buf][rr]);
        if (p.z) yv *= silu_gate(zf[buf][rr]);
        // WRITES y[b, head, prow]
        static_cast<ActT*>(p.y)[h.b * p.y_batch_stride + h.head * p.y_head_stride + prow] = from_float<ActT>(yv);
        // WRITES ring_x[slot, head, pos_new, prow] (from_float(to_float(v)) == v: an exact copy)
        if (REPLAY && !flush) static_cast<ActT*>(p.ring_x)[(sh * L + pos_new) * P + prow] = from_float<ActT>(xv);
      }
      if (REPLAY) {
        if (!flush) {
          // WRITES ring_dt of (slot, head) and, from one item per group, ring_B of (slot, group).
          if (threadIdx.x == 0) p.ring_dt[sh * pl.ring_dt_len + pos_new] = h.dt;
          if (h.tile == 0 && h.head % hpg == 0) {
            ActT* rB = static_cast<ActT*>(p.ring_B) + ((static_cast<int64_t>(h.slot) * p.ngroups + h.head / hpg) * L + pos_new) * N;
            for (int i = threadIdx.x; i < N; i += blockDim.x) rB[i] = from_float<ActT>(Bf[buf][i]);
          }
        }
        if (threadIdx.x == 0) {
          // WRITES the cursor replicas this item owns: tile, tile + T, ... (no other item of this launch reads
          // or writes them).
          int32_t* cur = p.cursor + sh * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
          for (int rep = h.tile; rep < RSSM_CURSOR_REPLICAS; rep += T)
            cur[rep * RSSM_CURSOR_FIELDS + RSSM_CURSOR_HISTORY] = flush ? 0 : hist + 1;
        }
      }
    }
    if (pl.stages == 1) __syncthreads();  // the next item's header was written just now
  }
}

template <typename StateT, typename ActT, int N, bool REPLAY>
static cudaError_t launch_mode(const rssm_mamba2_decode_params& p, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const Plan pl = make_plan(p, sizeof(StateT), sizeof(ActT), REPLAY, sms);
  auto kernel = decode_kernel<StateT, ActT, N, REPLAY>;
  const int smem = pl.stages * pl.stage_bytes;
  if (smem > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
  }
  const int threads = pl.rows < kRowsPerPass ? pl.rows * kThreadsPerRow : kBlockThreads;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
  if (err != cudaSuccess) return err;
  const int grid = std::min(pl.items, std::max(per_sm, 1) * sms);
  kernel<<<grid, threads, smem, stream>>>(p, pl);
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
