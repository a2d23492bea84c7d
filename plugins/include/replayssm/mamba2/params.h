// Parameters of the Mamba-2 decode kernel family (conventional and ReplaySSM), one POD struct, C compatible.
// Filled by one host function per adapter (Python binding, TensorRT plugin), validated by
// rssm_mamba2_decode_validate, passed by value to the kernel. Sizes are int32, strides int64 in elements.
// New fields go at the end (the struct is part of the C ABI; rssm_mamba2_decode_params_size checks it).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rssm_mamba2_mode {
  RSSM_MAMBA2_CONVENTIONAL = 0,  // load state, update, store state (every step writes the whole state)
  RSSM_MAMBA2_REPLAY = 1,        // checkpoint + ring: output-only on non-flush rows, rebuild-and-store on flush rows
} rssm_mamba2_mode;

typedef struct rssm_mamba2_decode_params {
  // ---- sizes ----
  int32_t batch;        // rows in this step
  int32_t nheads;       // H
  int32_t head_dim;     // P
  int32_t dstate;       // N
  int32_t ngroups;      // G, divides H; heads h*G/H .. share B and C
  int32_t buffer_len;   // L (replay only): records per ring, 1..64; a row flushes when history == L-1
  int32_t num_slots;    // rows of the pool; slot indices outside [0, num_slots) are skipped like padding
  int32_t pad_slot_id;  // slot index meaning "padding row: skip, touch nothing" (normally -1)
  int32_t mode;         // rssm_mamba2_mode
  int32_t state_dtype;  // rssm_dtype of the checkpoint
  int32_t act_dtype;    // rssm_dtype of x, dt, B, C, z, y and of the ring records x and B
  int32_t dt_softplus;  // 1: dt = softplus(dt + dt_bias) (identity above 20); 0: dt = dt + dt_bias

  // ---- pool (written in place; layouts are contiguous and owned by the pool) ----
  void* state;      // [num_slots, H, P, N] state_dtype. WRITTEN: every row (conventional), flush rows (replay)
  void* ring_x;     // [num_slots, H, L, P] act_dtype.   WRITTEN: the row's new record (replay, non-flush rows)
  void* ring_B;     // [num_slots, G, L, N] act_dtype.   WRITTEN: the row's new record (replay, non-flush rows)
  float* ring_dt;   // [num_slots, H, round_up(L, 4)] fp32, processed dt (padded to 16 bytes). WRITTEN: as ring_x
  int32_t* cursor;  // [num_slots, H, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS]. WRITTEN: history (replay)
  const int32_t* slot_idx;  // [batch] pool row of each batch row; NULL means row b uses slot b

  // ---- per-step inputs (innermost dimension contiguous; rows of x, z, B, C 16-byte aligned: base pointers
  //      aligned and outer strides multiples of 16 bytes) ----
  const void* x;    // [batch, H, P]
  const void* dt;   // [batch, H] raw dt (before bias and softplus)
  const void* B;    // [batch, G, N]
  const void* C;    // [batch, G, N]
  const void* z;    // [batch, H, P] or NULL: y *= z * sigmoid(z)
  const float* A;        // [H], negative
  const float* D;        // [H] or NULL
  const float* dt_bias;  // [H] or NULL
  void* y;          // [batch, H, P] act_dtype. WRITTEN: every non-padding row

  int64_t x_batch_stride, x_head_stride;
  int64_t dt_batch_stride, dt_head_stride;
  int64_t B_batch_stride, B_group_stride;
  int64_t C_batch_stride, C_group_stride;
  int64_t z_batch_stride, z_head_stride;
  int64_t y_batch_stride, y_head_stride;

  // ---- read copy (replay only; rssm_read_format). The output-only route reads the copy instead of the
  //      checkpoint; a flush row stores the checkpoint and rewrites the copy from the same fp32 values ----
  int32_t read_format;  // rssm_read_format; RSSM_READ_NONE: the fields below are ignored
  void* read_state;     // [num_slots, H, P, N] fp16 / bf16 / fp8 e4m3, or nvfp4 [num_slots, H, P, N/2] e2m1
                        // codes (two per byte, quant.py's bit order); 16-byte aligned. WRITTEN: flush rows
  float* read_scale;    // fp8: [num_slots, H, P] fp32, amax of the row / 448; nvfp4: [num_slots, H, P/4] fp32,
                        // amax of 4 rows / (448 * 6); 4-byte aligned. WRITTEN: flush rows
  void* read_block_scale;  // nvfp4 only: [num_slots, H, P, N/16] e4m3, one per 16 elements; 16-byte aligned.
                           // WRITTEN: flush rows

  // ---- the latency route (replay only): a step whose rows' checkpoints total at most this many bytes
  //      (batch * H * P * N * 4 <= latency_route_bytes) flushes every row: the checkpoint takes the window's
  //      records and the current token, y = S C + D x, history := 0, no ring record written. Small steps are
  //      latency-bound, so the replay's saving of bytes buys nothing there; at history 0 this is the
  //      conventional step, bit for bit. 0: never. Needs an fp32 checkpoint, no read copy and a head whose
  //      P * N / 1024 warp tiles can own the cursor replicas (mamba2/conventional.cuh latency_route_fits). ----
  int64_t latency_route_bytes;
} rssm_mamba2_decode_params;

#ifdef __cplusplus
}
#endif
