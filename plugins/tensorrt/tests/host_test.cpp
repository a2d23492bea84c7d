// Host test of the TensorRT plugin library, runnable without TensorRT's runtime or a GPU: creators and fields,
// serialization round trips, clone, output count/types/shapes, aliasing, format checks, refusals; for every
// plugin family. Prints one line per failed check; exits non-zero when any fails.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "gdn_decode_plugin.h"
#include "mamba2_decode_plugin.h"

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);

using namespace nvinfer1;
using replayssm::trt::DecodeCreator;
using replayssm::trt::DecodePlugin;
using replayssm::trt::GdnDecode;
using replayssm::trt::Mamba2Decode;

static int g_failures = 0;
#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::printf("FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
      ++g_failures;                                                     \
    }                                                                   \
  } while (0)

struct Fields {
  std::vector<std::pair<char const*, int32_t>> values;
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

template <typename F>
static std::unique_ptr<DecodePlugin<F>> create(DecodeCreator<F>& creator, Fields f,
                                               TensorRTPhase phase = TensorRTPhase::kBUILD) {
  return std::unique_ptr<DecodePlugin<F>>(static_cast<DecodePlugin<F>*>(creator.createPlugin("p", f.get(), phase)));
}

template <typename Config>
static bool same(Config const& a, Config const& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// Checks every family shares: names, field table, capabilities, aliasing, serialization round trip, clone,
// types and formats, output types and shapes. `y_role` is the input whose shape y takes; `replay_outputs` the
// number of outputs of a replay plugin.
template <typename F>
static void check_family(DecodeCreator<F>& creator, Fields replay, char const* name, int32_t replay_inputs,
                         int32_t replay_outputs) {
  CHECK(std::strcmp(creator.getPluginName(), name) == 0);
  CHECK(std::strcmp(creator.getPluginNamespace(), "trtllm_replayssm") == 0);
  CHECK(std::strcmp(creator.getPluginVersion(), "1") == 0);
  PluginFieldCollection const* names = creator.getFieldNames();
  CHECK(names->nbFields == static_cast<int32_t>(F::kFields.size()));
  for (int32_t i = 0; i < names->nbFields; ++i) {
    CHECK(std::strcmp(names->fields[i].name, F::kFields[i].name) == 0);
    CHECK(names->fields[i].type == PluginFieldType::kINT32 && names->fields[i].length == 1);
  }

  auto plugin = create(creator, replay);
  CHECK(plugin != nullptr);
  if (!plugin) return;
  auto const& io = plugin->io();
  const int32_t nout = plugin->getNbOutputs();
  CHECK(io.nb_inputs == replay_inputs && nout == replay_outputs);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kCORE) != nullptr);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD) != nullptr);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME) != nullptr);
  CHECK(plugin->getAliasedInput(0) == -1);
  CHECK(plugin->getAliasedInput(1) == io.input[F::STATE]);
  CHECK(plugin->getAliasedInput(nout - 1) == io.input[F::CURSOR]);
  CHECK(plugin->getAliasedInput(nout) == -1);

  PluginFieldCollection const* ser = plugin->getFieldsToSerialize();
  auto again = std::unique_ptr<DecodePlugin<F>>(
      static_cast<DecodePlugin<F>*>(creator.createPlugin("p", ser, TensorRTPhase::kRUNTIME)));
  CHECK(again && same(again->config(), plugin->config()));
  auto cloned = std::unique_ptr<DecodePlugin<F>>(static_cast<DecodePlugin<F>*>(plugin->clone()));
  CHECK(cloned && cloned.get() != plugin.get() && same(cloned->config(), plugin->config()));

  std::vector<DynamicPluginTensorDesc> descs(io.nb_inputs + nout);
  for (size_t i = 0; i < descs.size(); ++i) {
    descs[i].desc.type = plugin->expected_type(static_cast<int32_t>(i));
    descs[i].desc.format = TensorFormat::kLINEAR;
  }
  CHECK(descs[io.input[F::STATE]].desc.type == DataType::kFLOAT);
  CHECK(descs[io.input[F::SLOT_IDX]].desc.type == DataType::kINT32);
  CHECK(descs[io.input[F::CURSOR]].desc.type == DataType::kINT32);
  CHECK(descs[io.input[F::kOutputShapeRole]].desc.type == DataType::kBF16);
  for (int32_t pos = 0; pos < static_cast<int32_t>(descs.size()); ++pos)
    CHECK(plugin->supportsFormatCombination(pos, descs.data(), io.nb_inputs, nout));
  const int32_t act_pos = io.input[F::kOutputShapeRole];
  descs[act_pos].desc.type = DataType::kHALF;
  CHECK(!plugin->supportsFormatCombination(act_pos, descs.data(), io.nb_inputs, nout));
  descs[act_pos].desc.type = DataType::kBF16;
  descs[0].desc.format = TensorFormat::kCHW32;
  CHECK(!plugin->supportsFormatCombination(0, descs.data(), io.nb_inputs, nout));
  CHECK(!plugin->supportsFormatCombination(0, descs.data(), io.nb_inputs - 1, nout));

  std::vector<DataType> in_types(io.nb_inputs), out_types(nout);
  for (int32_t i = 0; i < io.nb_inputs; ++i) in_types[i] = plugin->expected_type(i);
  CHECK(plugin->getOutputDataTypes(out_types.data(), nout, in_types.data(), io.nb_inputs) == 0);
  CHECK(out_types[0] == DataType::kBF16 && out_types[1] == DataType::kFLOAT && out_types[nout - 1] == DataType::kINT32);

  std::vector<DimsExprs> in_shapes(io.nb_inputs), out_shapes(nout);
  static char tokens[64];
  for (int32_t i = 0; i < io.nb_inputs; ++i) {
    in_shapes[i].nbDims = 1;
    in_shapes[i].d[0] = reinterpret_cast<IDimensionExpr const*>(&tokens[i]);
  }
  struct NoBuilder : IExprBuilder {  // never consulted: every output repeats an input's expressions
    NoBuilder() { mImpl = nullptr; }
  } no_builder;
  CHECK(plugin->getOutputShapes(in_shapes.data(), io.nb_inputs, nullptr, 0, out_shapes.data(), nout, no_builder) == 0);
  CHECK(out_shapes[0].d[0] == in_shapes[io.input[F::kOutputShapeRole]].d[0]);
  CHECK(out_shapes[1].d[0] == in_shapes[io.input[F::STATE]].d[0]);
  CHECK(out_shapes[nout - 1].d[0] == in_shapes[io.input[F::CURSOR]].d[0]);

  // Refusals (each logs a message naming the field or value).
  CHECK(create(creator, replay.with("no_such_field", 1)) == nullptr);
  CHECK(create(creator, replay.with("buffer_len", 65)) == nullptr);
  CHECK(create(creator, replay.with("state_dtype", 3)) == nullptr);
  Fields missing = replay;
  missing.values.erase(missing.values.begin());
  CHECK(create(creator, missing) == nullptr);
}

