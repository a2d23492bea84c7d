// TensorRT IPluginV3 plugin for one Mamba-2 decode step (conventional or ReplaySSM), an adapter over the C ABI
// (plugins/capi/replayssm.h): enqueue fills rssm_mamba2_decode_params and calls rssm_mamba2_decode, the same
// entry the Python ops use. The I/O contract is in docs/tensorrt_plugins.md.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "NvInferRuntime.h"
#include "replayssm.h"

namespace replayssm {
namespace trt {

constexpr char const* kPluginNamespace = "trtllm_replayssm";
constexpr char const* kMamba2DecodeName = "ReplaySSMMamba2Decode";
constexpr char const* kMamba2DecodeVersion = "1";

// The plugin's configuration: every field is an int32 plugin field (one table, fields.cpp).
struct Mamba2DecodeConfig {
  int32_t nheads = 0, head_dim = 0, dstate = 0, ngroups = 0;
  int32_t buffer_len = 16;
  int32_t mode = RSSM_MAMBA2_REPLAY;
  int32_t state_dtype = RSSM_DTYPE_FP32, act_dtype = RSSM_DTYPE_BF16;
  int32_t has_z = 1, has_D = 1, has_dt_bias = 1, dt_softplus = 1;
  int32_t pad_slot_id = -1;
};

// Field table: name, member, default-less (required) flag, inclusive range.
struct FieldSpec {
  char const* name;
  int32_t Mamba2DecodeConfig::*member;
  bool required;
  int32_t lo, hi;
};
extern std::array<FieldSpec, 13> const kMamba2DecodeFields;

// Parses a field collection into `cfg` (fields absent keep their defaults); on failure returns false and sets
// `error` to a message naming the field.
bool parse_fields(nvinfer1::PluginFieldCollection const* fc, Mamba2DecodeConfig& cfg, std::string& error);
// Checks a configuration against the kernels' dispatch table (through the C ABI's validation).
bool validate_config(Mamba2DecodeConfig const& cfg, std::string& error);

// Tensor positions of a configuration: inputs, then outputs (y first, then the pool buffers aliased in place).
struct Mamba2DecodeIO {
  enum Role { X, DT, B, C, Z, A, D, DT_BIAS, SLOT_IDX, STATE, RING_X, RING_B, RING_DT, CURSOR, kRoles };
  std::array<int32_t, kRoles> input{};  // input index of each role, -1 when the configuration has none
  std::vector<int32_t> aliased;         // aliased[k] = input index updated in place by output 1 + k
  int32_t nb_inputs = 0;
  static Mamba2DecodeIO make(Mamba2DecodeConfig const& cfg);
};

class Mamba2DecodePlugin final : public nvinfer1::IPluginV3,
                                 public nvinfer1::IPluginV3OneCore,
                                 public nvinfer1::IPluginV3OneBuildV2,
                                 public nvinfer1::IPluginV3OneRuntime {
 public:
  explicit Mamba2DecodePlugin(Mamba2DecodeConfig const& cfg);

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
  nvinfer1::IPluginV3* clone() noexcept override;
  // IPluginV3OneCore
  char const* getPluginName() const noexcept override { return kMamba2DecodeName; }
  char const* getPluginVersion() const noexcept override { return kMamba2DecodeVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }
  // IPluginV3OneBuild(V2)
  int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
                             nvinfer1::DataType const* inputTypes, int32_t nbInputs) const noexcept override;
  int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
                          int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder& exprBuilder) noexcept override;
  bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                 int32_t nbOutputs) noexcept override;
  int32_t getNbOutputs() const noexcept override;
  int32_t getAliasedInput(int32_t outputIndex) noexcept override;
  // IPluginV3OneRuntime
  int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
                        int32_t nbOutputs) noexcept override;
  int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
                  void const* const* inputs, void* const* outputs, void* workspace,
                  cudaStream_t stream) noexcept override;
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
  nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

  Mamba2DecodeConfig const& config() const { return cfg_; }
  // The element type the plugin expects at tensor position `pos` (inputs, then outputs).
  nvinfer1::DataType expected_type(int32_t pos) const;

 private:
  Mamba2DecodeConfig cfg_;
  Mamba2DecodeIO io_;
  std::vector<nvinfer1::PluginField> serialized_;
  nvinfer1::PluginFieldCollection serialized_fc_{};
};

class Mamba2DecodeCreator final : public nvinfer1::IPluginCreatorV3One {
 public:
  Mamba2DecodeCreator();
  nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override { return &field_names_fc_; }
  nvinfer1::IPluginV3* createPlugin(char const* name, nvinfer1::PluginFieldCollection const* fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override;
  char const* getPluginName() const noexcept override { return kMamba2DecodeName; }
  char const* getPluginVersion() const noexcept override { return kMamba2DecodeVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }

 private:
  std::vector<nvinfer1::PluginField> field_names_;
  nvinfer1::PluginFieldCollection field_names_fc_{};
};

// Reports an error through the logger that TensorRT handed to setLoggerFinder (stderr when none).
void log_error(std::string const& message) noexcept;

}  // namespace trt
}  // namespace replayssm
