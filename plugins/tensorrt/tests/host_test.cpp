// Host test of the TensorRT plugin library, runnable without TensorRT's runtime or a GPU: creators and fields,
// serialization round trips, clone, output count/types/shapes, aliasing, format checks, refusals.
// Prints one line per failed check; exits non-zero when any fails.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "mamba2_decode_plugin.h"

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);

using namespace nvinfer1;
using replayssm::trt::Mamba2DecodeConfig;
using replayssm::trt::Mamba2DecodeCreator;
using replayssm::trt::Mamba2DecodeIO;
using replayssm::trt::Mamba2DecodePlugin;

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
};

static Fields super_replay() {
  return Fields{{{"nheads", 128}, {"head_dim", 64}, {"dstate", 128}, {"ngroups", 8}, {"buffer_len", 16}, {"mode", 1},
                 {"state_dtype", RSSM_DTYPE_FP32}, {"act_dtype", RSSM_DTYPE_BF16}}};
}

static std::unique_ptr<Mamba2DecodePlugin> create(Mamba2DecodeCreator& creator, Fields f) {
  return std::unique_ptr<Mamba2DecodePlugin>(
      static_cast<Mamba2DecodePlugin*>(creator.createPlugin("p", f.get(), TensorRTPhase::kBUILD)));
}

