// GPU driver of the TensorRT plugins without TensorRT's runtime: dlopens the plugin library, takes a creator
// through getCreators, creates the plugin from fields in the build phase and again, from its serialized fields,
// in the runtime phase, and runs enqueue with real tensor descriptors on device buffers for several steps.
// tests/test_tensorrt_plugin_gpu.py writes the inputs and compares the outputs with the Python ops.
//
//   replayssm_trt_gpu_test LIBRARY DIR
// DIR/manifest.txt (whitespace separated):
//   plugin NAME
//   field NAME VALUE              (int32 fields, any number)
//   steps N
//   input NAME DTYPE NDIMS D0 D1 ... once|step   (in the plugin's input order; DTYPE 0 fp32 1 fp16 2 bf16 3 int32)
// Inputs marked `once` are read from DIR/NAME.bin, `step` ones from DIR/NAME.STEP.bin. Writes DIR/y.STEP.bin
// for every step and DIR/NAME.final.bin for every input the plugin updates in place. Steps alternate between the
// build-phase and the runtime-phase plugin objects.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "NvInferRuntime.h"

using namespace nvinfer1;

namespace {

struct Tensor {
  std::string name;
  int32_t dtype = 0;
  Dims dims{};
  bool per_step = false;
  size_t bytes = 0;
  void* device = nullptr;
};

DataType trt_type(int32_t code) {
  switch (code) {
    case 1: return DataType::kHALF;
    case 2: return DataType::kBF16;
    case 3: return DataType::kINT32;
    default: return DataType::kFLOAT;
  }
}

size_t element_bytes(int32_t code) { return code == 1 || code == 2 ? 2 : 4; }

bool read_file(std::string const& path, std::vector<char>& data, size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  data.resize(bytes);
  return f && f.read(data.data(), static_cast<std::streamsize>(bytes)) && static_cast<size_t>(f.gcount()) == bytes;
}

bool write_file(std::string const& path, std::vector<char> const& data) {
  std::ofstream f(path, std::ios::binary);
  return f && f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

int fail(std::string const& message) {
  std::fprintf(stderr, "replayssm_trt_gpu_test: %s\n", message.c_str());
  return 1;
}

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) return fail(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: replayssm_trt_gpu_test LIBRARY DIR");
  const std::string dir = argv[2];
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fail(std::string("dlopen: ") + dlerror());
  using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
  auto get_creators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"));
  if (!get_creators) return fail("getCreators is not exported");

  // ---- manifest
  std::ifstream manifest(dir + "/manifest.txt");
  if (!manifest) return fail("no manifest.txt in " + dir);
  std::string plugin_name, key;
  std::vector<std::pair<std::string, int32_t>> field_values;
  std::vector<Tensor> inputs;
  int steps = 0;
  while (manifest >> key) {
    if (key == "plugin") {
      manifest >> plugin_name;
    } else if (key == "field") {
      std::string name;
      int32_t value;
      manifest >> name >> value;
      field_values.emplace_back(name, value);
    } else if (key == "steps") {
      manifest >> steps;
    } else if (key == "input") {
      Tensor t;
      std::string when;
      manifest >> t.name >> t.dtype >> t.dims.nbDims;
      size_t n = 1;
      for (int32_t d = 0; d < t.dims.nbDims; ++d) {
        manifest >> t.dims.d[d];
        n *= static_cast<size_t>(t.dims.d[d]);
      }
      manifest >> when;
      t.per_step = when == "step";
      t.bytes = n * element_bytes(t.dtype);
      inputs.push_back(t);
    } else {
      return fail("unknown manifest key " + key);
    }
  }

  // ---- creator and plugins (build phase, then runtime phase from the serialized fields)
  int32_t nb = 0;
  IPluginCreatorInterface* const* creators = get_creators(nb);
  IPluginCreatorV3One* creator = nullptr;
  for (int32_t i = 0; i < nb; ++i) {
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    if (plugin_name == c->getPluginName()) creator = c;
  }
  if (!creator) return fail("no creator named " + plugin_name);
  std::vector<PluginField> fields;
  for (auto& fv : field_values) fields.emplace_back(fv.first.c_str(), &fv.second, PluginFieldType::kINT32, 1);
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  std::unique_ptr<IPluginV3> build(creator->createPlugin("gpu_test", &fc, TensorRTPhase::kBUILD));
  if (!build) return fail("createPlugin (build phase) refused the fields");
  auto* build_core = static_cast<IPluginV3OneBuildV2*>(build->getCapabilityInterface(PluginCapabilityType::kBUILD));
  auto* build_rt = static_cast<IPluginV3OneRuntime*>(build->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  std::unique_ptr<IPluginV3> runtime(
      creator->createPlugin("gpu_test", build_rt->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
  if (!runtime) return fail("createPlugin (runtime phase) refused the serialized fields");
  auto* runtime_rt =
      static_cast<IPluginV3OneRuntime*>(runtime->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  const int32_t nb_in = static_cast<int32_t>(inputs.size());
  const int32_t nb_out = build_core->getNbOutputs();

  // ---- descriptors and device buffers; outputs 1.. share their aliased input's buffer
  std::vector<PluginTensorDesc> in_desc(nb_in), out_desc(nb_out);
  for (int32_t i = 0; i < nb_in; ++i) {
    in_desc[i].dims = inputs[i].dims;
    in_desc[i].type = trt_type(inputs[i].dtype);
    in_desc[i].format = TensorFormat::kLINEAR;
    in_desc[i].scale = 1.f;
    CUDA_OK(cudaMalloc(&inputs[i].device, inputs[i].bytes));
  }
  // y has the shape and type of x (Mamba-2) or v (GDN).
  Tensor y;
  for (Tensor const& t : inputs)
    if (t.name == "x" || t.name == "v") y = Tensor{"y", t.dtype, t.dims, true, t.bytes, nullptr};
  if (!y.bytes) return fail("no input named x or v");
  CUDA_OK(cudaMalloc(&y.device, y.bytes));
  std::vector<void const*> in_ptrs(nb_in);
  std::vector<void*> out_ptrs(nb_out);
  for (int32_t i = 0; i < nb_in; ++i) in_ptrs[i] = inputs[i].device;
  out_ptrs[0] = y.device;
  out_desc[0] = in_desc[0];
  out_desc[0].dims = y.dims;
  out_desc[0].type = trt_type(y.dtype);
  for (int32_t o = 1; o < nb_out; ++o) {
    const int32_t a = build_core->getAliasedInput(o);
    if (a < 0 || a >= nb_in) return fail("output " + std::to_string(o) + " has no aliased input");
    out_ptrs[o] = inputs[a].device;
    out_desc[o] = in_desc[a];
  }
  for (IPluginV3OneRuntime* rt : {build_rt, runtime_rt})
    if (rt->onShapeChange(in_desc.data(), nb_in, out_desc.data(), nb_out) != 0) return fail("onShapeChange refused");

  std::vector<char> host;
  for (Tensor& t : inputs) {
    if (t.per_step) continue;
    if (!read_file(dir + "/" + t.name + ".bin", host, t.bytes)) return fail("cannot read " + t.name + ".bin");
    CUDA_OK(cudaMemcpy(t.device, host.data(), t.bytes, cudaMemcpyHostToDevice));
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (int step = 0; step < steps; ++step) {
    for (Tensor& t : inputs) {
      if (!t.per_step) continue;
      const std::string path = dir + "/" + t.name + "." + std::to_string(step) + ".bin";
      if (!read_file(path, host, t.bytes)) return fail("cannot read " + path);
      CUDA_OK(cudaMemcpy(t.device, host.data(), t.bytes, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaMemset(y.device, 0xff, y.bytes));  // poison: NaN patterns for every float type
    IPluginV3OneRuntime* rt = step % 2 ? runtime_rt : build_rt;
    if (rt->enqueue(in_desc.data(), out_desc.data(), in_ptrs.data(), out_ptrs.data(), nullptr, stream) != 0)
      return fail("enqueue failed at step " + std::to_string(step));
    CUDA_OK(cudaStreamSynchronize(stream));
    host.resize(y.bytes);
    CUDA_OK(cudaMemcpy(host.data(), y.device, y.bytes, cudaMemcpyDeviceToHost));
    if (!write_file(dir + "/y." + std::to_string(step) + ".bin", host)) return fail("cannot write y");
  }
  for (int32_t o = 1; o < nb_out; ++o) {
    Tensor const& t = inputs[build_core->getAliasedInput(o)];
    host.resize(t.bytes);
    CUDA_OK(cudaMemcpy(host.data(), t.device, t.bytes, cudaMemcpyDeviceToHost));
    if (!write_file(dir + "/" + t.name + ".final.bin", host)) return fail("cannot write " + t.name);
  }
  std::printf("OK %d steps\n", steps);
  return 0;
}
