// Speculative commits, shared by every family: the ReplaySSM cursor move (history += accepted) and the
// snapshot path's restore (state := snapshot of the accepted token). Both read the accepted counts from device
// memory, so a whole speculative step needs no host synchronisation and can be captured in one CUDA graph.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "replayssm/common/spec_params.h"
#include "replayssm/common/types.h"

namespace replayssm {

// Slot of batch row b, or -1 when the row is padding (or its slot is out of range): touch nothing.
__device__ __forceinline__ int live_slot(const int32_t* slot_idx, int b, int num_slots, int pad_slot_id) {
  const int slot = slot_idx ? slot_idx[b] : b;
  return (slot == pad_slot_id || slot < 0 || slot >= num_slots) ? -1 : slot;
}

// One thread per (row, head, replica): history := min(history + clamp(a, 0, T), L - T). Each replica is read and
// written by its own thread only; all replicas of a slot move by the same amount, so they stay equal.
__global__ void spec_commit_kernel(const __grid_constant__ rssm_spec_commit_params p) {
  const int b = blockIdx.y;
  const int k = blockIdx.x * blockDim.x + threadIdx.x;  // head * RSSM_CURSOR_REPLICAS + replica
  if (k >= p.nheads * RSSM_CURSOR_REPLICAS) return;
  const int slot = live_slot(p.slot_idx, b, p.num_slots, p.pad_slot_id);
  if (slot < 0) return;
  const int a = min(max(p.accepted[b], 0), p.window);
  int32_t* h = p.cursor + (static_cast<int64_t>(slot) * p.nheads * RSSM_CURSOR_REPLICAS + k) * RSSM_CURSOR_FIELDS +
               RSSM_CURSOR_HISTORY;
  *h = min(max(*h, 0) + a, p.buffer_len - p.window);  // WRITES cursor[slot, head, replica].history
}

// Copies 16-byte vectors of snapshots[slot, a - 1] to state[slot]; blockIdx.x picks a chunk of the slot's bytes.
constexpr int kCopyThreads = 256;
constexpr int kCopyVecsPerThread = 8;

__global__ void __launch_bounds__(kCopyThreads)
    snapshot_commit_kernel(const __grid_constant__ rssm_snapshot_commit_params p) {
  const int b = blockIdx.y;
  const int slot = live_slot(p.slot_idx, b, p.num_slots, p.pad_slot_id);
  if (slot < 0) return;
  const int a = min(max(p.accepted[b], 1), p.window);
  const int64_t n16 = p.state_bytes / 16;
  const uint4* src = reinterpret_cast<const uint4*>(p.snapshots) + (static_cast<int64_t>(slot) * p.window + a - 1) * n16;
  uint4* dst = reinterpret_cast<uint4*>(p.state) + static_cast<int64_t>(slot) * n16;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kCopyThreads * kCopyVecsPerThread + threadIdx.x;
  uint4 v[kCopyVecsPerThread];
#pragma unroll
  for (int i = 0; i < kCopyVecsPerThread; ++i) {
    const int64_t e = base + i * kCopyThreads;
    if (e < n16) v[i] = __ldcs(src + e);
  }
#pragma unroll
  for (int i = 0; i < kCopyVecsPerThread; ++i) {
    const int64_t e = base + i * kCopyThreads;
    if (e < n16) __stcs(dst + e, v[i]);  // WRITES state[slot]
  }
}

inline cudaError_t launch_spec_commit(const rssm_spec_commit_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const int threads = 128;
  const dim3 grid((p.nheads * RSSM_CURSOR_REPLICAS + threads - 1) / threads, p.batch);
  spec_commit_kernel<<<grid, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

inline cudaError_t launch_snapshot_commit(const rssm_snapshot_commit_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const int64_t per_block = static_cast<int64_t>(kCopyThreads) * kCopyVecsPerThread * 16;
  const dim3 grid(static_cast<unsigned>((p.state_bytes + per_block - 1) / per_block), p.batch);
  snapshot_commit_kernel<<<grid, kCopyThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace replayssm
