// ReplaySSMSpecCommit and ReplaySSMSnapshotCommit: the op traits (fields, tensors, shapes, launch over the C ABI).
#include "commit_plugins.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;

// ---- ReplaySSMSpecCommit ----

std::array<FieldSpec<SpecCommitConfig>, 4> const SpecCommit::kFields = {{
    {"nheads", &SpecCommitConfig::nheads, true, 1, 65535},
    {"window", &SpecCommitConfig::window, true, 1, 64},
    {"buffer_len", &SpecCommitConfig::buffer_len, false, 1, 64},
    {"pad_slot_id", &SpecCommitConfig::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<SpecCommit::kRoles> SpecCommit::make_io(SpecCommitConfig const&) {
  IOTable<kRoles> io;
  io.add(ACCEPTED), io.add(SLOT_IDX);
  io.add_in_place(CURSOR);
  return io;
}

DataType SpecCommit::role_type(int, SpecCommitConfig const&) { return DataType::kINT32; }

Shape SpecCommit::dims(int role, SpecCommitConfig const& cfg) {
  if (role == CURSOR) return {kSlots, cfg.nheads, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS};
  return {kBatch};  // accepted, slot_idx
}

static void fill_config(SpecCommitConfig const& cfg, rssm_spec_commit_params& p) {
  p.nheads = cfg.nheads, p.window = cfg.window, p.buffer_len = cfg.buffer_len, p.pad_slot_id = cfg.pad_slot_id;
}

bool SpecCommit::validate(SpecCommitConfig const& cfg, std::string& error) {
  rssm_spec_commit_params p{};
  fill_config(cfg, p);
  p.batch = 1, p.num_slots = 1;
  p.cursor = static_cast<int32_t*>(validation_address());
  p.accepted = p.cursor;
  if (rssm_spec_commit_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

rssm_status SpecCommit::launch(SpecCommitConfig const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_spec_commit_params p{};
  fill_config(cfg, p);
  p.batch = static_cast<int32_t>(t.dim(ACCEPTED, 0));
  p.num_slots = static_cast<int32_t>(t.dim(CURSOR, 0));
  p.cursor = static_cast<int32_t*>(t.inout(CURSOR));  // WRITTEN: the history of non-padding rows' slots
  p.accepted = static_cast<int32_t const*>(t.in(ACCEPTED));
  p.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  return rssm_spec_commit(&p, sizeof(p), stream);
}

// ---- ReplaySSMSnapshotCommit ----

std::array<FieldSpec<SnapshotCommitConfig>, 3> const SnapshotCommit::kFields = {{
    {"window", &SnapshotCommitConfig::window, true, 1, 64},
    {"state_dtype", &SnapshotCommitConfig::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"pad_slot_id", &SnapshotCommitConfig::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<SnapshotCommit::kRoles> SnapshotCommit::make_io(SnapshotCommitConfig const&) {
  IOTable<kRoles> io;
  io.add(ACCEPTED), io.add(SLOT_IDX), io.add(SNAPSHOTS);
  io.add_in_place(STATE);
  return io;
}

DataType SnapshotCommit::role_type(int role, SnapshotCommitConfig const& cfg) {
  return role == STATE || role == SNAPSHOTS ? trt_type(cfg.state_dtype) : DataType::kINT32;
}

Shape SnapshotCommit::dims(int role, SnapshotCommitConfig const& cfg) {
  switch (role) {
    case STATE: return {kSlots, kFree0, kFree1, kFree2};
    case SNAPSHOTS: return {kSlots, cfg.window, kFree0, kFree1, kFree2};
    default: return {kBatch};  // accepted, slot_idx
  }
}

static int64_t slot_bytes(SnapshotCommitConfig const& cfg, nvinfer1::Dims const& state) {
  return state.d[1] * state.d[2] * state.d[3] * rssm_dtype_bytes(cfg.state_dtype);
}

static void fill_config(SnapshotCommitConfig const& cfg, rssm_snapshot_commit_params& p) {
  p.window = cfg.window, p.pad_slot_id = cfg.pad_slot_id;
}

bool SnapshotCommit::validate(SnapshotCommitConfig const& cfg, std::string& error) {
  rssm_snapshot_commit_params p{};
  fill_config(cfg, p);
  p.batch = 1, p.num_slots = 1, p.state_bytes = 16;
  p.state = validation_address();
  p.snapshots = p.state;
  p.accepted = static_cast<int32_t const*>(p.state);
  if (rssm_snapshot_commit_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

bool SnapshotCommit::check_shapes(SnapshotCommitConfig const& cfg, IOTable<kRoles> const& io,
                                  nvinfer1::PluginTensorDesc const* in, std::string& error) {
  if (!check_dims<SnapshotCommit>(cfg, io, in, error)) return false;
  // The copy moves 16-byte chunks: one slot of the state must be a whole number of them.
  nvinfer1::Dims const& state = in[io.input[STATE]].dims;
  if (state.d[1] < 0 || state.d[2] < 0 || state.d[3] < 0) return true;  // not known yet (check_dims)
  const int64_t bytes = slot_bytes(cfg, state);
  if (bytes <= 0 || bytes % 16) {
    error = "one slot of the state holds " + std::to_string(bytes) + " bytes, not a positive multiple of 16";
    return false;
  }
  return true;
}

rssm_status SnapshotCommit::launch(SnapshotCommitConfig const& cfg, Tensors<kRoles> const& t,
                                   cudaStream_t stream) {
  rssm_snapshot_commit_params p{};
  fill_config(cfg, p);
  p.batch = static_cast<int32_t>(t.dim(ACCEPTED, 0));
  p.num_slots = static_cast<int32_t>(t.dim(STATE, 0));
  p.state_bytes = slot_bytes(cfg, t.desc[t.io.input[STATE]].dims);
  p.state = t.inout(STATE);  // WRITTEN: the slots of non-padding rows
  p.snapshots = t.in(SNAPSHOTS);
  p.accepted = static_cast<int32_t const*>(t.in(ACCEPTED));
  p.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  return rssm_snapshot_commit(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
