// C ABI of the speculative commits shared by every family (common/spec_commit.cuh): validation, then launch.
#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/spec_commit.cuh"

namespace replayssm {

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
  if (!aligned16(p.state) || !aligned16(p.snapshots))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "%s is not 16-byte aligned",
                !aligned16(p.state) ? "state" : "snapshots");
  return RSSM_OK;
}

}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_spec_commit, rssm_spec_commit_params, replayssm::validate_spec_commit,
                         replayssm::launch_spec_commit, "spec commit")
RSSM_DEFINE_ENTRY_POINTS(rssm_snapshot_commit, rssm_snapshot_commit_params, replayssm::validate_snapshot_commit,
                         replayssm::launch_snapshot_commit, "snapshot commit")
