// Parameters of the prefill (context phase) entry points, one POD struct per family, C compatible; new fields go
// at the end (part of the C ABI; the *_params_size functions check them). docs/prefill.md has the contract;
// trtllm_replayssm/ops/prefill.py the reference.
//
// A prefill runs a prompt of num_tokens tokens per batch row as the family's conventional decode step, token by
// token: each struct embeds that step's params (`step`, describing token 0: its input and output pointers, batch
// and head strides, sizes, dtypes, the pool) and adds the token strides, the rows' prompt lengths and a
// workspace. For every live row b (slot_idx[b] not padding, inside the pool):
//   1. the slot's state starts at zero (Mamba-2 / GDN: checkpoint and cursor, i.e. an empty ring; conv1d: state);
//   2. tokens t < lengths[b] run the conventional step in order; y[b, t] is written for those tokens only;
//   3. Mamba-2 / GDN: the slot's read copy (step.read_format) is rewritten from its final checkpoint with the
//      flush's quantiser.
// Other slots, padding rows and later tokens of y are not touched. lengths stay on the device: a length above
// num_tokens runs every token, one below 1 none (the slot keeps the zero state). Slot indices must be distinct.
// Launches: one kernel starts the live slots and writes the per-token slot indices into the workspace (the row's
// slot for t < lengths[b], else pad_slot_id), then num_tokens conventional steps, then (with a read copy) one
// refresh kernel; all on the caller's stream, no host synchronisation (capturable in a CUDA graph).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"
#include "replayssm/conv1d/params.h"
#include "replayssm/gdn/params.h"
#include "replayssm/mamba2/params.h"

#ifdef __cplusplus
extern "C" {
#endif

// Mamba-2. step: mode RSSM_MAMBA2_CONVENTIONAL, latency_route_bytes 0, slot_idx required, cursor reset to an empty
// ring (WRITTEN; NULL: a pool without ring, conventional decoding only), ring pointers ignored; read_format,
// read_state, read_scale, read_block_scale: the pool's read copy, rewritten at the end (WRITTEN), a pair the replay
// decode reads ((fp32, fp16 / bf16 / fp8 / nvfp4), (fp16 / bf16, fp8)).
typedef struct rssm_mamba2_prefill_params {
  rssm_mamba2_decode_params step;
  int32_t num_tokens;       // S: tokens per row, 1..65535
  const int32_t* lengths;   // [batch] device int32: tokens of each row's prompt
  int32_t* workspace;       // >= rssm_prefill_workspace_size(batch, num_tokens) bytes, 4-byte aligned. WRITTEN
  int64_t x_token_stride, dt_token_stride, B_token_stride, C_token_stride, z_token_stride, y_token_stride;
} rssm_mamba2_prefill_params;

// Gated DeltaNet / KDA. step: mode RSSM_GDN_CONVENTIONAL, latency_route_bytes 0, slot_idx and cursor as for
// Mamba-2; read_format / read_state / read_scale: the pool's read copy (an fp32 checkpoint, fp16 / bf16 / fp8,
// not KDA), rewritten at the end. Token strides of the gates in use (g, beta or a, b); the others are ignored.
typedef struct rssm_gdn_prefill_params {
  rssm_gdn_decode_params step;
  int32_t num_tokens;
  const int32_t* lengths;
  int32_t* workspace;
  int64_t q_token_stride, k_token_stride, v_token_stride, y_token_stride;
  int64_t g_token_stride, beta_token_stride, a_token_stride, b_token_stride;
} rssm_gdn_prefill_params;

// The causal conv1d. step: mode RSSM_CONV1D_UPDATE with num_tokens 1, the state [num_slots, C, k-1] (WRITTEN: the
// live rows' slots := the last k-1 inputs of the prompt, zeros in front of a shorter one), x and y of token 0;
// step.x_token_stride and step.y_token_stride are the prompt's token strides; slot_idx required.
typedef struct rssm_conv1d_prefill_params {
  rssm_conv1d_params step;
  int32_t num_tokens;
  const int32_t* lengths;
  int32_t* workspace;
} rssm_conv1d_prefill_params;

#ifdef __cplusplus
}
#endif
