// Host test of the TensorRT plugin library, runnable without TensorRT's runtime or a GPU: creators and fields,
// serialization round trips, clone, output count/types/shapes, aliasing, format checks, shape checks, refusals,
// and a failing enqueue reported through the error recorder; for every plugin. Prints one line per failed check;
// exits non-zero when any fails. `--inputs` prints the input order of a few configurations of each plugin
// (tests/test_tensorrt_plugin_host.py compares it with trtllm_replayssm/trt_plugins.py).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commit_plugins.h"
#include "conv1d_plugin.h"
#include "gdn_decode_plugin.h"
#include "gdn_verify_plugin.h"
#include "mamba2_decode_plugin.h"
#include "mamba2_verify_plugin.h"
#include "prefill_plugins.h"

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);

using namespace nvinfer1;
using namespace replayssm::trt;

static int g_failures = 0;
#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) {                                                  \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                 \
    }                                                               \
  } while (0)

struct Fields {
  std::vector<std::pair<char const*, int32_t>> values;
  Fields(std::initializer_list<std::pair<char const*, int32_t>> v) : values(v) {}
  std::vector<PluginField> fields;
  PluginFieldCollection fc{};
  PluginFieldCollection const* get() {
    fields.clear();
    for (auto& v : values) fields.emplace_back(v.first, &v.second, PluginFieldType::kINT32, 1);
    fc.nbFields = static_cast<int32_t>(fields.size());
    fc.fields = fields.data();
    return &fc;
  }
  Fields with(char const* name, int32_t value) const {
    Fields f = *this;
    for (auto& v : f.values)
      if (std::strcmp(v.first, name) == 0) {
        v.second = value;
        return f;
      }
    f.values.push_back({name, value});
    return f;
  }
};

// The library's creator of op F, found by name among getCreators().
template <typename F>
static Creator<F>& creator() {
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = getCreators(n);
  for (int32_t i = 0; i < n; ++i) {
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    if (std::strcmp(c->getPluginName(), F::kName) == 0) return *static_cast<Creator<F>*>(c);
  }
  std::printf("FAILED: no creator named %s\n", F::kName);
  std::exit(1);
}

template <typename F>
static std::unique_ptr<Plugin<F>> create(Fields f, TensorRTPhase phase = TensorRTPhase::kBUILD) {
  return std::unique_ptr<Plugin<F>>(static_cast<Plugin<F>*>(creator<F>().createPlugin("p", f.get(), phase)));
}

