// Parameters of the Mamba-2 speculative verify family (ReplaySSM verify and the conventional snapshot path),
// one POD struct, C compatible. Filled by one host function per adapter, validated by
// rssm_mamba2_verify_validate, passed by value to the kernels. Sizes are int32, strides int64 in elements.
// New fields go at the end (the struct is part of the C ABI; rssm_mamba2_verify_params_size checks it).
//
// A step verifies a window of T tokens per row (the last accepted token and T-1 drafts); token s of row b is
// x[b, s], dt[b, s], B[b, s], C[b, s], z[b, s]. The maths and the window rules are in
// trtllm_replayssm/ops/mamba2/spec_reference.py (the specification).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"
#include "replayssm/mamba2/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rssm_mamba2_verify_params {
  // ---- sizes ----
  int32_t batch;        // rows in this step
  int32_t nheads;       // H
  int32_t head_dim;     // P
  int32_t dstate;       // N
  int32_t ngroups;      // G, divides H
  int32_t window;       // T: tokens verified per row, 2..8
  int32_t buffer_len;   // L (replay only): records per ring, 2T..64
  int32_t num_slots;    // rows of the pool; slot indices outside [0, num_slots) are skipped like padding
  int32_t pad_slot_id;  // slot index meaning "padding row: skip, touch nothing" (normally -1)
  int32_t mode;         // rssm_mamba2_mode: RSSM_MAMBA2_REPLAY (ReplaySSM verify) or RSSM_MAMBA2_CONVENTIONAL
                        // (the snapshot path: one stored state per token)
  int32_t state_dtype;  // rssm_dtype of the checkpoint (and of the snapshots)
  int32_t act_dtype;    // rssm_dtype of x, dt, B, C, z, y and of the ring records x and B
  int32_t dt_softplus;  // 1: dt = softplus(dt + dt_bias) (identity above 20); 0: dt = dt + dt_bias

  // ---- pool (contiguous, owned by the pool) ----
  void* state;      // [num_slots, H, P, N] state_dtype. Replay: WRITTEN on rows that flush (h + 2T > L).
                    // Snapshot path: read only.
  void* ring_x;     // replay: [num_slots, H, L, P] act_dtype.  WRITTEN: the T records at positions h .. h+T-1
  void* ring_B;     // replay: [num_slots, G, L, N] act_dtype.  WRITTEN: as ring_x
  float* ring_dt;   // replay: [num_slots, H, round_up(L, 4)] fp32, processed dt. WRITTEN: as ring_x
  int32_t* cursor;  // replay: [num_slots, H, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS]. WRITTEN on flush rows
                    // (history := 0, origin := origin + h); the history is advanced by rssm_spec_commit
  void* snapshots;  // snapshot path: [num_slots, T, H, P, N] state_dtype. WRITTEN: the state after each token
  const int32_t* slot_idx;  // [batch] pool row of each batch row; NULL means row b uses slot b

  // ---- per-step inputs (innermost dimension contiguous; rows of x, z, B, C 16-byte aligned: base pointers
  //      aligned and outer strides multiples of 16 bytes) ----
  const void* x;    // [batch, T, H, P]
  const void* dt;   // [batch, T, H] raw dt (before bias and softplus)
  const void* B;    // [batch, T, G, N]
  const void* C;    // [batch, T, G, N]
  const void* z;    // [batch, T, H, P] or NULL: y *= z * sigmoid(z)
  const float* A;        // [H], negative
  const float* D;        // [H] or NULL
  const float* dt_bias;  // [H] or NULL
  void* y;          // [batch, T, H, P] act_dtype. WRITTEN: every token of every non-padding row

  int64_t x_batch_stride, x_token_stride, x_head_stride;
  int64_t dt_batch_stride, dt_token_stride, dt_head_stride;
  int64_t B_batch_stride, B_token_stride, B_group_stride;
  int64_t C_batch_stride, C_token_stride, C_group_stride;
  int64_t z_batch_stride, z_token_stride, z_head_stride;
  int64_t y_batch_stride, y_token_stride, y_head_stride;

  // ---- read copy (replay verify only; rssm_read_format; all zero: no copy). The outputs read the copy instead
  //      of the checkpoint; a flush row stores the checkpoint and rewrites the copy from the same fp32 values.
  //      Compiled: an fp32 checkpoint with fp16 / bf16 activations, copy fp16, bf16 or fp8 (not nvfp4) ----
  int32_t read_format;  // rssm_read_format; RSSM_READ_NONE: the fields below are ignored
  void* read_state;     // [num_slots, H, P, N] fp16 / bf16 / fp8 e4m3; 16-byte aligned. WRITTEN: flush rows
  float* read_scale;    // fp8: [num_slots, H, P] fp32, amax of the row / 448; 4-byte aligned. WRITTEN: flush rows
} rssm_mamba2_verify_params;

#ifdef __cplusplus
}
#endif
