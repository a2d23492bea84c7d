// C ABI of the speculative commits shared by every family (common/spec_commit.cuh): validation, then launch.
#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/spec_commit.cuh"

namespace replayssm {

static rssm_status validate_spec_commit(const rssm_spec_commit_params& p) {
  if (const rssm_status st = check_batch(p.batch, p.num_slots, p.slot_idx)) return st;
  if (p.nheads < 1 || p.nheads > 65535)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "nheads=%d is out of range (1..65535)", p.nheads);
  if (p.window < 1 || p.window > kMaxBufferLen)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (1..%d)", p.window, kMaxBufferLen);
  if (p.buffer_len < p.window || p.buffer_len > kMaxBufferLen)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "buffer_len=%d is out of range for window=%d (%d..%d)", p.buffer_len,
                p.window, p.window, kMaxBufferLen);
  const NamedPtr required[] = {{p.cursor, "cursor"}, {p.accepted, "accepted"}};
  if (const rssm_status st = check_pointers(required)) return st;
  return RSSM_OK;
}

static rssm_status validate_snapshot_commit(const rssm_snapshot_commit_params& p) {
  if (const rssm_status st = check_batch(p.batch, p.num_slots, p.slot_idx)) return st;
  if (p.window < 1 || p.window > kMaxBufferLen)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "window=%d is out of range (1..%d)", p.window, kMaxBufferLen);
  if (p.state_bytes <= 0 || p.state_bytes % 16)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "state_bytes=%lld must be a positive multiple of 16",
                static_cast<long long>(p.state_bytes));
  const NamedPtr required[] = {{p.state, "state"}, {p.snapshots, "snapshots"}, {p.accepted, "accepted"}};
  if (const rssm_status st = check_pointers(required)) return st;
  const NamedPtr tiles[] = {{p.state, "state"}, {p.snapshots, "snapshots"}};  // copied 16 bytes at a time
  if (const rssm_status st = check_pointers(tiles, nullptr, true)) return st;
  return RSSM_OK;
}

}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_spec_commit, rssm_spec_commit_params, replayssm::validate_spec_commit,
                         replayssm::launch_spec_commit, "spec commit")
RSSM_DEFINE_ENTRY_POINTS(rssm_snapshot_commit, rssm_snapshot_commit_params, replayssm::validate_snapshot_commit,
                         replayssm::launch_snapshot_commit, "snapshot commit")
