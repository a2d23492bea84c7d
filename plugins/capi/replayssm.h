// trtllm-replayssm C ABI: the one entry point every adapter (Python binding, TensorRT plugins) calls.
// Public-API manners: extern "C", POD structs, fixed-width ints, status codes (never exceptions); the caller
// owns memory and the stream. Launches are asynchronous on the given stream, never synchronise, and are safe
// inside CUDA graph capture.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "replayssm/common/types.h"
#include "replayssm/conv1d/params.h"
#include "replayssm/gdn/params.h"
#include "replayssm/mamba2/params.h"
#include "replayssm/norm/params.h"
#include "replayssm/common/spec_params.h"
#include "replayssm/mamba2/spec_params.h"
#include "replayssm/gdn/spec_params.h"
#include "replayssm/common/prefill_params.h"

#if defined(_WIN32)
#define RSSM_API __declspec(dllexport)
#else
#define RSSM_API __attribute__((visibility("default")))
#endif

#define RSSM_VERSION_MAJOR 0
#define RSSM_VERSION_MINOR 1
#define RSSM_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

// major * 10000 + minor * 100 + patch of the loaded library.
RSSM_API int32_t rssm_version(void);
// A constant name for a status code.
RSSM_API const char* rssm_status_string(rssm_status status);
// The message of the last failing call on this thread ("" when none): names the offending value.
RSSM_API const char* rssm_last_error(void);

// sizeof(rssm_mamba2_decode_params) as compiled into the library; callers pass their own size to detect
// a mismatched header.
RSSM_API size_t rssm_mamba2_decode_params_size(void);
// Checks sizes, dtypes, pointers and strides against the dispatch table without launching.
RSSM_API rssm_status rssm_mamba2_decode_validate(const rssm_mamba2_decode_params* params, size_t params_size);
// Validates, then launches one decode step (params->mode picks conventional or ReplaySSM) on `stream`
// (a cudaStream_t; NULL is the legacy default stream). Nothing is launched when validation fails.
RSSM_API rssm_status rssm_mamba2_decode(const rssm_mamba2_decode_params* params, size_t params_size,
                                        void* stream);

// The same three entry points for the Gated DeltaNet family (params->mode: conventional or ReplaySSM).
RSSM_API size_t rssm_gdn_decode_params_size(void);
RSSM_API rssm_status rssm_gdn_decode_validate(const rssm_gdn_decode_params* params, size_t params_size);
RSSM_API rssm_status rssm_gdn_decode(const rssm_gdn_decode_params* params, size_t params_size, void* stream);

// The causal conv1d in front of the SSM mixers (params->mode: update, speculative verify, commit), same manners.
RSSM_API size_t rssm_conv1d_params_size(void);
RSSM_API rssm_status rssm_conv1d_validate(const rssm_conv1d_params* params, size_t params_size);
RSSM_API rssm_status rssm_conv1d(const rssm_conv1d_params* params, size_t params_size, void* stream);

// The SSM mixers' gated RMSNorm (params->norm_before_gate: gate first for Nemotron-H, norm first for Qwen3.5), same
// manners.
RSSM_API size_t rssm_gated_rmsnorm_params_size(void);
RSSM_API rssm_status rssm_gated_rmsnorm_validate(const rssm_gated_rmsnorm_params* params, size_t params_size);
RSSM_API rssm_status rssm_gated_rmsnorm(const rssm_gated_rmsnorm_params* params, size_t params_size, void* stream);

// Mamba-2 speculative verify of T tokens per row (params->mode: RSSM_MAMBA2_REPLAY = ReplaySSM verify, records
// into the ring and one-window-early flush; RSSM_MAMBA2_CONVENTIONAL = the snapshot path), same manners.
RSSM_API size_t rssm_mamba2_verify_params_size(void);
RSSM_API rssm_status rssm_mamba2_verify_validate(const rssm_mamba2_verify_params* params, size_t params_size);
RSSM_API rssm_status rssm_mamba2_verify(const rssm_mamba2_verify_params* params, size_t params_size, void* stream);

// Speculative commits, family independent: the ReplaySSM cursor move (history += accepted, counts read on the
// device) and the snapshot path's restore (state := snapshot of the accepted token).
RSSM_API size_t rssm_spec_commit_params_size(void);
RSSM_API rssm_status rssm_spec_commit_validate(const rssm_spec_commit_params* params, size_t params_size);
RSSM_API rssm_status rssm_spec_commit(const rssm_spec_commit_params* params, size_t params_size, void* stream);
RSSM_API size_t rssm_snapshot_commit_params_size(void);
RSSM_API rssm_status rssm_snapshot_commit_validate(const rssm_snapshot_commit_params* params, size_t params_size);
RSSM_API rssm_status rssm_snapshot_commit(const rssm_snapshot_commit_params* params, size_t params_size,
                                          void* stream);

// Gated DeltaNet speculative verify of T tokens per row (params->mode: RSSM_GDN_REPLAY = ReplaySSM verify, records
// into the ring and one-window-early flush; RSSM_GDN_CONVENTIONAL = the snapshot path), same manners. The commits
// are the family-independent ones above.
RSSM_API size_t rssm_gdn_verify_params_size(void);
RSSM_API rssm_status rssm_gdn_verify_validate(const rssm_gdn_verify_params* params, size_t params_size);
RSSM_API rssm_status rssm_gdn_verify(const rssm_gdn_verify_params* params, size_t params_size, void* stream);

// Prefill (the context phase) of a prompt per row, each family through its conventional step token by token
// (common/prefill_params.h has the contract), same manners. The caller provides the workspace: at least
// rssm_prefill_workspace_size(batch, num_tokens) bytes (the per-token slot indices), on the device.
RSSM_API size_t rssm_prefill_workspace_size(int32_t batch, int32_t num_tokens);
RSSM_API size_t rssm_mamba2_prefill_params_size(void);
RSSM_API rssm_status rssm_mamba2_prefill_validate(const rssm_mamba2_prefill_params* params, size_t params_size);
RSSM_API rssm_status rssm_mamba2_prefill(const rssm_mamba2_prefill_params* params, size_t params_size, void* stream);
RSSM_API size_t rssm_gdn_prefill_params_size(void);
RSSM_API rssm_status rssm_gdn_prefill_validate(const rssm_gdn_prefill_params* params, size_t params_size);
RSSM_API rssm_status rssm_gdn_prefill(const rssm_gdn_prefill_params* params, size_t params_size, void* stream);
RSSM_API size_t rssm_conv1d_prefill_params_size(void);
RSSM_API rssm_status rssm_conv1d_prefill_validate(const rssm_conv1d_prefill_params* params, size_t params_size);
RSSM_API rssm_status rssm_conv1d_prefill(const rssm_conv1d_prefill_params* params, size_t params_size, void* stream);

#ifdef __cplusplus
}
#endif
