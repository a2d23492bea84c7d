// The speculative commits as TensorRT plugins, family independent like the kernels (common/spec_params.h):
//   ReplaySSMSpecCommit      the ReplaySSM cursor move: history += accepted[b] (rssm_spec_commit)
//   ReplaySSMSnapshotCommit  the snapshot path's restore: state[slot] := snapshots[slot, a - 1] (rssm_snapshot_commit)
// Accepted counts are a device int32 input: no host sync, so a commit can sit in the same engine (or CUDA graph)
// as the sampler that produced them. Neither has a fresh output: every output is a pool buffer updated in place.
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

struct SpecCommitConfig {
  int32_t nheads = 0;  // heads of the cursor (Mamba-2: H; GDN: HV)
  int32_t window = 0;  // T of the verify this commit follows
  int32_t buffer_len = 16;
  int32_t pad_slot_id = -1;
};

struct SpecCommit {
  using Config = SpecCommitConfig;
  enum Role { ACCEPTED, SLOT_IDX, CURSOR, kRoles };
  static constexpr char const* kName = "ReplaySSMSpecCommit";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 4> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {"accepted", "slot_idx", "cursor"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<SpecCommit>(cfg, io, in, error);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

struct SnapshotCommitConfig {
  int32_t window = 0;  // T: snapshots per slot
  int32_t state_dtype = RSSM_DTYPE_FP32;
  int32_t pad_slot_id = -1;
};

// The state is any 4-d pool [slots, d0, d1, d2] (Mamba-2 [slots, H, P, N], GDN [slots, HV, V, K]); the snapshots
// are [slots, T, d0, d1, d2] of the same dtype.
struct SnapshotCommit {
  using Config = SnapshotCommitConfig;
  enum Role { ACCEPTED, SLOT_IDX, SNAPSHOTS, STATE, kRoles };
  static constexpr char const* kName = "ReplaySSMSnapshotCommit";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 3> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {"accepted", "slot_idx", "snapshots", "state"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error);
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using SpecCommitPlugin = Plugin<SpecCommit>;
using SpecCommitCreator = Creator<SpecCommit>;
using SnapshotCommitPlugin = Plugin<SnapshotCommit>;
using SnapshotCommitCreator = Creator<SnapshotCommit>;

}  // namespace trt
}  // namespace replayssm