template <typename Config>
static bool same(Config const& a, Config const& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// An error recorder that keeps what it is told, and the resource context TensorRT would hand attachToContext
// (the header asks applications not to implement it; a test stands in for TensorRT here).
struct Recorder : IErrorRecorder {
  std::vector<std::pair<ErrorCode, std::string>> errors;
  int32_t getNbErrors() const noexcept override { return static_cast<int32_t>(errors.size()); }
  ErrorCode getErrorCode(int32_t i) const noexcept override { return errors[i].first; }
  ErrorDesc getErrorDesc(int32_t i) const noexcept override { return errors[i].second.c_str(); }
  bool hasOverflowed() const noexcept override { return false; }
  void clear() noexcept override { errors.clear(); }
  bool reportError(ErrorCode code, ErrorDesc desc) noexcept override {
    errors.emplace_back(code, desc);
    return true;
  }
  RefCount incRefCount() noexcept override { return 1; }
  RefCount decRefCount() noexcept override { return 1; }
};
struct Context : IPluginResourceContext {
  Recorder* recorder;
  explicit Context(Recorder* r) : recorder(r) {}
  IGpuAllocator* getGpuAllocator() const noexcept override { return nullptr; }
  IErrorRecorder* getErrorRecorder() const noexcept override { return recorder; }
};

// Concrete input descriptors of a plugin: F's dims with batch 3, slots 5 and free sizes 2, 4, 8.
template <typename F>
static std::vector<PluginTensorDesc> concrete_inputs(Plugin<F> const& plugin) {
  const int64_t symbol[kNbSymbols] = {3, 5, 2, 4, 8};
  std::vector<PluginTensorDesc> in(plugin.io().nb_inputs);
  for (int32_t pos = 0; pos < plugin.io().nb_inputs; ++pos) {
    Shape const s = F::dims(plugin.io().role_of(pos), plugin.config());
    in[pos].dims.nbDims = s.rank;
    for (int32_t i = 0; i < s.rank; ++i) in[pos].dims.d[i] = s.d[i] >= 0 ? s.d[i] : symbol[-1 - s.d[i]];
    in[pos].type = plugin.expected_type(pos);
    in[pos].format = TensorFormat::kLINEAR;
  }
  return in;
}

// Checks every plugin shares: names, field table, capabilities, aliasing, serialization round trip, clone, types
// and formats, output types and shapes, shape checks, workspace, refusals, a failing enqueue. `fields` is a valid
// configuration with `nb_in` inputs and `nb_out` outputs whose activations (if any) are bf16.
template <typename F>
static void check_plugin(Fields fields, int32_t nb_in, int32_t nb_out) {
  Creator<F>& c = creator<F>();
  CHECK(std::strcmp(c.getPluginNamespace(), "trtllm_replayssm") == 0);
  CHECK(std::strcmp(c.getPluginVersion(), "1") == 0);
  PluginFieldCollection const* names = c.getFieldNames();
  CHECK(names->nbFields == static_cast<int32_t>(F::kFields.size()));
  for (int32_t i = 0; i < names->nbFields; ++i) {
    CHECK(std::strcmp(names->fields[i].name, F::kFields[i].name) == 0);
    CHECK(names->fields[i].type == PluginFieldType::kINT32 && names->fields[i].length == 1);
  }

  auto plugin = create<F>(fields);
  CHECK(plugin != nullptr);
  if (!plugin) {
    std::printf("  (%s refused its fields)\n", F::kName);
    return;
  }
  auto const& io = plugin->io();
  const int32_t nout = plugin->getNbOutputs();
  CHECK(io.nb_inputs == nb_in && nout == nb_out);
  CHECK(std::strcmp(plugin->getPluginName(), F::kName) == 0);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kCORE) != nullptr);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD) != nullptr);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME) != nullptr);
  // y (when present) is fresh; every other output aliases a distinct input of its own type.
  const int32_t first = io.has_y() ? 1 : 0;
  if (io.has_y()) CHECK(plugin->getAliasedInput(0) == -1);
  for (int32_t o = first; o < nout; ++o) {
    const int32_t a = plugin->getAliasedInput(o);
    CHECK(a >= 0 && a < io.nb_inputs);
    CHECK(plugin->expected_type(io.nb_inputs + o) == plugin->expected_type(a));
    for (int32_t o2 = first; o2 < o; ++o2) CHECK(plugin->getAliasedInput(o2) != a);
  }
  CHECK(plugin->getAliasedInput(nout) == -1 && plugin->getAliasedInput(-1) == -1);
  CHECK(plugin->getWorkspaceSize(nullptr, io.nb_inputs, nullptr, nout) == 0);

  PluginFieldCollection const* ser = plugin->getFieldsToSerialize();
  CHECK(ser->nbFields == names->nbFields);
  auto again = std::unique_ptr<Plugin<F>>(static_cast<Plugin<F>*>(c.createPlugin("p", ser, TensorRTPhase::kRUNTIME)));
  CHECK(again && same(again->config(), plugin->config()));
  auto cloned = std::unique_ptr<Plugin<F>>(static_cast<Plugin<F>*>(plugin->clone()));
  CHECK(cloned && cloned.get() != plugin.get() && same(cloned->config(), plugin->config()));

  // Types and formats: exactly the expected type, linear, at every position.
  std::vector<DynamicPluginTensorDesc> descs(io.nb_inputs + nout);
  for (size_t i = 0; i < descs.size(); ++i) {
    descs[i].desc.type = plugin->expected_type(static_cast<int32_t>(i));
    descs[i].desc.format = TensorFormat::kLINEAR;
  }
  for (int32_t pos = 0; pos < static_cast<int32_t>(descs.size()); ++pos) {
    CHECK(plugin->supportsFormatCombination(pos, descs.data(), io.nb_inputs, nout));
    const DataType right = descs[pos].desc.type;
    for (DataType wrong : {DataType::kFLOAT, DataType::kHALF, DataType::kBF16, DataType::kINT32, DataType::kINT8}) {
      if (wrong == right) continue;
      descs[pos].desc.type = wrong;
      CHECK(!plugin->supportsFormatCombination(pos, descs.data(), io.nb_inputs, nout));
    }
    descs[pos].desc.type = right;
    descs[pos].desc.format = TensorFormat::kCHW32;
    CHECK(!plugin->supportsFormatCombination(pos, descs.data(), io.nb_inputs, nout));
    descs[pos].desc.format = TensorFormat::kLINEAR;
  }
  CHECK(!plugin->supportsFormatCombination(0, descs.data(), io.nb_inputs - 1, nout));

  // Shape checks at build time (the builder never calls onShapeChange): the table's dims pass, also with the
  // sizes a dynamic profile leaves open (-1) as long as its bounds fit; a fixed size off by one is refused in the
  // dims and in either bound of the profile.
  std::vector<PluginTensorDesc> const table_dims = concrete_inputs(*plugin);
  for (int32_t i = 0; i < io.nb_inputs; ++i) {
    descs[i].desc.dims = descs[i].min = descs[i].max = table_dims[i].dims;
    descs[i].desc.dims.d[0] = -1;
  }
  CHECK(plugin->configurePlugin(descs.data(), io.nb_inputs, descs.data() + io.nb_inputs, nout) == 0);
  CHECK(plugin->configurePlugin(descs.data(), io.nb_inputs - 1, descs.data() + io.nb_inputs, nout) != 0);
  for (Dims DynamicPluginTensorDesc::*bound : {&DynamicPluginTensorDesc::min, &DynamicPluginTensorDesc::max}) {
    Dims& d = descs[io.nb_inputs - 1].*bound;  // a pool buffer: its last size is fixed by the fields
    d.d[d.nbDims - 1] += 1;
    CHECK(plugin->configurePlugin(descs.data(), io.nb_inputs, descs.data() + io.nb_inputs, nout) != 0);
    d.d[d.nbDims - 1] -= 1;
  }
  Dims& known = descs[io.nb_inputs - 1].desc.dims;
  known.d[known.nbDims - 1] += 1;
  CHECK(plugin->configurePlugin(descs.data(), io.nb_inputs, descs.data() + io.nb_inputs, nout) != 0);
  known.d[known.nbDims - 1] -= 1;

  std::vector<DataType> in_types(io.nb_inputs), out_types(nout);
  for (int32_t i = 0; i < io.nb_inputs; ++i) in_types[i] = plugin->expected_type(i);
  CHECK(plugin->getOutputDataTypes(out_types.data(), nout, in_types.data(), io.nb_inputs) == 0);
  if (io.has_y()) CHECK(out_types[0] == DataType::kBF16 && out_types[0] == in_types[io.input[io.y_like]]);
  for (int32_t o = first; o < nout; ++o) CHECK(out_types[o] == in_types[plugin->getAliasedInput(o)]);

  // Output shapes through a test IExprBuilder: every output repeats an input's expressions, so the builder is
  // never consulted (it has no implementation to consult).
  std::vector<DimsExprs> in_shapes(io.nb_inputs), out_shapes(nout);
  static char tokens[64];
  for (int32_t i = 0; i < io.nb_inputs; ++i) {
    in_shapes[i].nbDims = 1;
    in_shapes[i].d[0] = reinterpret_cast<IDimensionExpr const*>(&tokens[i]);
  }
  struct NoBuilder : IExprBuilder {
    NoBuilder() { mImpl = nullptr; }
  } no_builder;
  CHECK(plugin->getOutputShapes(in_shapes.data(), io.nb_inputs, nullptr, 0, out_shapes.data(), nout, no_builder) ==
        0);
  if (io.has_y()) CHECK(out_shapes[0].d[0] == in_shapes[io.input[io.y_like]].d[0]);
  for (int32_t o = first; o < nout; ++o) CHECK(out_shapes[o].d[0] == in_shapes[plugin->getAliasedInput(o)].d[0]);

  // Shape checks at runtime: the table's dims pass; any input of another rank, or off by one in a dimension the
  // fields fix or that another input shares (batch, slots), is refused.
  std::vector<PluginTensorDesc> in = concrete_inputs(*plugin), out(nout);
  for (int32_t o = 0; o < nout; ++o) out[o] = in[o < first ? io.input[io.y_like] : plugin->getAliasedInput(o)];
  CHECK(plugin->onShapeChange(in.data(), io.nb_inputs, out.data(), nout) == 0);
  int uses[kNbSymbols] = {};
  for (int32_t pos = 0; pos < io.nb_inputs; ++pos) {
    Shape const s = F::dims(io.role_of(pos), plugin->config());
    for (int32_t i = 0; i < s.rank; ++i)
      if (s.d[i] < 0) ++uses[-1 - s.d[i]];
  }
  for (int32_t pos = 0; pos < io.nb_inputs; ++pos) {
    Shape const s = F::dims(io.role_of(pos), plugin->config());
    for (int32_t i = 0; i < in[pos].dims.nbDims; ++i) {
      if (s.d[i] < 0 && uses[-1 - s.d[i]] < 2) continue;  // a size only this input has: free
      in[pos].dims.d[i] += 1;
      CHECK(plugin->onShapeChange(in.data(), io.nb_inputs, out.data(), nout) != 0);
      in[pos].dims.d[i] -= 1;
    }
    in[pos].dims.d[in[pos].dims.nbDims++] = 1;
    CHECK(plugin->onShapeChange(in.data(), io.nb_inputs, out.data(), nout) != 0);
    --in[pos].dims.nbDims;
  }

  // A failing enqueue (no device buffers: the C ABI's validation refuses it before any launch) returns non-zero
  // and reaches the error recorder of the context the plugin is attached to.
  Recorder recorder;
  Context context(&recorder);
  auto attached = std::unique_ptr<Plugin<F>>(static_cast<Plugin<F>*>(plugin->attachToContext(&context)));
  CHECK(attached && same(attached->config(), plugin->config()));
  if (attached) {
    std::vector<void const*> inputs(io.nb_inputs, nullptr);
    std::vector<void*> outputs(nout, nullptr);
    CHECK(attached->enqueue(in.data(), out.data(), inputs.data(), outputs.data(), nullptr, nullptr) != 0);
    CHECK(recorder.getNbErrors() == 1 && recorder.getErrorCode(0) == ErrorCode::kFAILED_EXECUTION);
    CHECK(recorder.getNbErrors() == 1 && std::strstr(recorder.getErrorDesc(0), F::kName) != nullptr &&
          std::strstr(recorder.getErrorDesc(0), "NULL") != nullptr);
    in[0].dims.d[0] += 1;
    CHECK(attached->onShapeChange(in.data(), io.nb_inputs, out.data(), nout) != 0);
    CHECK(recorder.getNbErrors() == 2 && recorder.getErrorCode(1) == ErrorCode::kINVALID_ARGUMENT);
  }

  // Refusals (each logs a message naming the field or value).
  CHECK(create<F>(fields.with("no_such_field", 1)) == nullptr);
  for (auto const& spec : F::kFields) {
    if (!spec.required) continue;
    Fields missing = fields;
    for (size_t i = 0; i < missing.values.size(); ++i)
      if (std::strcmp(missing.values[i].first, spec.name) == 0) missing.values.erase(missing.values.begin() + i);
    CHECK(create<F>(missing) == nullptr);
  }
}

