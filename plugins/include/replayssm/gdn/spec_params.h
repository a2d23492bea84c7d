// Parameters of the Gated DeltaNet speculative verify family (ReplaySSM verify and the conventional snapshot
// path), one POD struct, C compatible. Same conventions as rssm_gdn_decode_params: sizes int32, strides int64 in
// elements, filled by one host function per adapter, validated by rssm_gdn_verify_validate, passed by value to
// the kernels; new fields go at the end (rssm_gdn_verify_params_size checks the size).
//
// A step verifies a window of T tokens per row (the last accepted token and T-1 drafts); token i of row b is
// q[b, i], k[b, i], v[b, i], g[b, i], beta[b, i], prepared as the recurrence reads them (q, k normalised and
// scaled, in the activation dtype; g and beta in fp32). trtllm_replayssm/ops/gdn/spec_reference.py is the
// specification of both modes. The commits are family independent (common/spec_params.h).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"
#include "replayssm/gdn/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rssm_gdn_verify_params {
  // ---- sizes ----
  int32_t batch;        // rows in this step
  int32_t num_k_heads;  // H
  int32_t num_v_heads;  // HV, a multiple of H
  int32_t head_k_dim;   // K
  int32_t head_v_dim;   // V
  int32_t window;       // T: tokens verified per row, 2..8
  int32_t buffer_len;   // L (replay only): records per ring, 2T..64
  int32_t num_slots;    // rows of the pool; slot indices outside [0, num_slots) are skipped like padding
  int32_t pad_slot_id;  // slot index meaning "padding row: skip, touch nothing" (normally -1)
  int32_t mode;         // rssm_gdn_mode: RSSM_GDN_REPLAY (ReplaySSM verify) or RSSM_GDN_CONVENTIONAL (the
                        // snapshot path: one stored state per token)
  int32_t state_dtype;  // rssm_dtype of the checkpoint (and of the snapshots)
  int32_t act_dtype;    // rssm_dtype of q, k, v, y and of the ring records u and k

  // ---- pool (contiguous, owned by the pool) ----
  void* state;      // [num_slots, HV, V, K] state_dtype. Replay: WRITTEN on rows that flush with h > 0
                    // (h + 2T > L). Snapshot path: read only.
  void* ring_u;     // replay: [num_slots, HV, L, V] act_dtype. WRITTEN: the T records at positions h .. h+T-1
  void* ring_k;     // replay: [num_slots, H, L, K] act_dtype.  WRITTEN: as ring_u
  float* ring_g;    // replay: [num_slots, HV, round_up(L, 4)] fp32. WRITTEN: as ring_u
  int32_t* cursor;  // replay: [num_slots, HV, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS]. WRITTEN on flush rows
                    // with h > 0 (history := 0, origin := origin + h); the history is advanced by rssm_spec_commit
  void* snapshots;  // snapshot path: [num_slots, T, HV, V, K] state_dtype. WRITTEN: the state after each token
  const int32_t* slot_idx;  // [batch] pool row of each batch row; NULL means row b uses slot b

  // ---- per-step inputs (innermost dimension contiguous; rows of q, k, v 16-byte aligned: base pointers aligned
  //      and outer strides multiples of 16 bytes) ----
  const void* q;      // [batch, T, H, K] prepared query
  const void* k;      // [batch, T, H, K] prepared key
  const void* v;      // [batch, T, HV, V]
  const float* g;     // [batch, T, HV] log decay (heads contiguous)
  const float* beta;  // [batch, T, HV] (heads contiguous)
  void* y;            // [batch, T, HV, V] act_dtype. WRITTEN: every token of every non-padding row

  int64_t q_batch_stride, q_token_stride, q_head_stride;
  int64_t k_batch_stride, k_token_stride, k_head_stride;
  int64_t v_batch_stride, v_token_stride, v_head_stride;
  int64_t g_batch_stride, g_token_stride;
  int64_t beta_batch_stride, beta_token_stride;
  int64_t y_batch_stride, y_token_stride, y_head_stride;

  // ---- read copy (replay verify only; rssm_read_format; all zero: no copy). y reads the copy for S0 q instead
  //      of the checkpoint; S0 k (the correction u) reads the checkpoint; a folding row (h + 2T > L, h > 0) stores
  //      the checkpoint and rewrites the copy from the same fp32 values. Compiled: an fp32 checkpoint with
  //      fp16 / bf16 activations, copy fp16, bf16 or fp8 (not nvfp4) ----
  int32_t read_format;  // rssm_read_format; RSSM_READ_NONE: the fields below are ignored
  void* read_state;     // [num_slots, HV, V, K] fp16 / bf16 / fp8 e4m3; 16-byte aligned. WRITTEN: folding rows
  float* read_scale;    // fp8: [num_slots, HV, V] fp32, amax of the row / 448; 4-byte aligned. WRITTEN: folding rows
} rssm_gdn_verify_params;

#ifdef __cplusplus
}
#endif
