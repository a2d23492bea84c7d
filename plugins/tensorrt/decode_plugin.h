// The TensorRT IPluginV3 plugin shared by the decode families: one template, DecodePlugin<Family>, over a
// family's traits (its configuration struct and field table, its tensors and their types, its shape checks and
// its launch through the C ABI). Everything TensorRT asks of a plugin that does not depend on the family lives
// here once: fields (one table serves getFieldNames, createPlugin and getFieldsToSerialize), clone, types and
// formats, output shapes, in-place outputs aliased to their inputs, error reporting. I/O contracts:
// docs/tensorrt_plugins.md.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "NvInferRuntime.h"
#include "replayssm.h"

namespace replayssm {
namespace trt {

constexpr char const* kPluginNamespace = "trtllm_replayssm";

// Reports an error through the logger that TensorRT handed to setLoggerFinder (stderr when none).
void log_error(std::string const& message) noexcept;

// One int32 plugin field: name, member, required flag, inclusive range.
template <typename Config>
struct FieldSpec {
  char const* name;
  int32_t Config::*member;
  bool required;
  int32_t lo, hi;
};

inline nvinfer1::DataType trt_type(int32_t rssm_dtype) {
  switch (rssm_dtype) {
    case RSSM_DTYPE_FP16: return nvinfer1::DataType::kHALF;
    case RSSM_DTYPE_BF16: return nvinfer1::DataType::kBF16;
    default: return nvinfer1::DataType::kFLOAT;
  }
}

// Parses a field collection into `cfg` (absent fields keep their defaults); on failure returns false and sets
// `error` to a message naming the field.
template <typename Config, size_t K>
bool parse_fields(nvinfer1::PluginFieldCollection const* fc, std::array<FieldSpec<Config>, K> const& table,
                  Config& cfg, std::string& error) {
  std::array<bool, K> seen{};
  for (int32_t i = 0; fc && i < fc->nbFields; ++i) {
    nvinfer1::PluginField const& f = fc->fields[i];
    size_t k = 0;
    while (k < K && (!f.name || std::strcmp(f.name, table[k].name) != 0)) ++k;
    if (k == K) {
      error = std::string("unknown field '") + (f.name ? f.name : "(null)") + "'";
      return false;
    }
    if (f.type != nvinfer1::PluginFieldType::kINT32 || f.length != 1 || !f.data) {
      error = std::string("field '") + table[k].name + "' must be one int32";
      return false;
    }
    int32_t value;
    std::memcpy(&value, f.data, sizeof(value));
    if (value < table[k].lo || value > table[k].hi) {
      error = std::string("field '") + table[k].name + "'=" + std::to_string(value) + " is outside " +
              std::to_string(table[k].lo) + ".." + std::to_string(table[k].hi);
      return false;
    }
    cfg.*table[k].member = value;
    seen[k] = true;
  }
  for (size_t k = 0; k < K; ++k) {
    if (table[k].required && !seen[k]) {
      error = std::string("required field '") + table[k].name + "' is missing";
      return false;
    }
  }
  return true;
}

// Tensor positions of a configuration: inputs by role, then outputs (y first, then the pool buffers updated in
// place, each aliased to its input).
template <int kRoles>
struct IOTable {
  std::array<int32_t, kRoles> input{};  // input index of each role, -1 when the configuration has none
  std::vector<int32_t> aliased;         // aliased[k] = input index updated in place by output 1 + k
  int32_t nb_inputs = 0;
  IOTable() { input.fill(-1); }
  void add(int role) { input[role] = nb_inputs++; }
  void add_in_place(int role) {
    add(role);
    aliased.push_back(input[role]);
  }
  int32_t role_of(int32_t pos) const {
    for (int r = 0; r < kRoles; ++r)
      if (input[r] == pos) return r;
    return -1;
  }
};

// Family traits F provide:
//   using Config; enum Role { ..., kRoles }; static constexpr kName, kVersion, kRoleNames (input names by role);
//   static kFields (FieldSpec table);
//   static IOTable<kRoles> make_io(Config const&);
//   static nvinfer1::DataType role_type(int role, Config const&);
//   static constexpr int kOutputShapeRole;  // y has this input's shape
//   static bool validate(Config const&, std::string& error);           // against the C ABI's dispatch table
//   static bool check_shapes(Config const&, IOTable const&, nvinfer1::PluginTensorDesc const* in, std::string&);
//   static rssm_status launch(Config const&, IOTable const&, nvinfer1::PluginTensorDesc const* in,
//                             void const* const* inputs, void* y, Pool pool, cudaStream_t);
//     where pool(role) returns the output pointer that aliases that role's input.
template <typename F>
class DecodePlugin final : public nvinfer1::IPluginV3,
                           public nvinfer1::IPluginV3OneCore,
                           public nvinfer1::IPluginV3OneBuildV2,
                           public nvinfer1::IPluginV3OneRuntime {
 public:
  using Config = typename F::Config;
  using IO = IOTable<F::kRoles>;

  explicit DecodePlugin(Config const& cfg) : cfg_(cfg), io_(F::make_io(cfg)) {}

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override {
    switch (type) {
      case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
      case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuildV2*>(this);
      case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
    }
    return nullptr;
  }
  nvinfer1::IPluginV3* clone() noexcept override {
    try {
      return new DecodePlugin(cfg_);
    } catch (...) {
      log_error(std::string(F::kName) + ": clone failed (out of memory)");
      return nullptr;
    }
  }
  // IPluginV3OneCore
  char const* getPluginName() const noexcept override { return F::kName; }
  char const* getPluginVersion() const noexcept override { return F::kVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }
  // IPluginV3OneBuild(V2)
  int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const*, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept override {
    return nbInputs == io_.nb_inputs && nbOutputs == getNbOutputs() ? 0 : -1;
  }
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const* inputTypes,
                             int32_t nbInputs) const noexcept override {
    if (nbOutputs != getNbOutputs() || nbInputs != io_.nb_inputs) return -1;
    outputTypes[0] = trt_type(cfg_.act_dtype);
    for (size_t k = 0; k < io_.aliased.size(); ++k) outputTypes[1 + k] = inputTypes[io_.aliased[k]];
    return 0;
  }
  int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const*, int32_t,
                          nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder&) noexcept override {
    if (nbOutputs != getNbOutputs() || nbInputs != io_.nb_inputs) return -1;
    outputs[0] = inputs[io_.input[F::kOutputShapeRole]];
    for (size_t k = 0; k < io_.aliased.size(); ++k) outputs[1 + k] = inputs[io_.aliased[k]];  // updated in place
    return 0;
  }
  bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                 int32_t nbOutputs) noexcept override {
    if (nbInputs != io_.nb_inputs || nbOutputs != getNbOutputs() || pos < 0 || pos >= nbInputs + nbOutputs)
      return false;
    return inOut[pos].desc.format == nvinfer1::TensorFormat::kLINEAR && inOut[pos].desc.type == expected_type(pos);
  }
  int32_t getNbOutputs() const noexcept override { return 1 + static_cast<int32_t>(io_.aliased.size()); }
  int32_t getAliasedInput(int32_t outputIndex) noexcept override {
    return outputIndex >= 1 && outputIndex < getNbOutputs() ? io_.aliased[outputIndex - 1] : -1;
  }
  // IPluginV3OneRuntime
  int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const*,
                        int32_t nbOutputs) noexcept override {
    if (nbInputs != io_.nb_inputs || nbOutputs != getNbOutputs()) return -1;
    std::string error;
    if (!F::check_shapes(cfg_, io_, in, error)) {
      log_error(std::string(F::kName) + ": " + error);
      return -1;
    }
    return 0;
  }
  int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const*,
                  void const* const* inputs, void* const* outputs, void*, cudaStream_t stream) noexcept override {
    // Outputs 1.. alias the pool inputs (same buffers): the kernels write through the output pointers.
    auto pool = [&](int role) -> void* {
      for (size_t k = 0; k < io_.aliased.size(); ++k)
        if (io_.aliased[k] == io_.input[role]) return outputs[1 + k];
      return nullptr;
    };
    if (F::launch(cfg_, io_, inputDesc, inputs, outputs[0], pool, stream) != RSSM_OK) {
      log_error(std::string(F::kName) + ": " + rssm_last_error());
      return -1;
    }
    return 0;
  }
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext*) noexcept override { return clone(); }
  nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override {
    serialized_.clear();
    for (auto const& spec : F::kFields)
      serialized_.emplace_back(spec.name, &(cfg_.*spec.member), nvinfer1::PluginFieldType::kINT32, 1);
    serialized_fc_.nbFields = static_cast<int32_t>(serialized_.size());
    serialized_fc_.fields = serialized_.data();
    return &serialized_fc_;
  }

  Config const& config() const { return cfg_; }
  IO const& io() const { return io_; }
  // The element type the plugin expects at tensor position `pos` (inputs, then outputs).
  nvinfer1::DataType expected_type(int32_t pos) const {
    if (pos >= io_.nb_inputs) {
      const int32_t out = pos - io_.nb_inputs;
      return out == 0 ? trt_type(cfg_.act_dtype) : expected_type(io_.aliased[out - 1]);
    }
    return F::role_type(io_.role_of(pos), cfg_);
  }

 private:
  Config cfg_;
  IO io_;
  std::vector<nvinfer1::PluginField> serialized_;
  nvinfer1::PluginFieldCollection serialized_fc_{};
};