// Prints the input names of a plugin configuration in the plugin's order (for the Python binding's check).
template <typename F>
static void print_inputs(Fields f, char const* label) {
  auto plugin = create<F>(f);
  if (!plugin) return;
  std::printf("%s:", label);
  for (int32_t pos = 0; pos < plugin->io().nb_inputs; ++pos)
    std::printf(" %s", F::kRoleNames[plugin->io().role_of(pos)]);
  std::printf("\n");
}

static int print_all_inputs() {
  Fields m{{{"nheads", 8}, {"head_dim", 64}, {"dstate", 64}, {"ngroups", 2}}};
  Fields g{{{"num_k_heads", 2}, {"num_v_heads", 4}, {"head_k_dim", 64}, {"head_v_dim", 64}}};
  Fields conv{{{"channels", 64}, {"kernel_size", 4}}};
  print_inputs<Mamba2Decode>(m.with("mode", 1), "mamba2 replay z D dt_bias");
  print_inputs<Mamba2Decode>(m.with("mode", 0).with("has_z", 0).with("has_D", 0).with("has_dt_bias", 0),
                             "mamba2 conventional");
  print_inputs<Mamba2Decode>(m.with("mode", 1).with("has_D", 0), "mamba2 replay z dt_bias");
  print_inputs<GdnDecode>(g.with("mode", 1), "gdn replay");
  print_inputs<GdnDecode>(g.with("mode", 0), "gdn conventional");
  print_inputs<Mamba2Verify>(m.with("window", 4).with("mode", 1), "mamba2 verify replay z D dt_bias");
  print_inputs<Mamba2Verify>(m.with("window", 4).with("mode", 0).with("has_z", 0), "mamba2 verify snapshot D dt_bias");
  print_inputs<GdnVerify>(g.with("window", 4).with("mode", 1), "gdn verify replay");
  print_inputs<GdnVerify>(g.with("window", 4).with("mode", 0), "gdn verify snapshot");
  print_inputs<SpecCommit>(Fields{{{"nheads", 8}, {"window", 4}}}, "spec commit");
  print_inputs<SnapshotCommit>(Fields{{{"window", 4}}}, "snapshot commit");
  print_inputs<Conv1d>(conv.with("mode", 0), "conv1d update bias");
  print_inputs<Conv1d>(conv.with("mode", 1).with("num_tokens", 4).with("has_bias", 0), "conv1d verify");
  print_inputs<Conv1d>(conv.with("mode", 2).with("num_tokens", 4), "conv1d commit");
  print_inputs<Mamba2Prefill>(m.with("mode", 1), "mamba2 prefill replay z D dt_bias");
  print_inputs<Mamba2Prefill>(m.with("mode", 0).with("has_z", 0), "mamba2 prefill conventional D dt_bias");
  print_inputs<GdnPrefill>(g.with("mode", 1), "gdn prefill replay");
  print_inputs<GdnPrefill>(g.with("mode", 0), "gdn prefill conventional");
  print_inputs<Conv1dPrefill>(conv.with("has_bias", 0), "conv1d prefill");
  return 0;
}

