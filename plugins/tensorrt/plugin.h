// The TensorRT IPluginV3 shared by every plugin of the library: one template, Plugin<Op>, over an op's traits
// (its configuration struct and field table, its tensors with their types and shapes, and its launch through the
// C ABI). Everything TensorRT asks of a plugin that does not depend on the op lives here once: fields (one table
// serves getFieldNames, createPlugin and getFieldsToSerialize), clone, types and formats, output shapes, in-place
// outputs aliased to their inputs, shape checks, error reporting. I/O contracts: docs/tensorrt_plugins.md.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "NvInferRuntime.h"
#include "replayssm.h"

namespace replayssm {
namespace trt {

constexpr char const* kPluginNamespace = "trtllm_replayssm";

// Reports an error through the logger that TensorRT handed to setLoggerFinder (stderr when none); host.cpp.
void log_error(std::string const& message) noexcept;
// Called by getCreators: the host registers the creators itself, so the registrations made when the library was
// loaded are withdrawn (host.cpp).
void on_get_creators() noexcept;

// One int32 plugin field: name, member, required flag, inclusive range. The ranges only bound what a field can
// hold; the supported values are the C ABI's (every op's validate asks its *_validate entry point).
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

inline int64_t rssm_dtype_bytes(int32_t rssm_dtype) { return rssm_dtype == RSSM_DTYPE_FP32 ? 4 : 2; }

// Records per head of a pool's fp32 ring (ring_dt, ring_g): L rounded up to 4, so rows stay 16-byte aligned.
inline int64_t fp32_ring_len(int32_t buffer_len) { return (int64_t{buffer_len} + 3) / 4 * 4; }

// A stand-in device address for the *_validate entry points, which read no memory (16-byte aligned).
inline void* validation_address() { return reinterpret_cast<void*>(uintptr_t{1} << 20); }

// The decode plugins' field latency_route_kib: -1 (its default) takes the kernels' default, 32 MiB where the layer
// can take the latency route (replay, fp32 checkpoint, a head shape whose tiles own the cursor replicas) and 0
// (off) elsewhere, as the Python ops do (pool.latency_route_limit). `check` is the op's check against the C ABI.
constexpr int32_t kLatencyRouteDefault = -1, kLatencyRouteDefaultKib = 32 * 1024;
template <typename Config, typename Check>
bool resolve_latency_route(Config& cfg, Check check, std::string& error) {
  if (cfg.latency_route_kib != kLatencyRouteDefault) return check(cfg, error);
  cfg.latency_route_kib = kLatencyRouteDefaultKib;
  std::string refused;
  if (check(cfg, refused)) return true;
  cfg.latency_route_kib = 0;
  return check(cfg, error);
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

// Tensor positions of a configuration: inputs by role, then outputs: y first when the op has one (a fresh tensor
// with the shape and type of input `y_like`), then the pool buffers updated in place, each aliased to its input.
template <int kRoles>
struct IOTable {
  std::array<int32_t, kRoles> input{};  // input index of each role, -1 when the configuration has none
  std::vector<int32_t> aliased;         // aliased[k] = input index updated in place by output first_aliased() + k
  int32_t nb_inputs = 0;
  int y_like = -1;                      // the role whose input y copies (shape and type); -1: no y output
  IOTable() { input.fill(-1); }
  void add(int role) { input[role] = nb_inputs++; }
  void add_in_place(int role) {
    add(role);
    aliased.push_back(input[role]);
  }
  bool has_y() const { return y_like >= 0; }
  int32_t first_aliased() const { return has_y() ? 1 : 0; }
  int32_t nb_outputs() const { return first_aliased() + static_cast<int32_t>(aliased.size()); }
  int32_t role_of(int32_t pos) const {
    for (int r = 0; r < kRoles; ++r)
      if (input[r] == pos) return r;
    return -1;
  }
};

// Expected dimensions of one input: sizes fixed by the configuration, or symbols (negative) that take the same
// value in every input of a call: the batch, the pool's rows, and up to three sizes the fields leave free.
constexpr int64_t kBatch = -1, kSlots = -2, kFree0 = -3, kFree1 = -4, kFree2 = -5;
constexpr int kNbSymbols = 5;

struct Shape {
  int32_t rank = 0;
  std::array<int64_t, nvinfer1::Dims::MAX_DIMS> d{};
  Shape(std::initializer_list<int64_t> dims) {
    for (int64_t v : dims)
      if (rank < nvinfer1::Dims::MAX_DIMS) d[rank++] = v;
  }
};

// Checks every input's dimensions against F::dims(role, cfg); on a mismatch names the tensor, its dims and the
// expected ones (symbols shown with the value an earlier input gave them). A negative dimension is one the build
// does not know yet (a dynamic size before the profile is chosen): it matches anything and binds no symbol.
template <typename F>
bool check_dims(typename F::Config const& cfg, IOTable<F::kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                std::string& error) {
  static char const* const kSymbolNames[kNbSymbols] = {"batch", "slots", "d0", "d1", "d2"};
  std::array<int64_t, kNbSymbols> value;
  value.fill(-1);
  for (int32_t pos = 0; pos < io.nb_inputs; ++pos) {
    const int role = io.role_of(pos);
    Shape const want = F::dims(role, cfg);
    nvinfer1::Dims const& got = in[pos].dims;
    bool ok = got.nbDims == want.rank;
    std::array<int64_t, kNbSymbols> before = value;
    for (int32_t i = 0; ok && i < want.rank; ++i) {
      const int64_t w = want.d[i];
      if (got.d[i] < 0) {
        continue;
      } else if (w >= 0) {
        ok = got.d[i] == w;
      } else {
        int64_t& v = value[-1 - w];
        if (v < 0) v = got.d[i];
        ok = got.d[i] == v;
      }
    }
    if (!ok) {
      std::string have = "[", expect = "[";
      for (int32_t i = 0; i < got.nbDims; ++i) have += (i ? ", " : "") + std::to_string(got.d[i]);
      for (int32_t i = 0; i < want.rank; ++i) {
        const int64_t w = want.d[i];
        expect += i ? ", " : "";
        if (w >= 0) {
          expect += std::to_string(w);
        } else {
          expect += kSymbolNames[-1 - w];
          if (before[-1 - w] >= 0) expect += "=" + std::to_string(before[-1 - w]);
        }
      }
      error = std::string(F::kRoleNames[role]) + " has dims " + have + "], expected " + expect + "]";
      return false;
    }
  }
  return true;
}

// What an op's launch sees: each role's input (nullptr when the configuration has none), the output pointer of
// each role updated in place (the same buffer as its input; nullptr for read-only roles), y, and the dims.
template <int kRoles>
struct Tensors {
  IOTable<kRoles> const& io;
  nvinfer1::PluginTensorDesc const* desc;
  void const* const* inputs;
  void* const* outputs;
  void* workspace = nullptr;  // TensorRT's scratch for this enqueue: F::workspace_bytes of it (ops that declare one)
  void const* in(int role) const { return io.input[role] < 0 ? nullptr : inputs[io.input[role]]; }
  void* inout(int role) const {
    for (size_t k = 0; k < io.aliased.size(); ++k)
      if (io.aliased[k] == io.input[role]) return outputs[io.first_aliased() + static_cast<int32_t>(k)];
    return nullptr;
  }
  void* y() const { return io.has_y() ? outputs[0] : nullptr; }
  int64_t dim(int role, int32_t i) const { return desc[io.input[role]].dims.d[i]; }
};

// Op traits F provide:
//   using Config; enum Role { ..., kRoles }; static constexpr kName, kVersion, kRoleNames (input names by role);
//   static kFields (FieldSpec table);
//   static IOTable<kRoles> make_io(Config const&);                 // inputs in order, in-place roles, y_like
//   static nvinfer1::DataType role_type(int role, Config const&);
//   static Shape dims(int role, Config const&);
//   static bool validate(Config&, std::string& error);   // against the C ABI's dispatch table; may resolve defaults
//   static bool check_shapes(Config const&, IOTable const&, PluginTensorDesc const* in, std::string& error);
//     (usually check_dims<F>; an op adds what a table cannot say)
//   static rssm_status launch(Config const&, Tensors<kRoles> const&, cudaStream_t);  // fills params, calls the C ABI
// and optionally, an op that needs scratch (the prefill plugins' per-token slot indices):
//   static size_t workspace_bytes(Config const&, IOTable const&, DynamicPluginTensorDesc const* in);  // at in[].max
template <typename F, typename = void>
struct HasWorkspace : std::false_type {};
template <typename F>
struct HasWorkspace<F, std::void_t<decltype(&F::workspace_bytes)>> : std::true_type {};

template <typename F>
class Plugin final : public nvinfer1::IPluginV3,
                     public nvinfer1::IPluginV3OneCore,
                     public nvinfer1::IPluginV3OneBuildV2,
                     public nvinfer1::IPluginV3OneRuntime {
 public:
  using Config = typename F::Config;
  using IO = IOTable<F::kRoles>;

  explicit Plugin(Config const& cfg) : cfg_(cfg), io_(F::make_io(cfg)) {
    // cfg_ never changes: the serialized fields point at it once and for all.
    for (auto const& spec : F::kFields)
      serialized_.emplace_back(spec.name, &(cfg_.*spec.member), nvinfer1::PluginFieldType::kINT32, 1);
    serialized_fc_.nbFields = static_cast<int32_t>(serialized_.size());
    serialized_fc_.fields = serialized_.data();
  }
  Plugin(Plugin const&) = delete;
  Plugin& operator=(Plugin const&) = delete;

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
      auto* copy = new Plugin(cfg_);
      copy->recorder_ = recorder_;
      return copy;
    } catch (...) {
      report(nvinfer1::ErrorCode::kFAILED_ALLOCATION, "clone failed (out of memory)");
      return nullptr;
    }
  }
  // IPluginV3OneCore
  char const* getPluginName() const noexcept override { return F::kName; }
  char const* getPluginVersion() const noexcept override { return F::kVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }
  // IPluginV3OneBuild(V2)
  // The builder never calls onShapeChange: the shapes are checked here, on the dims the build knows and on the
  // profile's bounds, so that a wrong shape fails the build rather than the first execution.
  int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept override {
    if (!counts_match(nbInputs, nbOutputs)) return -1;
    try {
      std::vector<nvinfer1::PluginTensorDesc> desc(nbInputs), lo(nbInputs), hi(nbInputs);
      for (int32_t i = 0; i < nbInputs; ++i) {
        desc[i] = lo[i] = hi[i] = in[i].desc;
        lo[i].dims = in[i].min, hi[i].dims = in[i].max;
      }
      return shapes_ok(desc.data(), "") && shapes_ok(lo.data(), " (profile minimum)") &&
                     shapes_ok(hi.data(), " (profile maximum)")
                 ? 0
                 : -1;
    } catch (...) {
      return -1;
    }
  }
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs, nvinfer1::DataType const*,
                             int32_t nbInputs) const noexcept override {
    if (!counts_match(nbInputs, nbOutputs)) return -1;
    for (int32_t o = 0; o < nbOutputs; ++o) outputTypes[o] = expected_type(io_.nb_inputs + o);
    return 0;
  }
  int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const*, int32_t,
                          nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder&) noexcept override {
    if (!counts_match(nbInputs, nbOutputs)) return -1;
    if (io_.has_y()) outputs[0] = inputs[io_.input[io_.y_like]];
    for (size_t k = 0; k < io_.aliased.size(); ++k)  // updated in place: the input's shape
      outputs[io_.first_aliased() + static_cast<int32_t>(k)] = inputs[io_.aliased[k]];
    return 0;
  }
  bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
                                 int32_t nbOutputs) noexcept override {
    if (!counts_match(nbInputs, nbOutputs) || pos < 0 || pos >= nbInputs + nbOutputs) return false;
    return inOut[pos].desc.format == nvinfer1::TensorFormat::kLINEAR && inOut[pos].desc.type == expected_type(pos);
  }
  int32_t getNbOutputs() const noexcept override { return io_.nb_outputs(); }
  // Decode kernels need no scratch (everything they keep between steps lives in the pool inputs); an op that
  // declares workspace_bytes gets it sized at the profile's largest shapes.
  size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const*, int32_t) const noexcept override {
    if constexpr (HasWorkspace<F>::value) {
      if (inputs && nbInputs == io_.nb_inputs) return F::workspace_bytes(cfg_, io_, inputs);
    }
    return 0;
  }
  int32_t getAliasedInput(int32_t outputIndex) noexcept override {
    const int32_t k = outputIndex - io_.first_aliased();
    return outputIndex >= 0 && k >= 0 && k < static_cast<int32_t>(io_.aliased.size()) ? io_.aliased[k] : -1;
  }
  // IPluginV3OneRuntime
  int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const*,
                        int32_t nbOutputs) noexcept override {
    if (!counts_match(nbInputs, nbOutputs)) return -1;
    try {
      return shapes_ok(in, "") ? 0 : -1;
    } catch (...) {
      return -1;
    }
  }
  int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const*,
                  void const* const* inputs, void* const* outputs, void* workspace,
                  cudaStream_t stream) noexcept override {
    // The pool outputs alias their inputs (same buffers): the kernels write through the output pointers.
    if (F::launch(cfg_, Tensors<F::kRoles>{io_, inputDesc, inputs, outputs, workspace}, stream) == RSSM_OK) return 0;
    report(nvinfer1::ErrorCode::kFAILED_EXECUTION, rssm_last_error());
    return -1;
  }
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override {
    auto* attached = static_cast<Plugin*>(clone());
    if (attached && context) attached->recorder_ = context->getErrorRecorder();
    return attached;
  }
  nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override { return &serialized_fc_; }

  Config const& config() const { return cfg_; }
  IO const& io() const { return io_; }
  // The element type the plugin expects at tensor position `pos` (inputs, then outputs).
  nvinfer1::DataType expected_type(int32_t pos) const {
    if (pos >= io_.nb_inputs) {
      const int32_t out = pos - io_.nb_inputs;
      if (io_.has_y() && out == 0) return F::role_type(io_.y_like, cfg_);
      return expected_type(io_.aliased[out - io_.first_aliased()]);
    }
    return F::role_type(io_.role_of(pos), cfg_);
  }

 private:
  bool counts_match(int32_t nbInputs, int32_t nbOutputs) const {
    return nbInputs == io_.nb_inputs && nbOutputs == io_.nb_outputs();
  }
  // F's shape check (check_dims and what the op adds); a refusal is reported, `where` appended to the message.
  bool shapes_ok(nvinfer1::PluginTensorDesc const* in, char const* where) const {
    std::string error;
    if (F::check_shapes(cfg_, io_, in, error)) return true;
    report(nvinfer1::ErrorCode::kINVALID_ARGUMENT, error + where);
    return false;
  }
  // Logs the failure and hands it to the execution context's error recorder (when attached to one).
  void report(nvinfer1::ErrorCode code, std::string const& what) const noexcept {
    try {
      const std::string message = std::string(F::kName) + ": " + what;
      log_error(message);
      if (recorder_) recorder_->reportError(code, message.c_str());
    } catch (...) {
      if (recorder_) recorder_->reportError(code, F::kName);
    }
  }

  Config cfg_;
  IO io_;
  nvinfer1::IErrorRecorder* recorder_ = nullptr;
  std::vector<nvinfer1::PluginField> serialized_;
  nvinfer1::PluginFieldCollection serialized_fc_{};
};

template <typename F>
class Creator final : public nvinfer1::IPluginCreatorV3One {
 public:
  Creator() {
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
      return new Plugin<F>(cfg);
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
