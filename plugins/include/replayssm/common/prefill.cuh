// The two small kernels of a prefill (common/prefill_params.h has the contract; plugins/capi/prefill.cu launches
// them around the family's conventional decode steps): the start of the live slots with the per-token slot indices,
// and the refresh of the live slots' read copies from their final checkpoints with the flush's quantiser.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/common/nvfp4.cuh"
#include "replayssm/common/read_copy.cuh"
#include "replayssm/mamba2/decode.cuh"  // store_read_copy_nvfp4: the nvfp4 flush's encoder

namespace replayssm {

// A region of a slot zeroed at the start: `rows` rows of `row_bytes` bytes, `row_stride` bytes apart, from
// base + slot * slot_stride (all multiples of the kernel's word size).
struct PrefillZero {
  char* base;
  int64_t slot_stride, rows, row_bytes, row_stride;
};

constexpr int kPrefillMaxZero = 2;

struct PrefillStartArgs {
  const int32_t* slot_idx;  // [batch] the rows' slots
  const int32_t* lengths;   // [batch] tokens of each row's prompt
  int32_t* token_slots;     // [num_tokens, batch] WRITTEN: slot_idx[b] where t < lengths[b], else pad_slot_id
  int batch, num_tokens, num_slots, pad_slot_id, regions;
  PrefillZero zero[kPrefillMaxZero];
};

__device__ __forceinline__ bool prefill_live(int slot, int pad_slot_id, int num_slots) {
  return slot != pad_slot_id && slot >= 0 && slot < num_slots;
}

// Grid (chunks, batch): block (0, b) writes row b's slot index of every token; every block of a live row zeroes
// its share of the row's slot regions in words W (uint4, uint2, uint32_t or uint16_t).
template <typename W>
__global__ void prefill_start_kernel(const __grid_constant__ PrefillStartArgs a) {
  const int b = blockIdx.y;
  const int slot = a.slot_idx[b];
  const bool live = prefill_live(slot, a.pad_slot_id, a.num_slots);
  if (blockIdx.x == 0) {
    const int len = live ? a.lengths[b] : 0;
    for (int t = threadIdx.x; t < a.num_tokens; t += blockDim.x)
      a.token_slots[static_cast<int64_t>(t) * a.batch + b] = t < len ? slot : a.pad_slot_id;  // WRITES workspace
  }
  if (!live) return;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int r = 0; r < a.regions; ++r) {
    const PrefillZero z = a.zero[r];
    const int64_t words = z.row_bytes / static_cast<int64_t>(sizeof(W));
    char* slot_base = z.base + slot * z.slot_stride;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < z.rows * words; i += step)
      reinterpret_cast<W*>(slot_base + (i / words) * z.row_stride)[i % words] = W{};  // WRITES the slot's state
  }
}

struct PrefillRefreshArgs {
  const void* state;       // [num_slots, rows, N] the checkpoints
  void* read_state;        // the read copy's codes (layout of the family's params.h). WRITTEN: live slots
  float* read_scale;       // fp8: [num_slots, rows]; nvfp4: [num_slots, rows / 4]. WRITTEN: live slots
  void* read_block_scale;  // nvfp4: [num_slots, rows, N / 16]. WRITTEN: live slots
  const int32_t* slot_idx;
  int batch, num_slots, pad_slot_id, rows;  // rows: state rows per slot (heads x rows per head)
};

constexpr int kPrefillRefreshWarps = 4;

// Grid (ceil(rows / (4 RW)), batch), 4 warps: each warp loads RW consecutive state rows of its row's slot in the
// decode kernels' thread mapping (Tiling<StateT, N>) and stores them with the flush's quantiser, so the copy has
// the bits a flush of the same checkpoint writes (quant.py).
template <typename StateT, typename CopyT, int N>
__global__ void __launch_bounds__(kPrefillRefreshWarps * 32)
    prefill_refresh_kernel(const __grid_constant__ PrefillRefreshArgs a) {
  using Tl = Tiling<StateT, N>;
  const int slot = a.slot_idx[blockIdx.y];
  if (!prefill_live(slot, a.pad_slot_id, a.num_slots)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, col_lane = lane % Tl::LPR;
  const int row0 = (blockIdx.x * kPrefillRefreshWarps + warp) * Tl::RW;  // the warp's first row (uniform exit)
  if (row0 >= a.rows) return;
  const int64_t slot_row0 = static_cast<int64_t>(slot) * a.rows + row0;
  const int64_t first = (slot_row0 + lane / Tl::LPR) * N + col_lane * Tl::VEC;  // the thread's first element
  float s[Tl::KI][Tl::NV][Tl::VEC];
  const StateT* src = static_cast<const StateT*>(a.state) + first;
#pragma unroll
  for (int i = 0; i < Tl::KI; ++i)
#pragma unroll
    for (int v = 0; v < Tl::NV; ++v) load_vec<StateT, Tl::VEC>(src + i * Tl::RPI * N + v * Tl::LPR * Tl::VEC, s[i][v]);
  if constexpr (std::is_same_v<CopyT, nvfp4x2>) {
    mamba2::store_read_copy_nvfp4<Tl>(s, static_cast<uint8_t*>(a.read_state) + first / 2,
                              static_cast<uint8_t*>(a.read_block_scale) + first / kNvfp4Block,
                              a.read_scale + slot_row0 / kNvfp4Rows, lane, col_lane);
  } else {
    constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;
    store_read_copy<CopyT, Tl>(s, static_cast<CopyT*>(a.read_state) + first,
                               kRowScale ? a.read_scale + slot_row0 + lane / Tl::LPR : nullptr, col_lane);
  }
}

}  // namespace replayssm
