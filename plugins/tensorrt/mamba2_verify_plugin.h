// ReplaySSMMamba2Verify: the Mamba-2 speculative verify of a window of T tokens per row as a TensorRT plugin,
// ReplaySSM (records the window into the ring, flushes one window early) or the snapshot path (one stored state
// per token). The op traits of Plugin (plugin.h); the launch fills rssm_mamba2_verify_params and calls
// rssm_mamba2_verify, the entry the Python ops (ops/mamba2/spec.py) use. The commit that follows is
// ReplaySSMSpecCommit (replay) or ReplaySSMSnapshotCommit (snapshot path).
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

struct Mamba2VerifyConfig {
  int32_t nheads = 0, head_dim = 0, dstate = 0, ngroups = 0;
  int32_t window = 0;  // T
  int32_t buffer_len = 16;
  int32_t mode = RSSM_MAMBA2_REPLAY;  // RSSM_MAMBA2_CONVENTIONAL: the snapshot path
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t has_z = 1, has_D = 1, has_dt_bias = 1, dt_softplus = 1;
  int32_t pad_slot_id = -1;
};

struct Mamba2Verify {
  using Config = Mamba2VerifyConfig;
  enum Role { X, DT, B, C, Z, A, D, DT_BIAS, SLOT_IDX, STATE, RING_X, RING_B, RING_DT, CURSOR, SNAPSHOTS, kRoles };
  static constexpr char const* kName = "ReplaySSMMamba2Verify";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 14> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {
      "x",     "dt",     "B",      "C",       "z",      "A",        "D",        "dt_bias",
      "slot_idx", "state", "ring_x", "ring_B", "ring_dt", "cursor", "snapshots"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<Mamba2Verify>(cfg, io, in, error);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using Mamba2VerifyPlugin = Plugin<Mamba2Verify>;
using Mamba2VerifyCreator = Creator<Mamba2Verify>;

}  // namespace trt
}  // namespace replayssm