static bool same(Mamba2DecodeConfig const& a, Mamba2DecodeConfig const& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

int main() {
  int32_t n = 0;
  IPluginCreatorInterface* const* creators = getCreators(n);
  CHECK(n == 1 && creators && creators[0]);
  auto& creator = *static_cast<Mamba2DecodeCreator*>(creators[0]);
  CHECK(std::strcmp(creator.getPluginName(), "ReplaySSMMamba2Decode") == 0);
  CHECK(std::strcmp(creator.getPluginNamespace(), "trtllm_replayssm") == 0);

  // Field names: exactly the table, all int32 scalars.
  PluginFieldCollection const* names = creator.getFieldNames();
  CHECK(names->nbFields == static_cast<int32_t>(replayssm::trt::kMamba2DecodeFields.size()));
  for (int32_t i = 0; i < names->nbFields; ++i) {
    CHECK(std::strcmp(names->fields[i].name, replayssm::trt::kMamba2DecodeFields[i].name) == 0);
    CHECK(names->fields[i].type == PluginFieldType::kINT32 && names->fields[i].length == 1);
  }

  // A replay plugin: outputs y + 5 pool buffers updated in place.
  auto plugin = create(creator, super_replay());
  CHECK(plugin != nullptr);
  if (!plugin) return 1;
  CHECK(plugin->getNbOutputs() == 6);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kCORE) != nullptr);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD) != nullptr);
  CHECK(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME) != nullptr);
  Mamba2DecodeIO io = Mamba2DecodeIO::make(plugin->config());
  CHECK(io.nb_inputs == 14);  // x dt B C z A D dt_bias slot_idx state ring_x ring_B ring_dt cursor
  CHECK(plugin->getAliasedInput(0) == -1);
  CHECK(plugin->getAliasedInput(1) == io.input[Mamba2DecodeIO::STATE]);
  CHECK(plugin->getAliasedInput(5) == io.input[Mamba2DecodeIO::CURSOR]);
  CHECK(plugin->getAliasedInput(6) == -1);

  // Serialization round trip and clone keep the configuration.
  PluginFieldCollection const* ser = plugin->getFieldsToSerialize();
  auto again = std::unique_ptr<Mamba2DecodePlugin>(
      static_cast<Mamba2DecodePlugin*>(creator.createPlugin("p", ser, TensorRTPhase::kRUNTIME)));
  CHECK(again && same(again->config(), plugin->config()));
  auto cloned = std::unique_ptr<Mamba2DecodePlugin>(static_cast<Mamba2DecodePlugin*>(plugin->clone()));
  CHECK(cloned && cloned.get() != plugin.get() && same(cloned->config(), plugin->config()));

  // Types: inputs as the kernels read them; outputs follow y = activation dtype and the aliased inputs.
  std::vector<DynamicPluginTensorDesc> descs(io.nb_inputs + 6);
  for (size_t i = 0; i < descs.size(); ++i) {
    descs[i].desc.type = plugin->expected_type(static_cast<int32_t>(i));
    descs[i].desc.format = TensorFormat::kLINEAR;
  }
  CHECK(descs[io.input[Mamba2DecodeIO::X]].desc.type == DataType::kBF16);
  CHECK(descs[io.input[Mamba2DecodeIO::STATE]].desc.type == DataType::kFLOAT);
  CHECK(descs[io.input[Mamba2DecodeIO::SLOT_IDX]].desc.type == DataType::kINT32);
  for (int32_t pos = 0; pos < static_cast<int32_t>(descs.size()); ++pos)
    CHECK(plugin->supportsFormatCombination(pos, descs.data(), io.nb_inputs, 6));
  descs[io.input[Mamba2DecodeIO::X]].desc.type = DataType::kHALF;
  CHECK(!plugin->supportsFormatCombination(io.input[Mamba2DecodeIO::X], descs.data(), io.nb_inputs, 6));
  descs[io.input[Mamba2DecodeIO::X]].desc.type = DataType::kBF16;
  descs[0].desc.format = TensorFormat::kCHW32;
  CHECK(!plugin->supportsFormatCombination(0, descs.data(), io.nb_inputs, 6));
  CHECK(!plugin->supportsFormatCombination(0, descs.data(), io.nb_inputs - 1, 6));

  std::vector<DataType> in_types(io.nb_inputs), out_types(6);
  for (int32_t i = 0; i < io.nb_inputs; ++i) in_types[i] = plugin->expected_type(i);
  CHECK(plugin->getOutputDataTypes(out_types.data(), 6, in_types.data(), io.nb_inputs) == 0);
  CHECK(out_types[0] == DataType::kBF16 && out_types[1] == DataType::kFLOAT && out_types[5] == DataType::kINT32);

  // Shapes: y takes x's expressions, each aliased output its input's (the builder is not consulted).
  std::vector<DimsExprs> in_shapes(io.nb_inputs), out_shapes(6);
  static char tokens[64];
  for (int32_t i = 0; i < io.nb_inputs; ++i) {
    in_shapes[i].nbDims = 1;
    in_shapes[i].d[0] = reinterpret_cast<IDimensionExpr const*>(&tokens[i]);
  }
  struct NoBuilder : IExprBuilder {  // never consulted: every output repeats an input's expressions
    NoBuilder() { mImpl = nullptr; }
  } no_builder;
  CHECK(plugin->getOutputShapes(in_shapes.data(), io.nb_inputs, nullptr, 0, out_shapes.data(), 6, no_builder) == 0);
  CHECK(out_shapes[0].d[0] == in_shapes[io.input[Mamba2DecodeIO::X]].d[0]);
  CHECK(out_shapes[1].d[0] == in_shapes[io.input[Mamba2DecodeIO::STATE]].d[0]);
  CHECK(out_shapes[4].d[0] == in_shapes[io.input[Mamba2DecodeIO::RING_DT]].d[0]);

  // Conventional mode without optional inputs: y + state only.
  Fields conv{{{"nheads", 8}, {"head_dim", 64}, {"dstate", 64}, {"ngroups", 2}, {"mode", 0}, {"has_z", 0},
               {"has_D", 0}, {"has_dt_bias", 0}}};
  auto conventional = create(creator, conv);
  CHECK(conventional && conventional->getNbOutputs() == 2);
  CHECK(conventional && Mamba2DecodeIO::make(conventional->config()).nb_inputs == 7);

  // Refusals (each logs a message naming the field or value).
  Fields bad_head = super_replay();
  bad_head.values[1].second = 96;
  CHECK(create(creator, bad_head) == nullptr);
  Fields unknown = super_replay();
  unknown.values.push_back({"no_such_field", 1});
  CHECK(create(creator, unknown) == nullptr);
  Fields missing{{{"head_dim", 64}, {"dstate", 128}, {"ngroups", 8}}};
  CHECK(create(creator, missing) == nullptr);
  Fields range = super_replay();
  range.values[4].second = 65;  // buffer_len
  CHECK(create(creator, range) == nullptr);

  std::printf("%s (%d failed checks)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