// Prints the input names of a plugin configuration in the plugin's order (for the Python binding's check).
template <typename F>
static void print_inputs(DecodeCreator<F>& creator, Fields f, char const* label) {
  auto plugin = create(creator, f);
  if (!plugin) return;
  std::printf("%s:", label);
  for (int32_t pos = 0; pos < plugin->io().nb_inputs; ++pos) std::printf(" %s", F::kRoleNames[plugin->io().role_of(pos)]);
  std::printf("\n");
}

int main(int argc, char** argv) {
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = getCreators(n);
  CHECK(n == 2 && creators && creators[0] && creators[1]);
  if (n != 2) return 1;
  auto& mamba2 = *static_cast<DecodeCreator<Mamba2Decode>*>(creators[0]);
  auto& gdn = *static_cast<DecodeCreator<GdnDecode>*>(creators[1]);
  if (argc > 1 && std::strcmp(argv[1], "--inputs") == 0) {
    Fields m{{{"nheads", 8}, {"head_dim", 64}, {"dstate", 64}, {"ngroups", 2}}};
    Fields g{{{"num_k_heads", 2}, {"num_v_heads", 4}, {"head_k_dim", 64}, {"head_v_dim", 64}}};
    print_inputs(mamba2, m.with("mode", 1), "mamba2 replay z D dt_bias");
    print_inputs(mamba2, m.with("mode", 0).with("has_z", 0).with("has_D", 0).with("has_dt_bias", 0),
                 "mamba2 conventional");
    print_inputs(mamba2, m.with("mode", 1).with("has_D", 0), "mamba2 replay z dt_bias");
    print_inputs(gdn, g.with("mode", 1), "gdn replay");
    print_inputs(gdn, g.with("mode", 0), "gdn conventional");
    return 0;
  }

  // Mamba-2: x dt B C z A D dt_bias slot_idx state ring_x ring_B ring_dt cursor; y + 5 pool buffers.
  Fields super_replay{{{"nheads", 128}, {"head_dim", 64}, {"dstate", 128}, {"ngroups", 8}, {"buffer_len", 16},
                       {"mode", 1}, {"state_dtype", RSSM_DTYPE_FP32}, {"act_dtype", RSSM_DTYPE_BF16}}};
  check_family(mamba2, super_replay, "ReplaySSMMamba2Decode", 14, 6);
  Fields conv{{{"nheads", 8}, {"head_dim", 64}, {"dstate", 64}, {"ngroups", 2}, {"mode", 0}, {"has_z", 0},
               {"has_D", 0}, {"has_dt_bias", 0}}};
  auto conventional = create(mamba2, conv);
  CHECK(conventional && conventional->getNbOutputs() == 2 && conventional->io().nb_inputs == 7);
  CHECK(create(mamba2, super_replay.with("head_dim", 96)) == nullptr);  // not in the dispatch table
  CHECK(create(mamba2, super_replay.with("ngroups", 7)) == nullptr);    // does not divide nheads

  // GDN: q k v g beta slot_idx state ring_u ring_k ring_g cursor; y + 5 pool buffers.
  Fields qwen_replay{{{"num_k_heads", 16}, {"num_v_heads", 64}, {"head_k_dim", 128}, {"head_v_dim", 128},
                      {"buffer_len", 16}, {"mode", 1}, {"state_dtype", RSSM_DTYPE_FP32},
                      {"act_dtype", RSSM_DTYPE_BF16}}};
  check_family(gdn, qwen_replay, "ReplaySSMGdnDecode", 11, 6);
  auto gdn_conv = create(gdn, qwen_replay.with("mode", 0));
  CHECK(gdn_conv && gdn_conv->getNbOutputs() == 2 && gdn_conv->io().nb_inputs == 7);
  if (gdn_conv) {
    CHECK(gdn_conv->expected_type(gdn_conv->io().input[GdnDecode::G]) == DataType::kFLOAT);
    CHECK(gdn_conv->expected_type(gdn_conv->io().input[GdnDecode::Q]) == DataType::kBF16);
  }
  CHECK(create(gdn, qwen_replay.with("head_k_dim", 96)) == nullptr);   // not in the dispatch table
  CHECK(create(gdn, qwen_replay.with("num_v_heads", 40)) == nullptr);  // not a multiple of num_k_heads

  std::printf("%s (%d failed checks)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
