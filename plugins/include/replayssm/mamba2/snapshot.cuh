// Mamba-2 speculative verify, the conventional snapshot path (what serving engines run today, and the
// benchmark's baseline): the state is read once, the T tokens are applied one after another, and the state after
// every token is stored as a snapshot; the commit then copies the snapshot of the accepted token back
// (common/spec_commit.cuh). Specification: snapshot_verify_reference in trtllm_replayssm/ops/mamba2/spec_reference.py.
//
// Work split as the decode kernel (one block per (batch row, group, chunk of (head, tile) units)). The kernel is
// bound by its T snapshot stores, so the checkpoint tile goes straight to registers with no shared-memory
// pipeline. Each token repeats the decode kernel's conventional step: S = exp(A dt) S + (dt x) Bᵀ, y = S·C.
// The state is rounded to its dtype after every token, as a stored-and-reloaded snapshot would be.
#pragma once
#include <cuda_runtime.h>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/mamba2/spec_params.h"

namespace replayssm {
namespace mamba2 {

constexpr int kMaxSnapshotWindow = 8;

template <typename StateT, typename ActT, int N>
__global__ void __launch_bounds__(kMaxWarps * 32, 2)
    snapshot_kernel(const __grid_constant__ rssm_mamba2_verify_params p, const Shape shape) {
  using Tl = Tiling<StateT, N>;
  constexpr int VEC = Tl::VEC, LPR = Tl::LPR, NV = Tl::NV, RPI = Tl::RPI, KI = Tl::KI, RW = Tl::RW;
  constexpr int SHARE = Tl::SHARE;
  constexpr int NAV = N * sizeof(ActT) / 16;  // 16-byte vectors per B or C record

  extern __shared__ __align__(16) char smem[];  // the tokens' B then C: [2][T][N] act
  __shared__ float s_dtp[kMaxUnits][kMaxSnapshotWindow], s_A[kMaxUnits], s_D[kMaxUnits];

  const int H = p.nheads, P = p.head_dim, T = p.window;
  const int TILES = shape.tiles, TR = shape.rows, U = shape.units, TL = shape.tiles_log2;
  const int b = blockIdx.y, group = blockIdx.x / shape.chunks, chunk = blockIdx.x - group * shape.chunks;
  const int hpg = H / p.ngroups;
  const int unit0 = chunk * U;
  const int head0 = group * hpg + (unit0 >> TL);
  const int tile_base = unit0 & (TILES - 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seg = lane / LPR, col_lane = lane % LPR;

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  const int64_t sh0 = static_cast<int64_t>(slot) * H + head0;
  const int64_t head_elems = static_cast<int64_t>(P) * N;
  const StateT* const state_blk = static_cast<const StateT*>(p.state) + sh0 * head_elems;
  // snapshots[slot, t, head0 + ., ...]: token t of this block's first head at (slot * T + t) * H + head0
  StateT* const snap_blk = static_cast<StateT*>(p.snapshots) + (static_cast<int64_t>(slot) * T * H + head0) * head_elems;
  const int64_t snap_token = static_cast<int64_t>(H) * head_elems;
  const ActT* const x_blk = static_cast<const ActT*>(p.x) + b * p.x_batch_stride + head0 * p.x_head_stride;
  const ActT* const z_blk = p.z ? static_cast<const ActT*>(p.z) + b * p.z_batch_stride + head0 * p.z_head_stride : nullptr;
  ActT* const y_blk = static_cast<ActT*>(p.y) + b * p.y_batch_stride + head0 * p.y_head_stride;

  // ---- Prologue: the tokens' B and C of the group into shared memory; the chunk's per-head scalars.
  {
    const ActT* Bg = static_cast<const ActT*>(p.B) + b * p.B_batch_stride + group * p.B_group_stride;
    const ActT* Cg = static_cast<const ActT*>(p.C) + b * p.C_batch_stride + group * p.C_group_stride;
    for (int k = threadIdx.x; k < 2 * T * NAV; k += blockDim.x) {
      const int which = k / (T * NAV), k2 = k - which * T * NAV, t = k2 / NAV, c = k2 - t * NAV;
      const ActT* src = which == 0 ? Bg + t * p.B_token_stride : Cg + t * p.C_token_stride;
      reinterpret_cast<uint4*>(smem)[k] = reinterpret_cast<const uint4*>(src)[c];
    }
  }
  const int chunk_heads = ((tile_base + U - 1) >> TL) + 1;
  for (int k = threadIdx.x; k < chunk_heads * T; k += blockDim.x) {
    const int hh = k / T, t = k % T, head = head0 + hh;
    float d = to_float(static_cast<const ActT*>(p.dt)[b * p.dt_batch_stride + t * p.dt_token_stride + head * p.dt_head_stride]);
    d += p.dt_bias ? p.dt_bias[head] : 0.f;
    s_dtp[hh][t] = p.dt_softplus ? softplus_thresholded(d) : d;
    if (t == 0) {
      s_A[hh] = p.A[head];
      s_D[hh] = p.D ? p.D[head] : 0.f;
    }
  }
  __syncthreads();
  const ActT* const B_s = reinterpret_cast<const ActT*>(smem);
  const ActT* const C_s = B_s + T * N;

  const int thread_off = (warp * RW + seg) * N + col_lane * VEC;
  auto vec_step = [](int i, int v) { return i * RPI * N + v * LPR * VEC; };
  const int my_row = warp * RW + scattered_instr<KI, LPR>(lane) * RPI + seg;  // tile row this lane finishes
  const int q = lane % SHARE;

  for (int u = 0; u < U; ++u) {
    const int uu = tile_base + u, hh = uu >> TL, row0 = (uu & (TILES - 1)) * TR;
    float s[KI][NV][VEC];
    const StateT* gs = state_blk + (uu * TR * N + thread_off);
#pragma unroll
    for (int i = 0; i < KI; ++i)
#pragma unroll
      for (int v = 0; v < NV; ++v) load_vec<StateT, VEC>(gs + vec_step(i, v), s[i][v]);
    StateT* snap = snap_blk + (uu * TR * N + thread_off);
    const ActT* xh = x_blk + hh * p.x_head_stride + row0;
    const ActT* zh = z_blk ? z_blk + hh * p.z_head_stride + row0 : nullptr;
    const float A = s_A[hh];

    for (int t = 0; t < T; ++t) {
      const float dt = s_dtp[hh][t], abar = expf(A * dt);
      const ActT* xt = xh + t * p.x_token_stride;
      float Bt[NV][VEC], Ct[NV][VEC];
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        load_vec<ActT, VEC>(B_s + t * N + (v * LPR + col_lane) * VEC, Bt[v]);
        load_vec<ActT, VEC>(C_s + t * N + (v * LPR + col_lane) * VEC, Ct[v]);
      }
      float part[KI];
#pragma unroll
      for (int i = 0; i < KI; ++i) {
        const float cx = dt * to_float(xt[warp * RW + seg + i * RPI]);
        float acc = 0.f;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            s[i][v][e] = fmaf(cx, Bt[v][e], s[i][v][e] * abar);
            acc = fmaf(s[i][v][e], Ct[v][e], acc);
          }
          const uint4 packed = pack<StateT, VEC>(s[i][v]);
          store_stream(snap + t * snap_token + vec_step(i, v), packed);  // WRITES snapshots[slot, t, head, rows]
          if (sizeof(StateT) < 4) {  // continue from the stored value, as a reloaded snapshot would
            const StateT* e16 = reinterpret_cast<const StateT*>(&packed);
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[i][v][e] = to_float(e16[e]);
          }
        }
        part[i] = acc;
      }
      float yv = reduce_scatter<KI, LPR>(part);
      yv = group_sum<SHARE>(yv);
      if (q == 0) {
        const float xv = to_float(xt[my_row]);
        float out = fmaf(s_D[hh], xv, yv);
        if (zh) out *= silu_gate(to_float(zh[t * p.z_token_stride + my_row]));
        y_blk[t * p.y_token_stride + hh * p.y_head_stride + row0 + my_row] = from_float<ActT>(out);  // WRITES y
      }
    }
  }
}

template <typename StateT, typename ActT, int N>
static cudaError_t launch_snapshot(const rssm_mamba2_verify_params& p, cudaStream_t stream) {
  using Tl = Tiling<StateT, N>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const Shape shape = launch_shape(p.head_dim, Tl::RW, p.nheads, p.ngroups, p.batch, sms);
  const int smem_bytes = 2 * p.window * N * static_cast<int>(sizeof(ActT));
  const dim3 grid(p.ngroups * shape.chunks, p.batch);
  snapshot_kernel<StateT, ActT, N><<<grid, shape.warps * 32, smem_bytes, stream>>>(p, shape);
  return cudaGetLastError();
}

}  // namespace mamba2
}  // namespace replayssm
