// ReplaySSMGdnDecode: one Gated DeltaNet decode step (conventional or ReplaySSM) as a TensorRT plugin. The op
// traits of Plugin (plugin.h); the launch fills rssm_gdn_decode_params and calls rssm_gdn_decode. Inputs are
// prepared as the kernels read them (q, k normalised and scaled; g and beta in fp32).
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

struct GdnDecodeConfig {
  int32_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  int32_t buffer_len = 16;
  int32_t mode = RSSM_GDN_REPLAY;
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t pad_slot_id = -1;
  // replay: the latency route's limit in KiB (params.h latency_route_bytes); 0 off; -1 the default
  // (plugin.h resolve_latency_route)
  int32_t latency_route_kib = kLatencyRouteDefault;
};

struct GdnDecode {
  using Config = GdnDecodeConfig;
  enum Role { Q, K, V, G, BETA, SLOT_IDX, STATE, RING_U, RING_K, RING_G, CURSOR, kRoles };
  static constexpr char const* kName = "ReplaySSMGdnDecode";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 10> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {
      "q", "k", "v", "g", "beta", "slot_idx", "state", "ring_u", "ring_k", "ring_g", "cursor"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<GdnDecode>(cfg, io, in, error);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using GdnDecodePlugin = Plugin<GdnDecode>;
using GdnDecodeCreator = Creator<GdnDecode>;

}  // namespace trt
}  // namespace replayssm
