// Parameters of the Gated DeltaNet decode kernel family (conventional and ReplaySSM), one POD struct, C
// compatible. Same conventions as the Mamba-2 family: sizes int32, strides int64 in elements, filled by one host
// function per adapter, validated by rssm_gdn_decode_validate, passed by value to the kernel; new fields go at
// the end (rssm_gdn_decode_params_size checks the size).
//
// By default the inputs come prepared as the recurrence reads them: q and k L2-normalised (if the model does)
// and q scaled, in the activation dtype; g (log decay, <= 0) and beta in fp32. The options at the end of the
// struct move that preparation into the kernel (trtllm_replayssm/ops/gdn/reference.py defines it):
//   qk_flags: k <- k / sqrt(|k|² + 1e-6), q likewise (RSSM_GDN_QK_L2NORM); q <- q * q_scale (RSSM_GDN_QK_SCALE);
//             computed in fp32 from q, k in the activation dtype, then rounded to the activation dtype;
//   gate_mode RSSM_GDN_GATES_RAW: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), in fp32.
// per_channel_decay selects KDA: g has one log decay per key channel (g [batch, HV, K]). Per value head hv
// (key head hv / (HV / H)), state S is V x K (K contiguous):
//   S <- S diag(e^g) (GDN: e^g S) ;  u = beta (v - S k) ;  S <- S + u kᵀ ;  y = S q
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

typedef enum rssm_gdn_qk_flags {
  RSSM_GDN_QK_L2NORM = 1,  // L2-normalise q and k (eps 1e-6 inside the square root)
  RSSM_GDN_QK_SCALE = 2,   // multiply q by q_scale (after the norm)
} rssm_gdn_qk_flags;

typedef enum rssm_gdn_gate_mode {
  RSSM_GDN_GATES_PRECOMPUTED = 0,  // g, beta given in fp32
  RSSM_GDN_GATES_RAW = 1,          // a, b, A_log, dt_bias given; g, beta computed in the kernel
} rssm_gdn_gate_mode;

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
  float* ring_g;    // [num_slots, HV, round_up(L, 4)] fp32 (KDA: [num_slots, HV, L, K]). WRITTEN: as ring_u
  int32_t* cursor;  // [num_slots, HV, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS]. WRITTEN: history (replay)
  const int32_t* slot_idx;  // [batch] pool row of each batch row; NULL means row b uses slot b

  // ---- per-step inputs (innermost dimension contiguous; rows 16-byte aligned) ----
  const void* q;      // [batch, H, K] prepared query
  const void* k;      // [batch, H, K] prepared key
  const void* v;      // [batch, HV, V]
  const float* g;     // [batch, HV] log decay (KDA: [batch, HV, K]); precomputed gates only
  const float* beta;  // [batch, HV]; precomputed gates only
  void* y;            // [batch, HV, V] act_dtype. WRITTEN: every non-padding row

  int64_t q_batch_stride, q_head_stride;
  int64_t k_batch_stride, k_head_stride;
  int64_t v_batch_stride, v_head_stride;
  int64_t g_batch_stride, beta_batch_stride;  // g and beta: heads contiguous
  int64_t y_batch_stride, y_head_stride;

  // ---- options (appended; all zero = prepared q, k, precomputed g, beta, scalar decay) ----
  int32_t per_channel_decay;  // 1: KDA (g and ring_g per key channel, as noted above)
  int32_t qk_flags;           // rssm_gdn_qk_flags: preparation of q, k in the kernel (0: used as given)
  float q_scale;              // with RSSM_GDN_QK_SCALE (normally K^-1/2)
  int32_t gate_mode;          // rssm_gdn_gate_mode
  int32_t gate_dtype;         // rssm_dtype of a and b (raw gates)
  int32_t gate_param_dtype;   // rssm_dtype of A_log and dt_bias (raw gates)
  const void* a;              // [batch, HV] (KDA: [batch, HV, K], channels contiguous) raw decay projection
  const void* b;              // [batch, HV] raw beta projection
  const void* A_log;          // per value head (KDA: per head or per (head, channel)) through the strides below
  const void* dt_bias;        // as A_log
  int64_t g_head_stride;      // KDA, precomputed g: head stride (channels contiguous)
  int64_t a_batch_stride, a_head_stride, b_batch_stride;  // b: heads contiguous
  int64_t A_log_head_stride, A_log_k_stride;       // element of (head hv, channel c): hv * head + c * k stride
  int64_t dt_bias_head_stride, dt_bias_k_stride;   // (k strides are read by KDA only; 0 broadcasts over K)

  // ---- read copy (appended; replay, GDN only; rssm_read_format fp16 / bf16 / fp8, not nvfp4). The output read
  //      y = S q of a non-flush row reads the copy; S k (it feeds the correction u, hence the recurrence) reads
  //      the checkpoint. A flush row stores the checkpoint and rewrites the copy from the same fp32 values ----
  int32_t read_format;  // rssm_read_format; RSSM_READ_NONE: the fields below are ignored
  void* read_state;     // [num_slots, HV, V, K] fp16 / bf16 / fp8 e4m3; 16-byte aligned. WRITTEN: flush rows
  float* read_scale;    // fp8 only: [num_slots, HV, V] fp32, amax of the row / 448; 4-byte aligned. WRITTEN: flush rows

  // ---- the latency route (appended; replay, GDN only): a step whose rows' checkpoints total at most this many
  //      bytes (batch * HV * V * K * 4 <= latency_route_bytes) flushes every row in the conventional kernel's
  //      mapping (gdn/conventional.cuh): at history 0 the conventional step bit for bit, rows with records fold
  //      them first; history := 0, no ring record written. 0: never. Needs an fp32 checkpoint, no read copy,
  //      scalar decay and V * K <= 32768 (a replica per block of four warp tiles). ----
  int64_t latency_route_bytes;
} rssm_gdn_decode_params;

#ifdef __cplusplus
}
#endif
