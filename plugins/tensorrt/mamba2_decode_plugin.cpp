// Mamba-2 decode plugin: fields, I/O table, build-time checks and enqueue over the C ABI.
#include "mamba2_decode_plugin.h"

#include <climits>
#include <cstdint>
#include <cstring>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;
using nvinfer1::PluginField;
using nvinfer1::PluginFieldCollection;
using nvinfer1::PluginFieldType;
using C = Mamba2DecodeConfig;

std::array<FieldSpec, 13> const kMamba2DecodeFields = {{
    {"nheads", &C::nheads, true, 1, 65535},
    {"head_dim", &C::head_dim, true, 1, 65535},
    {"dstate", &C::dstate, true, 1, 65535},
    {"ngroups", &C::ngroups, true, 1, 65535},
    {"buffer_len", &C::buffer_len, false, 1, 64},
    {"mode", &C::mode, false, RSSM_MAMBA2_CONVENTIONAL, RSSM_MAMBA2_REPLAY},
    {"state_dtype", &C::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &C::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"has_z", &C::has_z, false, 0, 1},
    {"has_D", &C::has_D, false, 0, 1},
    {"has_dt_bias", &C::has_dt_bias, false, 0, 1},
    {"dt_softplus", &C::dt_softplus, false, 0, 1},
    {"pad_slot_id", &C::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

bool parse_fields(PluginFieldCollection const* fc, Mamba2DecodeConfig& cfg, std::string& error) {
  std::array<bool, kMamba2DecodeFields.size()> seen{};
  for (int32_t i = 0; fc && i < fc->nbFields; ++i) {
    PluginField const& f = fc->fields[i];
    size_t k = 0;
    while (k < kMamba2DecodeFields.size() && (!f.name || std::strcmp(f.name, kMamba2DecodeFields[k].name) != 0)) ++k;
    if (k == kMamba2DecodeFields.size()) {
      error = std::string("unknown field '") + (f.name ? f.name : "(null)") + "'";
      return false;
    }
    FieldSpec const& spec = kMamba2DecodeFields[k];
    if (f.type != PluginFieldType::kINT32 || f.length != 1 || !f.data) {
      error = std::string("field '") + spec.name + "' must be one int32";
      return false;
    }
    int32_t value;
    std::memcpy(&value, f.data, sizeof(value));
    if (value < spec.lo || value > spec.hi) {
      error = std::string("field '") + spec.name + "'=" + std::to_string(value) + " is outside " +
              std::to_string(spec.lo) + ".." + std::to_string(spec.hi);
      return false;
    }
    cfg.*spec.member = value;
    seen[k] = true;
  }
  for (size_t k = 0; k < kMamba2DecodeFields.size(); ++k) {
    if (kMamba2DecodeFields[k].required && !seen[k]) {
      error = std::string("required field '") + kMamba2DecodeFields[k].name + "' is missing";
      return false;
    }
  }
  return true;
}

bool validate_config(Mamba2DecodeConfig const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values; it reads no memory, so stand-in addresses
  // (16-byte aligned, consistent contiguous strides) are enough to check sizes and dtypes.
  rssm_mamba2_decode_params p{};
  void* const fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
  p.batch = 1;
  p.nheads = cfg.nheads, p.head_dim = cfg.head_dim, p.dstate = cfg.dstate, p.ngroups = cfg.ngroups;
  p.buffer_len = cfg.buffer_len, p.num_slots = 1, p.pad_slot_id = cfg.pad_slot_id, p.mode = cfg.mode;
  p.state_dtype = cfg.state_dtype, p.act_dtype = cfg.act_dtype, p.dt_softplus = cfg.dt_softplus;
  p.state = p.ring_x = p.ring_B = fake;
  p.ring_dt = static_cast<float*>(fake);
  p.cursor = static_cast<int32_t*>(fake);
  p.x = p.dt = p.B = p.C = p.y = fake;
  p.A = static_cast<float const*>(fake);
  const int64_t hp = int64_t{cfg.nheads} * cfg.head_dim, gn = int64_t{cfg.ngroups} * cfg.dstate;
  p.x_batch_stride = p.y_batch_stride = hp, p.x_head_stride = p.y_head_stride = cfg.head_dim;
  p.B_batch_stride = p.C_batch_stride = gn, p.B_group_stride = p.C_group_stride = cfg.dstate;
  p.dt_batch_stride = cfg.nheads, p.dt_head_stride = 1;
  if (rssm_mamba2_decode_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

Mamba2DecodeIO Mamba2DecodeIO::make(Mamba2DecodeConfig const& cfg) {
  Mamba2DecodeIO io;
  io.input.fill(-1);
  auto add = [&](Role role) { io.input[role] = io.nb_inputs++; };
  add(X), add(DT), add(B), add(C);
  if (cfg.has_z) add(Z);
  add(A);
  if (cfg.has_D) add(D);
  if (cfg.has_dt_bias) add(DT_BIAS);
  add(SLOT_IDX), add(STATE);
  io.aliased.push_back(io.input[STATE]);
  if (cfg.mode == RSSM_MAMBA2_REPLAY) {
    for (Role role : {RING_X, RING_B, RING_DT, CURSOR}) {
      add(role);
      io.aliased.push_back(io.input[role]);
    }
  }
  return io;
}

static DataType trt_type(int32_t rssm_dtype) {
  switch (rssm_dtype) {
    case RSSM_DTYPE_FP16: return DataType::kHALF;
    case RSSM_DTYPE_BF16: return DataType::kBF16;
    default: return DataType::kFLOAT;
  }
}

Mamba2DecodePlugin::Mamba2DecodePlugin(Mamba2DecodeConfig const& cfg) : cfg_(cfg), io_(Mamba2DecodeIO::make(cfg)) {}

nvinfer1::IPluginCapability* Mamba2DecodePlugin::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept {
  switch (type) {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuildV2*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
  }
  return nullptr;
}

nvinfer1::IPluginV3* Mamba2DecodePlugin::clone() noexcept {
  try {
    return new Mamba2DecodePlugin(cfg_);
  } catch (...) {
    log_error("ReplaySSMMamba2Decode: clone failed (out of memory)");
    return nullptr;
  }
}

DataType Mamba2DecodePlugin::expected_type(int32_t pos) const {
  if (pos >= io_.nb_inputs) {
    const int32_t out = pos - io_.nb_inputs;
    return out == 0 ? trt_type(cfg_.act_dtype) : expected_type(io_.aliased[out - 1]);
  }
  int32_t role = 0;
  while (io_.input[role] != pos) ++role;
  switch (role) {
    case Mamba2DecodeIO::A:
    case Mamba2DecodeIO::D:
    case Mamba2DecodeIO::DT_BIAS:
    case Mamba2DecodeIO::RING_DT: return DataType::kFLOAT;
    case Mamba2DecodeIO::SLOT_IDX:
    case Mamba2DecodeIO::CURSOR: return DataType::kINT32;
    case Mamba2DecodeIO::STATE: return trt_type(cfg_.state_dtype);
    default: return trt_type(cfg_.act_dtype);
  }
}

int32_t Mamba2DecodePlugin::getNbOutputs() const noexcept { return 1 + static_cast<int32_t>(io_.aliased.size()); }

int32_t Mamba2DecodePlugin::getAliasedInput(int32_t outputIndex) noexcept {
  return outputIndex >= 1 && outputIndex < getNbOutputs() ? io_.aliased[outputIndex - 1] : -1;
}

bool Mamba2DecodePlugin::supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut,
                                                   int32_t nbInputs, int32_t nbOutputs) noexcept {
  if (nbInputs != io_.nb_inputs || nbOutputs != getNbOutputs() || pos < 0 || pos >= nbInputs + nbOutputs) return false;
  return inOut[pos].desc.format == nvinfer1::TensorFormat::kLINEAR && inOut[pos].desc.type == expected_type(pos);
}

int32_t Mamba2DecodePlugin::getOutputDataTypes(DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes,
                                               int32_t nbInputs) const noexcept {
  if (nbOutputs != getNbOutputs() || nbInputs != io_.nb_inputs) return -1;
  outputTypes[0] = trt_type(cfg_.act_dtype);
  for (size_t k = 0; k < io_.aliased.size(); ++k) outputTypes[1 + k] = inputTypes[io_.aliased[k]];
  return 0;
}

int32_t Mamba2DecodePlugin::getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
                                            nvinfer1::DimsExprs const*, int32_t, nvinfer1::DimsExprs* outputs,
                                            int32_t nbOutputs, nvinfer1::IExprBuilder&) noexcept {
  if (nbOutputs != getNbOutputs() || nbInputs != io_.nb_inputs) return -1;
  outputs[0] = inputs[io_.input[Mamba2DecodeIO::X]];  // y has x's shape
  for (size_t k = 0; k < io_.aliased.size(); ++k) outputs[1 + k] = inputs[io_.aliased[k]];  // updated in place
  return 0;
}

int32_t Mamba2DecodePlugin::configurePlugin(nvinfer1::DynamicPluginTensorDesc const*, int32_t nbInputs,
                                            nvinfer1::DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept {
  return nbInputs == io_.nb_inputs && nbOutputs == getNbOutputs() ? 0 : -1;
}

int32_t Mamba2DecodePlugin::onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs,
                                          nvinfer1::PluginTensorDesc const*, int32_t nbOutputs) noexcept {
  if (nbInputs != io_.nb_inputs || nbOutputs != getNbOutputs()) return -1;
  nvinfer1::Dims const& x = in[io_.input[Mamba2DecodeIO::X]].dims;
  nvinfer1::Dims const& s = in[io_.input[Mamba2DecodeIO::STATE]].dims;
  if (x.nbDims != 3 || x.d[1] != cfg_.nheads || x.d[2] != cfg_.head_dim || s.nbDims != 4 || s.d[1] != cfg_.nheads ||
      s.d[2] != cfg_.head_dim || s.d[3] != cfg_.dstate) {
    log_error("ReplaySSMMamba2Decode: x must be [batch, nheads, head_dim] and state [slots, nheads, head_dim, dstate]");
    return -1;
  }
  return 0;
}

int32_t Mamba2DecodePlugin::enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const*,
                                    void const* const* inputs, void* const* outputs, void*,
                                    cudaStream_t stream) noexcept {
  using IO = Mamba2DecodeIO;
  auto in = [&](IO::Role role) -> void const* { return io_.input[role] < 0 ? nullptr : inputs[io_.input[role]]; };
  // Outputs 1.. alias the pool inputs (same buffers); write through the output pointers.
  auto pool = [&](IO::Role role) -> void* {
    for (size_t k = 0; k < io_.aliased.size(); ++k)
      if (io_.aliased[k] == io_.input[role]) return outputs[1 + k];
    return nullptr;
  };
  rssm_mamba2_decode_params p{};
  p.batch = static_cast<int32_t>(inputDesc[io_.input[IO::X]].dims.d[0]);
  p.nheads = cfg_.nheads, p.head_dim = cfg_.head_dim, p.dstate = cfg_.dstate, p.ngroups = cfg_.ngroups;
  p.buffer_len = cfg_.buffer_len;
  p.num_slots = static_cast<int32_t>(inputDesc[io_.input[IO::STATE]].dims.d[0]);
  p.pad_slot_id = cfg_.pad_slot_id, p.mode = cfg_.mode;
  p.state_dtype = cfg_.state_dtype, p.act_dtype = cfg_.act_dtype, p.dt_softplus = cfg_.dt_softplus;
  p.state = pool(IO::STATE);
  if (cfg_.mode == RSSM_MAMBA2_REPLAY) {
    p.ring_x = pool(IO::RING_X), p.ring_B = pool(IO::RING_B);
    p.ring_dt = static_cast<float*>(pool(IO::RING_DT));
    p.cursor = static_cast<int32_t*>(pool(IO::CURSOR));
  }
  p.slot_idx = static_cast<int32_t const*>(in(IO::SLOT_IDX));
  p.x = in(IO::X), p.dt = in(IO::DT), p.B = in(IO::B), p.C = in(IO::C), p.z = in(IO::Z);
  p.A = static_cast<float const*>(in(IO::A));
  p.D = static_cast<float const*>(in(IO::D));
  p.dt_bias = static_cast<float const*>(in(IO::DT_BIAS));
  p.y = outputs[0];
  // TensorRT tensors are dense (kLINEAR): strides follow from the shapes.
  const int64_t hp = int64_t{cfg_.nheads} * cfg_.head_dim, gn = int64_t{cfg_.ngroups} * cfg_.dstate;
  p.x_batch_stride = p.z_batch_stride = p.y_batch_stride = hp;
  p.x_head_stride = p.z_head_stride = p.y_head_stride = cfg_.head_dim;
  p.dt_batch_stride = cfg_.nheads, p.dt_head_stride = 1;
  p.B_batch_stride = p.C_batch_stride = gn, p.B_group_stride = p.C_group_stride = cfg_.dstate;
  if (rssm_mamba2_decode(&p, sizeof(p), stream) != RSSM_OK) {
    log_error(std::string("ReplaySSMMamba2Decode: ") + rssm_last_error());
    return -1;
  }
  return 0;
}

nvinfer1::IPluginV3* Mamba2DecodePlugin::attachToContext(nvinfer1::IPluginResourceContext*) noexcept { return clone(); }

PluginFieldCollection const* Mamba2DecodePlugin::getFieldsToSerialize() noexcept {
  serialized_.clear();
  for (FieldSpec const& spec : kMamba2DecodeFields)
    serialized_.emplace_back(spec.name, &(cfg_.*spec.member), PluginFieldType::kINT32, 1);
  serialized_fc_.nbFields = static_cast<int32_t>(serialized_.size());
  serialized_fc_.fields = serialized_.data();
  return &serialized_fc_;
}

Mamba2DecodeCreator::Mamba2DecodeCreator() {
  for (FieldSpec const& spec : kMamba2DecodeFields)
    field_names_.emplace_back(spec.name, nullptr, PluginFieldType::kINT32, 1);
  field_names_fc_.nbFields = static_cast<int32_t>(field_names_.size());
  field_names_fc_.fields = field_names_.data();
}

nvinfer1::IPluginV3* Mamba2DecodeCreator::createPlugin(char const*, PluginFieldCollection const* fc,
                                                       nvinfer1::TensorRTPhase) noexcept {
  try {
    Mamba2DecodeConfig cfg;
    std::string error;
    if (!parse_fields(fc, cfg, error) || !validate_config(cfg, error)) {
      log_error(std::string("ReplaySSMMamba2Decode: ") + error);
      return nullptr;
    }
    return new Mamba2DecodePlugin(cfg);
  } catch (...) {
    log_error("ReplaySSMMamba2Decode: createPlugin failed (out of memory)");
    return nullptr;
  }
}

}  // namespace trt
}  // namespace replayssm
