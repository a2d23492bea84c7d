// GPU driver of the TensorRT plugins without TensorRT's runtime: dlopens the plugin library, takes the creators
// through getCreators, creates each plugin from fields in the build phase and again, from its serialized fields,
// in the runtime phase (attached to a context as an engine would), and runs enqueue with real tensor descriptors
// on device buffers, plugins in any sequence over shared buffers (a verify then a commit, step after step).
// tests/test_tensorrt_plugin_gpu.py writes the inputs and compares the outputs with the Python ops.
//
//   replayssm_trt_gpu_test LIBRARY DIR
// DIR/manifest.txt, one directive per line:
//   tensor NAME DTYPE NDIMS D0 D1 ...   a device buffer (DTYPE 0 fp32 1 fp16 2 bf16 3 int32); filled from
//                                       DIR/NAME.bin when that file exists, else with 0xff bytes
//   plugin LABEL NAME                   a plugin (creator NAME); the field / input / output lines below are its
//   field NAME VALUE                    int32 fields, any number
//   input TENSOR                        its inputs, in the plugin's order
//   output TENSOR                       the tensor that receives its y (plugins that have one)
//   run LABEL                           one enqueue of plugin LABEL; runs are numbered 0, 1, ... in file order
// Before run i every tensor NAME with a file DIR/in.i.NAME.bin is loaded from it; the y tensor is filled with 0xff
// (NaN in every float type), and written to DIR/out.i.NAME.bin after the run. After the last run every tensor is
// written to DIR/final.NAME.bin. A plugin's runs alternate between its build-phase and runtime-phase objects, with
// the workspace getWorkspaceSize asks for at the declared shapes.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "NvInferRuntime.h"

using namespace nvinfer1;

