// Parameters of the Gated DeltaNet decode kernel family (conventional and ReplaySSM), one POD struct, C
// compatible. Same conventions as the Mamba-2 family: sizes int32, strides int64 in elements, filled by one host
// function per adapter, validated by rssm_gdn_decode_validate, passed by value to the kernel; new fields go at
// the end (rssm_gdn_decode_params_size checks the size).
//
// Inputs are prepared as the recurrence reads them: q and k L2-normalised (if the model does) and q scaled,
// in the activation dtype; g (log decay, <= 0) and beta in fp32. Per value head hv (key head hv / (HV / H)),
// state S is V x K (K contiguous):
//   S <- e^g S ;  u = beta (v - S k) ;  S <- S + u kᵀ ;  y = S q
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rssm_gdn_mode {
  RSSM_GDN_CONVENTIONAL = 0,  // load state, update, store state
  RSSM_GDN_REPLAY = 1,        // checkpoint + ring of (u, k, g): output-only on non-flush rows, rebuild on flush rows
} rssm_gdn_mode;

typedef struct rssm_gdn_decode_params {
  // ---- sizes ----
  int32_t batch;        // rows in this step
  int32_t num_k_heads;  // H
  int32_t num_v_heads;  // HV, a multiple of H
  int32_t head_k_dim;   // K
  int32_t head_v_dim;   // V
  int32_t buffer_len;   // L (replay only): records per ring, 1..64; a row flushes when history == L-1
  int32_t num_slots;    // rows of the pool; slot indices outside [0, num_slots) are skipped like padding
  int32_t pad_slot_id;  // slot index meaning "padding row: skip, touch nothing" (normally -1)
  int32_t mode;         // rssm_gdn_mode
  int32_t state_dtype;  // rssm_dtype of the checkpoint
  int32_t act_dtype;    // rssm_dtype of q, k, v, y and of the ring records u and k

  // ---- pool (written in place; contiguous, owned by the pool) ----
  void* state;      // [num_slots, HV, V, K] state_dtype. WRITTEN: every row (conventional), flush rows (replay)
  void* ring_u;     // [num_slots, HV, L, V] act_dtype.   WRITTEN: the row's new record (replay, non-flush rows)
  void* ring_k;     // [num_slots, H, L, K] act_dtype.    WRITTEN: as ring_u
  float* ring_g;    // [num_slots, HV, round_up(L, 4)] fp32. WRITTEN: as ring_u
  int32_t* cursor;  // [num_slots, HV, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS]. WRITTEN: history (replay)
  const int32_t* slot_idx;  // [batch] pool row of each batch row; NULL means row b uses slot b

  // ---- per-step inputs (innermost dimension contiguous; rows 16-byte aligned) ----
  const void* q;      // [batch, H, K] prepared query
  const void* k;      // [batch, H, K] prepared key
  const void* v;      // [batch, HV, V]
  const float* g;     // [batch, HV] log decay
  const float* beta;  // [batch, HV]
  void* y;            // [batch, HV, V] act_dtype. WRITTEN: every non-padding row

  int64_t q_batch_stride, q_head_stride;
  int64_t k_batch_stride, k_head_stride;
  int64_t v_batch_stride, v_head_stride;
  int64_t g_batch_stride, beta_batch_stride;  // g and beta: heads contiguous
  int64_t y_batch_stride, y_head_stride;
} rssm_gdn_decode_params;

#ifdef __cplusplus
}
#endif
