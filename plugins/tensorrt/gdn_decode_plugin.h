// ReplaySSMGdnDecode: one Gated DeltaNet decode step (conventional or ReplaySSM) as a TensorRT plugin. The family
// traits of DecodePlugin (decode_plugin.h); the launch fills rssm_gdn_decode_params and calls rssm_gdn_decode.
// Inputs are prepared as the kernels read them (q, k normalised and scaled; g and beta in fp32).
#pragma once
#include "decode_plugin.h"

namespace replayssm {
namespace trt {

struct GdnDecodeConfig {
  int32_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  int32_t buffer_len = 16;
  int32_t mode = RSSM_GDN_REPLAY;
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t pad_slot_id = -1;
};

struct GdnDecode {
  using Config = GdnDecodeConfig;
  enum Role { Q, K, V, G, BETA, SLOT_IDX, STATE, RING_U, RING_K, RING_G, CURSOR, kRoles };
  static constexpr char const* kName = "ReplaySSMGdnDecode";
  static constexpr char const* kVersion = "1";
  static constexpr int kOutputShapeRole = V;  // y [b, HV, V]
  static std::array<FieldSpec<Config>, 9> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {
      "q", "k", "v", "g", "beta", "slot_idx", "state", "ring_u", "ring_k", "ring_g", "cursor"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error);
  template <typename Pool>
  static rssm_status launch(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                            void const* const* inputs, void* y, Pool pool, cudaStream_t stream) {
    return launch_params(cfg, io, in, inputs, y, pool(STATE), pool(RING_U), pool(RING_K), pool(RING_G),
                         pool(CURSOR), stream);
  }
  static rssm_status launch_params(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                                   void const* const* inputs, void* y, void* state, void* ring_u, void* ring_k,
                                   void* ring_g, void* cursor, cudaStream_t stream);
};

using GdnDecodePlugin = DecodePlugin<GdnDecode>;
using GdnDecodeCreator = DecodeCreator<GdnDecode>;

}  // namespace trt
}  // namespace replayssm
