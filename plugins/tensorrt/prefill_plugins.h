// The context phase as TensorRT plugins: ReplaySSMMamba2Prefill, ReplaySSMGdnPrefill and ReplaySSMConv1dPrefill run a
// prompt of S tokens per row ([batch, S, ...] inputs, int32 lengths) into the rows' pool slots through the C ABI's
// prefill entry points (common/prefill_params.h, docs/prefill.md): each live slot starts from zero, its tokens run
// the conventional step, and the slot ends as a checkpoint with an empty ring (replay pools: the cursor is reset).
// The op traits of Plugin (plugin.h); the per-token slot indices live in TensorRT's workspace (workspace_bytes).
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

// The workspace of a prefill whose role `x` is [batch, S, ...]: at the profile's largest batch and S.
template <int kRoles>
size_t prefill_workspace_bytes(IOTable<kRoles> const& io, int x, nvinfer1::DynamicPluginTensorDesc const* in) {
  nvinfer1::Dims const& max = in[io.input[x]].max;
  if (max.nbDims < 2 || max.d[0] < 0 || max.d[1] < 0 || max.d[0] > 65535 || max.d[1] > 65535) return 0;
  return rssm_prefill_workspace_size(static_cast<int32_t>(max.d[0]), static_cast<int32_t>(max.d[1]));
}

struct Mamba2PrefillConfig {
  int32_t nheads = 0, head_dim = 0, dstate = 0, ngroups = 0;
  int32_t mode = RSSM_MAMBA2_REPLAY;  // replay: the pool has a cursor (reset to an empty ring); conventional: none
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t has_z = 1, has_D = 1, has_dt_bias = 1, dt_softplus = 1;
  int32_t pad_slot_id = -1;
};

struct Mamba2Prefill {
  using Config = Mamba2PrefillConfig;
  enum Role { X, DT, B, C, Z, A, D, DT_BIAS, LENGTHS, SLOT_IDX, STATE, CURSOR, kRoles };
  static constexpr char const* kName = "ReplaySSMMamba2Prefill";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 12> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {
      "x", "dt", "B", "C", "z", "A", "D", "dt_bias", "lengths", "slot_idx", "state", "cursor"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<Mamba2Prefill>(cfg, io, in, error);
  }
  static size_t workspace_bytes(Config const&, IOTable<kRoles> const& io, nvinfer1::DynamicPluginTensorDesc const* in) {
    return prefill_workspace_bytes(io, X, in);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

struct GdnPrefillConfig {
  int32_t num_k_heads = 0, num_v_heads = 0, head_k_dim = 0, head_v_dim = 0;
  int32_t mode = RSSM_GDN_REPLAY;  // as Mamba2PrefillConfig::mode
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t pad_slot_id = -1;
};

// Prepared q, k and precomputed g, beta, as ReplaySSMGdnDecode takes them.
struct GdnPrefill {
  using Config = GdnPrefillConfig;
  enum Role { Q, K, V, G, BETA, LENGTHS, SLOT_IDX, STATE, CURSOR, kRoles };
  static constexpr char const* kName = "ReplaySSMGdnPrefill";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 8> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {"q",        "k",        "v",     "g",     "beta",
                                                                 "lengths", "slot_idx", "state", "cursor"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<GdnPrefill>(cfg, io, in, error);
  }
  static size_t workspace_bytes(Config const&, IOTable<kRoles> const& io, nvinfer1::DynamicPluginTensorDesc const* in) {
    return prefill_workspace_bytes(io, V, in);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

struct Conv1dPrefillConfig {
  int32_t channels = 0;     // C
  int32_t kernel_size = 4;  // k
  int32_t state_dtype = RSSM_DTYPE_BF16, act_dtype = RSSM_DTYPE_BF16, weight_dtype = RSSM_DTYPE_BF16;
  int32_t has_bias = 1, silu = 1;
  int32_t pad_slot_id = -1;
};

struct Conv1dPrefill {
  using Config = Conv1dPrefillConfig;
  enum Role { X, WEIGHT, BIAS, LENGTHS, SLOT_IDX, STATE, kRoles };
  static constexpr char const* kName = "ReplaySSMConv1dPrefill";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 8> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {"x", "weight", "bias", "lengths", "slot_idx",
                                                                 "state"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<Conv1dPrefill>(cfg, io, in, error);
  }
  static size_t workspace_bytes(Config const&, IOTable<kRoles> const& io, nvinfer1::DynamicPluginTensorDesc const* in) {
    return prefill_workspace_bytes(io, X, in);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using Mamba2PrefillPlugin = Plugin<Mamba2Prefill>;
using Mamba2PrefillCreator = Creator<Mamba2Prefill>;
using GdnPrefillPlugin = Plugin<GdnPrefill>;
using GdnPrefillCreator = Creator<GdnPrefill>;
using Conv1dPrefillPlugin = Plugin<Conv1dPrefill>;
using Conv1dPrefillCreator = Creator<Conv1dPrefill>;

}  // namespace trt
}  // namespace replayssm
