// C ABI of the speculative commits shared by every family (common/spec_commit.cuh): validation, then launch.
#include "error.h"
#include "replayssm.h"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/spec_commit.cuh"

namespace replayssm {

static bool commit_aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

static rssm_status validate_spec_commit(const rssm_spec_commit_params& p) {
  if (p.batch < 0 || p.batch > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", p.batch);
  if (p.nheads < 1 || p.nheads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads=%d is out of range (1..65535)", p.nheads);
  if (p.num_slots < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_slots=%d is negative", p.num_slots);
  if (!p.slot_idx && p.batch > p.num_slots)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d exceeds num_slots=%d and no slot_idx was given", p.batch,
                p.num_slots);
  if (p.window < 1 || p.window > kMaxBufferLen)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (1..%d)", p.window, kMaxBufferLen);
  if (p.buffer_len < p.window || p.buffer_len > kMaxBufferLen)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "buffer_len=%d is out of range for window=%d (%d..%d)", p.buffer_len,
                p.window, p.window, kMaxBufferLen);
  if (!p.cursor) return fail(RSSM_ERR_INVALID_ARGUMENT, "cursor is NULL");
  if (!p.accepted) return fail(RSSM_ERR_INVALID_ARGUMENT, "accepted is NULL");
  return RSSM_OK;
}

static rssm_status validate_snapshot_commit(const rssm_snapshot_commit_params& p) {
  if (p.batch < 0 || p.batch > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d is out of range (0..65535)", p.batch);
  if (p.num_slots < 0) return fail(RSSM_ERR_INVALID_ARGUMENT, "num_slots=%d is negative", p.num_slots);
  if (!p.slot_idx && p.batch > p.num_slots)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "batch=%d exceeds num_slots=%d and no slot_idx was given", p.batch,
                p.num_slots);
  if (p.window < 1 || p.window > kMaxBufferLen)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (1..%d)", p.window, kMaxBufferLen);
  if (p.state_bytes <= 0 || p.state_bytes % 16)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "state_bytes=%lld must be a positive multiple of 16",
                static_cast<long long>(p.state_bytes));
  if (!p.state || !p.snapshots || !p.accepted)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is NULL", !p.state ? "state" : !p.snapshots ? "snapshots" : "accepted");
  if (!commit_aligned16(p.state) || !commit_aligned16(p.snapshots))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is not 16-byte aligned",
                !commit_aligned16(p.state) ? "state" : "snapshots");
  return RSSM_OK;
}

}  // namespace replayssm

using namespace replayssm;

extern "C" size_t rssm_spec_commit_params_size(void) { return sizeof(rssm_spec_commit_params); }

extern "C" rssm_status rssm_spec_commit_validate(const rssm_spec_commit_params* params, size_t params_size) {
  clear_error();
  if (!params) return fail(RSSM_ERR_INVALID_ARGUMENT, "params is NULL");
  if (params_size != sizeof(rssm_spec_commit_params))
    return fail(RSSM_ERR_ABI_MISMATCH, "params size %zu differs from the library's %zu", params_size,
                sizeof(rssm_spec_commit_params));
  return validate_spec_commit(*params);
}

extern "C" rssm_status rssm_spec_commit(const rssm_spec_commit_params* params, size_t params_size, void* stream) {
  const rssm_status st = rssm_spec_commit_validate(params, params_size);
  if (st != RSSM_OK) return st;
  const cudaError_t err = launch_spec_commit(*params, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return fail(RSSM_ERR_CUDA, "spec commit launch failed: %s", cudaGetErrorString(err));
  return RSSM_OK;
}

extern "C" size_t rssm_snapshot_commit_params_size(void) { return sizeof(rssm_snapshot_commit_params); }

extern "C" rssm_status rssm_snapshot_commit_validate(const rssm_snapshot_commit_params* params, size_t params_size) {
  clear_error();
  if (!params) return fail(RSSM_ERR_INVALID_ARGUMENT, "params is NULL");
  if (params_size != sizeof(rssm_snapshot_commit_params))
    return fail(RSSM_ERR_ABI_MISMATCH, "params size %zu differs from the library's %zu", params_size,
                sizeof(rssm_snapshot_commit_params));
  return validate_snapshot_commit(*params);
}

extern "C" rssm_status rssm_snapshot_commit(const rssm_snapshot_commit_params* params, size_t params_size,
                                           void* stream) {
  const rssm_status st = rssm_snapshot_commit_validate(params, params_size);
  if (st != RSSM_OK) return st;
  const cudaError_t err = launch_snapshot_commit(*params, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return fail(RSSM_ERR_CUDA, "snapshot commit launch failed: %s", cudaGetErrorString(err));
  return RSSM_OK;
}
