// ReplaySSMGdnVerify: the Gated DeltaNet speculative verify of a window of T tokens per row as a TensorRT plugin,
// ReplaySSM or the snapshot path. The op traits of Plugin (plugin.h); the launch fills rssm_gdn_verify_params and
// calls rssm_gdn_verify, the entry the Python ops (ops/gdn/spec.py) use. Inputs are prepared as the kernels read
// them (q, k normalised and scaled; g and beta in fp32). The commit that follows is ReplaySSMSpecCommit (replay)
// or ReplaySSMSnapshotCommit (snapshot path).
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

struct GdnVerifyConfig {
  int32_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  int32_t window = 0;  // T
  int32_t buffer_len = 16;
  int32_t mode = RSSM_GDN_REPLAY;  // RSSM_GDN_CONVENTIONAL: the snapshot path
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t pad_slot_id = -1;
};

struct GdnVerify {
  using Config = GdnVerifyConfig;
  enum Role { Q, K, V, G, BETA, SLOT_IDX, STATE, RING_U, RING_K, RING_G, CURSOR, SNAPSHOTS, kRoles };
  static constexpr char const* kName = "ReplaySSMGdnVerify";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 10> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {
      "q", "k", "v", "g", "beta", "slot_idx", "state", "ring_u", "ring_k", "ring_g", "cursor", "snapshots"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<GdnVerify>(cfg, io, in, error);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using GdnVerifyPlugin = Plugin<GdnVerify>;
using GdnVerifyCreator = Creator<GdnVerify>;

}  // namespace trt
}  // namespace replayssm