namespace {

struct Tensor {
  int32_t dtype = 0;
  Dims dims{};
  size_t bytes = 0;
  void* device = nullptr;
};

struct PluginRun {
  std::string name;
  std::vector<std::pair<std::string, int32_t>> fields;
  std::vector<std::string> inputs;
  std::string output;
  std::unique_ptr<IPluginV3> build, runtime, attached;
  IPluginV3OneRuntime* phase[2] = {nullptr, nullptr};  // build-phase object, runtime-phase object (attached)
  int32_t nb_outputs = 0;
  std::vector<int32_t> aliased;  // input aliased by each output (-1: y)
  int runs = 0;
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

bool exists(std::string const& path) { return static_cast<bool>(std::ifstream(path)); }

bool write_file(std::string const& path, std::vector<char> const& data) {
  std::ofstream f(path, std::ios::binary);
  return f && f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

int fail(std::string const& message) {
  std::fprintf(stderr, "replayssm_trt_gpu_test: %s\n", message.c_str());
  return 1;
}

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) return fail(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

IPluginCreatorV3One* find_creator(IPluginCreatorInterface* const* creators, int32_t nb, std::string const& name) {
  for (int32_t i = 0; i < nb; ++i) {
    auto* c = static_cast<IPluginCreatorV3One*>(creators[i]);
    if (name == c->getPluginName()) return c;
  }
  return nullptr;
}

// Creates the build-phase plugin from the fields and the runtime-phase one from its serialized fields, attached
// to a context as an engine's execution context would; returns an error message or "".
std::string create(PluginRun& p, IPluginCreatorV3One* creator) {
  std::vector<PluginField> fields;
  for (auto& fv : p.fields) fields.emplace_back(fv.first.c_str(), &fv.second, PluginFieldType::kINT32, 1);
  PluginFieldCollection fc{static_cast<int32_t>(fields.size()), fields.data()};
  p.build.reset(creator->createPlugin("gpu_test", &fc, TensorRTPhase::kBUILD));
  if (!p.build) return "createPlugin (build phase) refused the fields of " + p.name;
  auto* build_rt = static_cast<IPluginV3OneRuntime*>(p.build->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  p.runtime.reset(creator->createPlugin("gpu_test", build_rt->getFieldsToSerialize(), TensorRTPhase::kRUNTIME));
  if (!p.runtime) return "createPlugin (runtime phase) refused the serialized fields of " + p.name;
  auto* runtime_rt =
      static_cast<IPluginV3OneRuntime*>(p.runtime->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  p.attached.reset(runtime_rt->attachToContext(nullptr));
  if (!p.attached) return "attachToContext failed for " + p.name;
  p.phase[0] = build_rt;
  p.phase[1] = static_cast<IPluginV3OneRuntime*>(p.attached->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
  auto* build = static_cast<IPluginV3OneBuildV2*>(p.build->getCapabilityInterface(PluginCapabilityType::kBUILD));
  p.nb_outputs = build->getNbOutputs();
  for (int32_t o = 0; o < p.nb_outputs; ++o) {
    const int32_t a = build->getAliasedInput(o);
    if (a >= static_cast<int32_t>(p.inputs.size())) return p.name + ": output aliases a missing input";
    p.aliased.push_back(a);
  }
  const bool has_y = !p.aliased.empty() && p.aliased[0] < 0;
  if (has_y != !p.output.empty()) return p.name + ": the manifest's output line does not match the plugin's y";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage: replayssm_trt_gpu_test LIBRARY DIR");
  const std::string dir = argv[2];
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fail(std::string("dlopen: ") + dlerror());
  using GetCreators = IPluginCreatorInterface* const* (*)(int32_t&);
  auto get_creators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"));
  if (!get_creators) return fail("getCreators is not exported");
  int32_t nb_creators = 0;
  IPluginCreatorInterface* const* creators = get_creators(nb_creators);

  // ---- manifest
  std::ifstream manifest(dir + "/manifest.txt");
  if (!manifest) return fail("no manifest.txt in " + dir);
  std::map<std::string, Tensor> tensors;
  std::map<std::string, PluginRun> plugins;
  std::vector<std::string> runs;
  PluginRun* current = nullptr;
  std::string key;
  while (manifest >> key) {
    if (key == "tensor") {
      std::string name;
      Tensor t;
      manifest >> name >> t.dtype >> t.dims.nbDims;
      size_t n = 1;
      for (int32_t d = 0; d < t.dims.nbDims; ++d) {
        manifest >> t.dims.d[d];
        n *= static_cast<size_t>(t.dims.d[d]);
      }
      t.bytes = n * element_bytes(t.dtype);
      tensors[name] = t;
    } else if (key == "plugin") {
      std::string label;
      manifest >> label;
      current = &plugins[label];
      manifest >> current->name;
    } else if (key == "field" && current) {
      std::string name;
      int32_t value;
      manifest >> name >> value;
      current->fields.emplace_back(name, value);
    } else if (key == "input" && current) {
      std::string name;
      manifest >> name;
      if (!tensors.count(name)) return fail("input " + name + " is not a declared tensor");
      current->inputs.push_back(name);
    } else if (key == "output" && current) {
      manifest >> current->output;
      if (!tensors.count(current->output)) return fail("output " + current->output + " is not a declared tensor");
    } else if (key == "run") {
      std::string label;
      manifest >> label;
      if (!plugins.count(label)) return fail("run of an undeclared plugin " + label);
      runs.push_back(label);
    } else {
      return fail("unexpected manifest key " + key);
    }
  }

  // ---- device buffers
  std::vector<char> host;
  for (auto& [name, t] : tensors) {
    CUDA_OK(cudaMalloc(&t.device, t.bytes));
    if (exists(dir + "/" + name + ".bin")) {
      if (!read_file(dir + "/" + name + ".bin", host, t.bytes)) return fail("cannot read " + name + ".bin");
      CUDA_OK(cudaMemcpy(t.device, host.data(), t.bytes, cudaMemcpyHostToDevice));
    } else {
      CUDA_OK(cudaMemset(t.device, 0xff, t.bytes));
    }
  }
  auto desc_of = [&](std::string const& name) {
    PluginTensorDesc d{};
    d.dims = tensors[name].dims;
    d.type = trt_type(tensors[name].dtype);
    d.format = TensorFormat::kLINEAR;
    d.scale = 1.f;
    return d;
  };

  // ---- plugins: both phases, descriptors, shape checks
  struct Bound {
    std::vector<PluginTensorDesc> in_desc, out_desc;
    std::vector<void const*> in_ptrs;
    std::vector<void*> out_ptrs;
    void* workspace = nullptr;  // getWorkspaceSize at the bound shapes (the prefill plugins' slot indices)
  };
  std::map<std::string, Bound> bound;
  for (auto& [label, p] : plugins) {
    IPluginCreatorV3One* creator = find_creator(creators, nb_creators, p.name);
    if (!creator) return fail("no creator named " + p.name);
    const std::string error = create(p, creator);
    if (!error.empty()) return fail(error);
    Bound& b = bound[label];
    for (std::string const& name : p.inputs) {
      b.in_desc.push_back(desc_of(name));
      b.in_ptrs.push_back(tensors[name].device);
    }
    for (int32_t o = 0; o < p.nb_outputs; ++o) {  // aliased outputs share their input's buffer
      std::string const& name = p.aliased[o] < 0 ? p.output : p.inputs[p.aliased[o]];
      b.out_desc.push_back(desc_of(name));
      b.out_ptrs.push_back(tensors[name].device);
    }
    for (IPluginV3OneRuntime* rt : p.phase)
      if (rt->onShapeChange(b.in_desc.data(), static_cast<int32_t>(p.inputs.size()), b.out_desc.data(),
                            p.nb_outputs) != 0)
        return fail("onShapeChange refused the shapes of " + label);
    std::vector<DynamicPluginTensorDesc> dyn_in(b.in_desc.size()), dyn_out(b.out_desc.size());
    for (size_t i = 0; i < dyn_in.size(); ++i) {
      dyn_in[i].desc = b.in_desc[i];
      dyn_in[i].min = dyn_in[i].opt = dyn_in[i].max = b.in_desc[i].dims;
    }
    for (size_t o = 0; o < dyn_out.size(); ++o) dyn_out[o].desc = b.out_desc[o];
    auto* build = static_cast<IPluginV3OneBuild*>(p.build->getCapabilityInterface(PluginCapabilityType::kBUILD));
    const size_t workspace = build->getWorkspaceSize(dyn_in.data(), static_cast<int32_t>(dyn_in.size()),
                                                     dyn_out.data(), static_cast<int32_t>(dyn_out.size()));
    if (workspace) CUDA_OK(cudaMalloc(&b.workspace, workspace));
  }

  // ---- runs
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  for (size_t i = 0; i < runs.size(); ++i) {
    PluginRun& p = plugins[runs[i]];
    Bound& b = bound[runs[i]];
    for (auto& [name, t] : tensors) {
      const std::string path = dir + "/in." + std::to_string(i) + "." + name + ".bin";
      if (!exists(path)) continue;
      if (!read_file(path, host, t.bytes)) return fail("cannot read " + path);
      CUDA_OK(cudaMemcpy(t.device, host.data(), t.bytes, cudaMemcpyHostToDevice));
    }
    if (!p.output.empty()) CUDA_OK(cudaMemset(tensors[p.output].device, 0xff, tensors[p.output].bytes));
    IPluginV3OneRuntime* rt = p.phase[p.runs++ % 2];
    if (rt->enqueue(b.in_desc.data(), b.out_desc.data(), b.in_ptrs.data(), b.out_ptrs.data(), b.workspace, stream) != 0)
      return fail("enqueue of " + runs[i] + " failed at run " + std::to_string(i));
    CUDA_OK(cudaStreamSynchronize(stream));
    if (p.output.empty()) continue;
    Tensor const& y = tensors[p.output];
    host.resize(y.bytes);
    CUDA_OK(cudaMemcpy(host.data(), y.device, y.bytes, cudaMemcpyDeviceToHost));
    if (!write_file(dir + "/out." + std::to_string(i) + "." + p.output + ".bin", host))
      return fail("cannot write " + p.output);
  }
  for (auto& [name, t] : tensors) {
    host.resize(t.bytes);
    CUDA_OK(cudaMemcpy(host.data(), t.device, t.bytes, cudaMemcpyDeviceToHost));
    if (!write_file(dir + "/final." + name + ".bin", host)) return fail("cannot write final." + name);
  }
  std::printf("OK %zu runs\n", runs.size());
  return 0;
}