template <typename F>
class DecodeCreator final : public nvinfer1::IPluginCreatorV3One {
 public:
  DecodeCreator() {
    for (auto const& spec : F::kFields)
      field_names_.emplace_back(spec.name, nullptr, nvinfer1::PluginFieldType::kINT32, 1);
    field_names_fc_.nbFields = static_cast<int32_t>(field_names_.size());
    field_names_fc_.fields = field_names_.data();
  }
  nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override { return &field_names_fc_; }
  nvinfer1::IPluginV3* createPlugin(char const*, nvinfer1::PluginFieldCollection const* fc,
                                    nvinfer1::TensorRTPhase) noexcept override {
    try {
      typename F::Config cfg;
      std::string error;
      if (!parse_fields(fc, F::kFields, cfg, error) || !F::validate(cfg, error)) {
        log_error(std::string(F::kName) + ": " + error);
        return nullptr;
      }
      return new DecodePlugin<F>(cfg);
    } catch (...) {
      log_error(std::string(F::kName) + ": createPlugin failed (out of memory)");
      return nullptr;
    }
  }
  char const* getPluginName() const noexcept override { return F::kName; }
  char const* getPluginVersion() const noexcept override { return F::kVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }

 private:
  std::vector<nvinfer1::PluginField> field_names_;
  nvinfer1::PluginFieldCollection field_names_fc_{};
};

}  // namespace trt
}  // namespace replayssm
