// ReplaySSMMamba2Decode: one Mamba-2 decode step (conventional or ReplaySSM) as a TensorRT plugin. The op traits
// of Plugin (plugin.h): fields, tensors, shapes, and the launch, which fills rssm_mamba2_decode_params and calls
// rssm_mamba2_decode, the same entry the Python ops use.
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

struct Mamba2DecodeConfig {
  int32_t nheads = 0, head_dim = 0, dstate = 0, ngroups = 0;
  int32_t buffer_len = 16;
  int32_t mode = RSSM_MAMBA2_REPLAY;
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t has_z = 1, has_D = 1, has_dt_bias = 1, dt_softplus = 1;
  int32_t pad_slot_id = -1;
  // replay: the latency route's limit in KiB (params.h latency_route_bytes); 0 off; -1 the default
  // (plugin.h resolve_latency_route)
  int32_t latency_route_kib = kLatencyRouteDefault;
};

struct Mamba2Decode {
  using Config = Mamba2DecodeConfig;
  enum Role { X, DT, B, C, Z, A, D, DT_BIAS, SLOT_IDX, STATE, RING_X, RING_B, RING_DT, CURSOR, kRoles };
  static constexpr char const* kName = "ReplaySSMMamba2Decode";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 14> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {
      "x", "dt", "B", "C", "z", "A", "D", "dt_bias", "slot_idx", "state", "ring_x", "ring_B", "ring_dt", "cursor"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<Mamba2Decode>(cfg, io, in, error);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using Mamba2DecodePlugin = Plugin<Mamba2Decode>;
using Mamba2DecodeCreator = Creator<Mamba2Decode>;

}  // namespace trt
}  // namespace replayssm
