// Parameters of the causal depthwise conv1d family in front of the SSM mixers (kernel size k, C channels), one
// POD struct, C compatible. Same conventions as the decode families: sizes int32, strides int64 in elements,
// filled by one host function per adapter, validated by rssm_conv1d_validate, passed by value to the kernels;
// new fields go at the end (rssm_conv1d_params_size checks the size). docs/conv1d.md has the I/O contract;
// trtllm_replayssm/ops/conv1d.py holds the references (the specification).
//
// Per channel c, with a window of the last k-1 committed inputs followed by the new input:
//   y = act(sum_{i<k} w[c, i] * window[i] + bias[c])      act = silu or identity; arithmetic in fp32
// Three modes over the same conv:
//   UPDATE  state [slots, C, k-1]; x [b, C] -> y [b, C]; state := (state, x) shifted left by one
//   VERIFY  windows [slots, C, k-1+T] (committed history in positions 0..k-2); x [b, T, C] -> y [b, T, C];
//           writes x (in the window dtype) into positions k-1..k-2+T; the history is left as it was
//   COMMIT  windows as VERIFY; accepted [b] int32 a: positions 0..k-2 := positions a..a+k-2 (shift left by a).
//           Rows whose a is outside 1..T are left untouched (the kernel cannot report them without a host sync;
//           a = 0, nothing accepted, is the identity anyway).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rssm_conv1d_mode {
  RSSM_CONV1D_UPDATE = 0,  // standard decode step: state [slots, C, k-1] shifted by one
  RSSM_CONV1D_VERIFY = 1,  // speculative verify of T tokens over windows [slots, C, k-1+T]
  RSSM_CONV1D_COMMIT = 2,  // speculative commit: shift each window left by its row's accepted count
} rssm_conv1d_mode;

typedef struct rssm_conv1d_params {
  // ---- sizes ----
  int32_t mode;          // rssm_conv1d_mode
  int32_t batch;         // rows in this step
  int32_t channels;      // C
  int32_t kernel_size;   // k: 2..4
  int32_t num_tokens;    // T: 1 (update), 1..16 (verify, commit)
  int32_t num_slots;     // rows of the pool; slot indices outside [0, num_slots) are skipped like padding
  int32_t pad_slot_id;   // slot index meaning "padding row: skip, touch nothing" (normally -1)
  int32_t state_dtype;   // rssm_dtype of state / windows
  int32_t act_dtype;     // rssm_dtype of x and y (update, verify)
  int32_t weight_dtype;  // rssm_dtype of weight and bias: fp32 or act_dtype (update, verify)
  int32_t silu;          // 1: y = silu(conv + bias); 0: y = conv + bias

  // ---- pool (written in place) ----
  void* state;  // update [num_slots, C, k-1]; verify, commit [num_slots, C, k-1+T]; state_dtype; innermost
                // dimension contiguous. WRITTEN: the slot of every non-padding row (commit: rows with a in 1..T)
  const int32_t* slot_idx;  // [batch] pool row of each batch row; NULL means row b uses slot b
  const int32_t* accepted;  // [batch] accepted tokens per row (commit only), device resident

  // ---- per-step inputs (channels contiguous) ----
  const void* x;       // update [batch, C]; verify [batch, T, C]; act_dtype
  const void* weight;  // [C, k] contiguous, weight_dtype (update, verify)
  const void* bias;    // [C] contiguous, weight_dtype, or NULL
  void* y;             // update [batch, C]; verify [batch, T, C]; act_dtype. WRITTEN: every non-padding row

  int64_t state_slot_stride, state_channel_stride;
  int64_t x_batch_stride, x_token_stride;  // token stride: verify only
  int64_t y_batch_stride, y_token_stride;  // token stride: verify only
} rssm_conv1d_params;

#ifdef __cplusplus
}
#endif
