// ReplaySSMConv1d: the causal depthwise conv1d in front of the SSM mixers as a TensorRT plugin, one field `mode`
// over the kernel's three (conv1d/params.h, docs/conv1d.md): update (a decode step over state [slots, C, k-1]),
// verify (T tokens over windows [slots, C, k-1+T]) and commit (shift each window by its row's accepted count).
// The op traits of Plugin (plugin.h); the launch fills rssm_conv1d_params and calls rssm_conv1d, the entry the
// Python ops (ops/conv1d.py) use.
#pragma once
#include "plugin.h"

namespace replayssm {
namespace trt {

struct Conv1dConfig {
  int32_t mode = RSSM_CONV1D_UPDATE;
  int32_t channels = 0;     // C
  int32_t kernel_size = 4;  // k
  int32_t num_tokens = 1;   // T: 1 in update mode; verify and commit: the window
  int32_t state_dtype = RSSM_DTYPE_BF16, act_dtype = RSSM_DTYPE_BF16, weight_dtype = RSSM_DTYPE_BF16;
  int32_t has_bias = 1, silu = 1;
  int32_t pad_slot_id = -1;
};

struct Conv1d {
  using Config = Conv1dConfig;
  enum Role { X, WEIGHT, BIAS, ACCEPTED, SLOT_IDX, STATE, WINDOWS, kRoles };
  static constexpr char const* kName = "ReplaySSMConv1d";
  static constexpr char const* kVersion = "1";
  static std::array<FieldSpec<Config>, 10> const kFields;
  static constexpr std::array<char const*, kRoles> kRoleNames = {"x",        "weight", "bias",   "accepted",
                                                                 "slot_idx", "state",  "windows"};

  static IOTable<kRoles> make_io(Config const& cfg);
  static nvinfer1::DataType role_type(int role, Config const& cfg);
  static Shape dims(int role, Config const& cfg);
  static bool validate(Config const& cfg, std::string& error);
  static bool check_shapes(Config const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                           std::string& error) {
    return check_dims<Conv1d>(cfg, io, in, error);
  }
  static rssm_status launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream);
};

using Conv1dPlugin = Plugin<Conv1d>;
using Conv1dCreator = Creator<Conv1d>;

}  // namespace trt
}  // namespace replayssm