int main(int argc, char** argv) {
  int32_t n = 0;
  CHECK(getCreators(n) != nullptr && n == 10);
  if (argc > 1 && std::strcmp(argv[1], "--inputs") == 0) return print_all_inputs();

  // ---- decode
  // Mamba-2: x dt B C z A D dt_bias slot_idx state ring_x ring_B ring_dt cursor; y + 5 pool buffers.
  Fields super_replay{{{"nheads", 128}, {"head_dim", 64}, {"dstate", 128}, {"ngroups", 8}, {"buffer_len", 16},
                       {"mode", 1}, {"state_dtype", RSSM_DTYPE_FP32}, {"act_dtype", RSSM_DTYPE_BF16}}};
  check_plugin<Mamba2Decode>(super_replay, 14, 6);
  Fields conv{{{"nheads", 8}, {"head_dim", 64}, {"dstate", 64}, {"ngroups", 2}, {"mode", 0}, {"has_z", 0},
               {"has_D", 0}, {"has_dt_bias", 0}}};
  check_plugin<Mamba2Decode>(conv, 7, 2);
  CHECK(create<Mamba2Decode>(super_replay.with("buffer_len", 65)) == nullptr);
  CHECK(create<Mamba2Decode>(super_replay.with("state_dtype", 3)) == nullptr);
  CHECK(create<Mamba2Decode>(super_replay.with("head_dim", 96)) == nullptr);  // not in the dispatch table
  CHECK(create<Mamba2Decode>(super_replay.with("ngroups", 7)) == nullptr);    // does not divide nheads
  if (auto p = create<Mamba2Decode>(super_replay)) {
    CHECK(p->getAliasedInput(1) == p->io().input[Mamba2Decode::STATE]);
    CHECK(p->getAliasedInput(5) == p->io().input[Mamba2Decode::CURSOR]);
    CHECK(p->expected_type(p->io().input[Mamba2Decode::RING_DT]) == DataType::kFLOAT);
  }
  // GDN: q k v g beta slot_idx state ring_u ring_k ring_g cursor; y + 5 pool buffers.
  Fields qwen_replay{{{"num_k_heads", 16}, {"num_v_heads", 64}, {"head_k_dim", 128}, {"head_v_dim", 128},
                      {"buffer_len", 16}, {"mode", 1}, {"state_dtype", RSSM_DTYPE_FP32},
                      {"act_dtype", RSSM_DTYPE_BF16}}};
  check_plugin<GdnDecode>(qwen_replay, 11, 6);
  check_plugin<GdnDecode>(qwen_replay.with("mode", 0), 7, 2);
  CHECK(create<GdnDecode>(qwen_replay.with("head_k_dim", 96)) == nullptr);   // not in the dispatch table
  CHECK(create<GdnDecode>(qwen_replay.with("num_v_heads", 40)) == nullptr);  // not a multiple of num_k_heads

  // ---- speculative verify
  // Mamba-2 replay: x dt B C z A D dt_bias slot_idx state ring_x ring_B ring_dt cursor; y + 5 pool buffers.
  Fields m_verify = super_replay.with("window", 4);
  check_plugin<Mamba2Verify>(m_verify, 14, 6);
  // Snapshot path: the state is read only, the snapshots are written.
  check_plugin<Mamba2Verify>(m_verify.with("mode", 0).with("state_dtype", RSSM_DTYPE_BF16), 11, 2);
  if (auto p = create<Mamba2Verify>(m_verify.with("mode", 0))) {
    CHECK(p->getAliasedInput(1) == p->io().input[Mamba2Verify::SNAPSHOTS]);
    CHECK(p->io().input[Mamba2Verify::STATE] >= 0 && p->io().input[Mamba2Verify::CURSOR] < 0);
    CHECK(Mamba2Verify::dims(Mamba2Verify::SNAPSHOTS, p->config()).d[1] == 4);
  }
  if (auto p = create<Mamba2Verify>(m_verify.with("state_dtype", RSSM_DTYPE_FP16))) {
    CHECK(p->expected_type(p->io().input[Mamba2Verify::STATE]) == DataType::kHALF);
    CHECK(p->expected_type(p->io().input[Mamba2Verify::RING_X]) == DataType::kBF16);
  }
  CHECK(create<Mamba2Verify>(super_replay) == nullptr);                    // window is required
  CHECK(create<Mamba2Verify>(m_verify.with("window", 9)) == nullptr);      // T outside 2..8
  CHECK(create<Mamba2Verify>(m_verify.with("window", 1)) == nullptr);
  CHECK(create<Mamba2Verify>(m_verify.with("buffer_len", 7)) == nullptr);  // L < 2T
  CHECK(create<Mamba2Verify>(m_verify.with("mode", 0).with("buffer_len", 7)) != nullptr);  // no ring
  CHECK(create<Mamba2Verify>(m_verify.with("head_dim", 96)) == nullptr);
  // GDN replay: q k v g beta slot_idx state ring_u ring_k ring_g cursor; y + 5 pool buffers.
  Fields g_verify = qwen_replay.with("window", 3);
  check_plugin<GdnVerify>(g_verify, 11, 6);
  check_plugin<GdnVerify>(g_verify.with("mode", 0), 8, 2);
  CHECK(create<GdnVerify>(g_verify.with("window", 9)) == nullptr);
  CHECK(create<GdnVerify>(g_verify.with("buffer_len", 5)) == nullptr);
  CHECK(create<GdnVerify>(g_verify.with("head_v_dim", 96)) == nullptr);

  // ---- commits: no y, every output in place
  Fields commit{{{"nheads", 64}, {"window", 4}, {"buffer_len", 16}}};
  check_plugin<SpecCommit>(commit, 3, 1);
  if (auto p = create<SpecCommit>(commit)) {
    CHECK(!p->io().has_y() && p->getAliasedInput(0) == p->io().input[SpecCommit::CURSOR]);
    CHECK(p->expected_type(p->io().input[SpecCommit::ACCEPTED]) == DataType::kINT32);
  }
  CHECK(create<SpecCommit>(commit.with("buffer_len", 3)) == nullptr);  // L < T
  Fields snap{{{"window", 4}, {"state_dtype", RSSM_DTYPE_BF16}}};
  check_plugin<SnapshotCommit>(snap, 4, 1);
  if (auto p = create<SnapshotCommit>(snap)) {
    CHECK(p->getAliasedInput(0) == p->io().input[SnapshotCommit::STATE]);
    CHECK(p->expected_type(p->io().input[SnapshotCommit::SNAPSHOTS]) == DataType::kBF16);
    // A state slot that is not a whole number of 16-byte chunks is refused at shape time.
    std::vector<PluginTensorDesc> in = concrete_inputs(*p), out{in[p->io().input[SnapshotCommit::STATE]]};
    auto slot = [&](int64_t d0, int64_t d1, int64_t d2) {
      in[p->io().input[SnapshotCommit::STATE]].dims = Dims{4, {5, d0, d1, d2}};
      in[p->io().input[SnapshotCommit::SNAPSHOTS]].dims = Dims{5, {5, 4, d0, d1, d2}};
      out[0] = in[p->io().input[SnapshotCommit::STATE]];
      return p->onShapeChange(in.data(), 4, out.data(), 1);
    };
    CHECK(slot(3, 1, 8) == 0);   // 24 bf16 = 48 bytes
    CHECK(slot(1, 1, 4) != 0);   // 8 bytes
    CHECK(slot(3, 5, 7) != 0);   // 210 bytes
  }
  CHECK(create<SnapshotCommit>(snap.with("window", 0)) == nullptr);

  // ---- conv1d: update x weight bias slot_idx state; verify x weight bias slot_idx windows; commit accepted
  // slot_idx windows
  Fields conv1d{{{"channels", 96}, {"kernel_size", 4}, {"state_dtype", RSSM_DTYPE_FP32},
                 {"act_dtype", RSSM_DTYPE_BF16}, {"weight_dtype", RSSM_DTYPE_BF16}}};
  check_plugin<Conv1d>(conv1d.with("mode", 0), 5, 2);
  check_plugin<Conv1d>(conv1d.with("mode", 1).with("num_tokens", 5).with("has_bias", 0), 4, 2);
  check_plugin<Conv1d>(conv1d.with("mode", 2).with("num_tokens", 5), 3, 1);
  check_plugin<Conv1d>(conv1d.with("mode", 1).with("num_tokens", 3).with("weight_dtype", RSSM_DTYPE_FP32), 5, 2);
  if (auto p = create<Conv1d>(conv1d.with("mode", 1).with("num_tokens", 5))) {
    CHECK(Conv1d::dims(Conv1d::WINDOWS, p->config()).d[2] == 3 + 5);
    CHECK(p->expected_type(p->io().input[Conv1d::WINDOWS]) == DataType::kFLOAT);
    CHECK(p->getAliasedInput(1) == p->io().input[Conv1d::WINDOWS] && p->io().input[Conv1d::STATE] < 0);
  }
  if (auto p = create<Conv1d>(conv1d.with("mode", 2).with("num_tokens", 5)))
    CHECK(!p->io().has_y() && p->io().input[Conv1d::X] < 0 && p->io().input[Conv1d::ACCEPTED] == 0);
  CHECK(create<Conv1d>(conv1d.with("kernel_size", 5)) == nullptr);                      // k outside 2..4
  CHECK(create<Conv1d>(conv1d.with("mode", 0).with("num_tokens", 2)) == nullptr);       // update is one token
  CHECK(create<Conv1d>(conv1d.with("mode", 1).with("num_tokens", 17)) == nullptr);      // T outside 1..16
  CHECK(create<Conv1d>(conv1d.with("weight_dtype", RSSM_DTYPE_FP16)) == nullptr);       // fp32 or act only
  CHECK(create<Conv1d>(conv1d.with("mode", 3)) == nullptr);

  // ---- prefill: [batch, S, ...] activations, lengths, slot_idx; y + the pool buffers in place; a workspace of
  // the per-token slot indices at the profile's largest batch and S
  Fields m_prefill{{{"nheads", 8}, {"head_dim", 64}, {"dstate", 128}, {"ngroups", 2}, {"state_dtype", RSSM_DTYPE_FP32},
                    {"act_dtype", RSSM_DTYPE_BF16}}};
  check_plugin<Mamba2Prefill>(m_prefill, 12, 3);  // x dt B C z A D dt_bias lengths slot_idx state cursor
  check_plugin<Mamba2Prefill>(m_prefill.with("mode", 0).with("has_z", 0).with("has_D", 0), 9, 2);
  CHECK(create<Mamba2Prefill>(m_prefill.with("head_dim", 96)) == nullptr);  // not in the dispatch table
  Fields g_prefill{{{"num_k_heads", 2}, {"num_v_heads", 4}, {"head_k_dim", 128}, {"head_v_dim", 64},
                    {"act_dtype", RSSM_DTYPE_BF16}}};
  check_plugin<GdnPrefill>(g_prefill, 9, 3);  // q k v g beta lengths slot_idx state cursor
  check_plugin<GdnPrefill>(g_prefill.with("mode", 0), 8, 2);
  CHECK(create<GdnPrefill>(g_prefill.with("num_v_heads", 3)) == nullptr);
  check_plugin<Conv1dPrefill>(Fields{{{"channels", 96}, {"act_dtype", RSSM_DTYPE_BF16}}}, 6, 2);
  CHECK(create<Conv1dPrefill>(Fields{{{"channels", 96}, {"kernel_size", 5}}}) == nullptr);
  if (auto p = create<Mamba2Prefill>(m_prefill)) {
    std::vector<DynamicPluginTensorDesc> in(p->io().nb_inputs);
    in[p->io().input[Mamba2Prefill::X]].max = Dims{4, {6, 100, 8, 64}};
    CHECK(p->getWorkspaceSize(in.data(), p->io().nb_inputs, nullptr, 3) == 6 * 100 * 4);
    CHECK(p->getAliasedInput(2) == p->io().input[Mamba2Prefill::CURSOR]);
    CHECK(Mamba2Prefill::dims(Mamba2Prefill::B, p->config()).d[1] == kFree0);  // S shared by every activation
  }

  std::printf("%s (%d failed checks)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
