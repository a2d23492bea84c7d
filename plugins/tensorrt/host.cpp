// What the plugin library asks of the TensorRT library it is loaded into: its logger (setLoggerFinder), its plugin
// registry (registration when the library is merely dlopened, as Triton's TensorRT backend does), and which
// interface layout it speaks. One build serves TensorRT 10.x, 11.x and TensorRT-RTX: the plugin interfaces are
// the same in all three, but ILogger, ILoggerFinder and IPluginRegistry are not. TensorRT 11 and TensorRT-RTX
// derive the first two from IVersionedInterface and drop the registry's deprecated IPluginCreator methods, so their
// virtual tables differ from 10.x's; the library reads the line of the TensorRT library that hands it an object
// and calls it through the matching layout.
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "plugin.h"

#define RSSM_TRT_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);  // entry.cpp

namespace replayssm {
namespace trt {

// TensorRT 11 / TensorRT-RTX layouts (IVersionedInterface first). Declared, never implemented: objects of these
// lines are called through them. Outside the anonymous namespace: a type the compiler could see every derivation
// of (none) would have its calls devirtualised into a pure-virtual trap.
class VersionedLogger : public nvinfer1::IVersionedInterface {
 public:
  virtual void log(nvinfer1::ILogger::Severity severity, char const* msg) noexcept = 0;
};
class VersionedLoggerFinder : public nvinfer1::IVersionedInterface {
 public:
  virtual VersionedLogger* findLogger() = 0;
};
class VersionedPluginRegistry {
 public:
  virtual ~VersionedPluginRegistry() noexcept = 0;
  virtual void setErrorRecorder(nvinfer1::IErrorRecorder* recorder) noexcept = 0;
  virtual nvinfer1::IErrorRecorder* getErrorRecorder() const noexcept = 0;
  virtual bool isParentSearchEnabled() const = 0;
  virtual void setParentSearchEnabled(bool enabled) = 0;
  virtual void* loadLibrary(char const* path) noexcept = 0;
  virtual void deregisterLibrary(void* handle) noexcept = 0;
  virtual bool registerCreator(nvinfer1::IPluginCreatorInterface& creator, char const* ns) noexcept = 0;
  virtual nvinfer1::IPluginCreatorInterface* const* getAllCreators(int32_t* n) const noexcept = 0;
  virtual nvinfer1::IPluginCreatorInterface* getCreator(char const* name, char const* version,
                                                        char const* ns) noexcept = 0;
  virtual bool deregisterCreator(nvinfer1::IPluginCreatorInterface const& creator) noexcept = 0;
};

namespace {

// The 10.x layouts are nvinfer1's own when the library is built against 10.x headers (RSSM_TENSORRT=1 takes
// 10.14's): that build serves all three lines. Built against 11.x headers it serves 11.x and TensorRT-RTX, and
// leaves a 10.x host's logger and registry alone (errors then go to stderr, and registration needs getCreators).
constexpr bool kLegacyLayoutKnown = NV_TENSORRT_MAJOR < 11;

// Which layouts the TensorRT library holding `address` (its code or a virtual table of it) uses: 1 for TensorRT 11
// and TensorRT-RTX, 0 for TensorRT 10.x, -1 when `address` is not inside a TensorRT library.
int layout_of(void const* address) {
  Dl_info info{};
  if (!address || !dladdr(address, &info) || !info.dli_fname) return -1;
  if (std::strstr(info.dli_fname, "libtensorrt_rtx")) return 1;
  void* lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return -1;
  // getInferLibMajorVersion from 10.x on; getInferLibVersion (major * 10000 + ...) in every 10.x
  auto major = reinterpret_cast<int32_t (*)()>(dlsym(lib, "getInferLibMajorVersion"));
  auto version = reinterpret_cast<int32_t (*)()>(dlsym(lib, "getInferLibVersion"));
  const int32_t line = major ? major() : version ? version() / 10000 : -1;
  const int layout = line < 0 ? -1 : line >= 11 ? 1 : 0;
  dlclose(lib);
  return layout;
}

void const* vtable_of(void const* object) { return object ? *static_cast<void const* const*>(object) : nullptr; }

nvinfer1::ILoggerFinder* g_finder = nullptr;
bool g_finder_versioned = false;

// The registry of the TensorRT library already in the process (getPluginRegistry, looked up in every loaded object:
// Python and Triton load TensorRT with RTLD_LOCAL, where dlsym(RTLD_DEFAULT) does not see it).
struct HostRegistry {
  void* registry = nullptr;
  bool versioned = false;
};

int find_registry(dl_phdr_info* info, size_t, void* out) {
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0;
  void* lib = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return 0;
  auto get = reinterpret_cast<void* (*)()>(dlsym(lib, "getPluginRegistry"));
  if (get) {
    auto* host = static_cast<HostRegistry*>(out);
    host->registry = get();
    host->versioned = layout_of(reinterpret_cast<void const*>(get)) == 1;
    if (!host->versioned && !kLegacyLayoutKnown) host->registry = nullptr;
  }
  dlclose(lib);
  return get ? 1 : 0;
}

bool register_creator(HostRegistry const& host, nvinfer1::IPluginCreatorInterface& creator) {
  if (host.versioned)
    return static_cast<VersionedPluginRegistry*>(host.registry)->registerCreator(creator, kPluginNamespace);
  return static_cast<nvinfer1::IPluginRegistry*>(host.registry)->registerCreator(creator, kPluginNamespace);
}

void deregister_creator(HostRegistry const& host, nvinfer1::IPluginCreatorInterface const& creator) {
  if (host.versioned)
    static_cast<VersionedPluginRegistry*>(host.registry)->deregisterCreator(creator);
  else
    static_cast<nvinfer1::IPluginRegistry*>(host.registry)->deregisterCreator(creator);
}

// The creators this library registered by itself, and where.
std::mutex g_self_mutex;
HostRegistry g_self_host;
std::vector<nvinfer1::IPluginCreatorInterface*> g_self_registered;
thread_local bool t_registering_on_load = false;  // its own getCreators call is not a host's

// Runs when the library is loaded: registers every creator with the registry of the TensorRT library already in
// the process (none: nothing to do, e.g. the test drivers, or a host that calls getCreators itself).
void register_on_load() {
  try {
    HostRegistry host;
    dl_iterate_phdr(find_registry, &host);
    if (!host.registry) return;
    t_registering_on_load = true;
    int32_t n = 0;
    nvinfer1::IPluginCreatorInterface* const* creators = getCreators(n);
    t_registering_on_load = false;
    std::lock_guard<std::mutex> lock(g_self_mutex);
    g_self_host = host;
    for (int32_t i = 0; i < n; ++i)
      if (register_creator(host, *creators[i])) g_self_registered.push_back(creators[i]);
  } catch (...) {
    t_registering_on_load = false;
  }
}

// Dynamic initialisation runs in order within a file: after the globals above.
struct RegisterOnLoad {
  RegisterOnLoad() { register_on_load(); }
} const g_register_on_load;

}  // namespace

void on_get_creators() noexcept {
  // A host calling getCreators registers the creators itself (IPluginRegistry::loadLibrary, trtexec): withdraw the
  // registrations made on load so that each creator is registered once.
  if (t_registering_on_load) return;
  std::lock_guard<std::mutex> lock(g_self_mutex);
  for (auto* creator : g_self_registered) deregister_creator(g_self_host, *creator);
  g_self_registered.clear();
}

void log_error(std::string const& message) noexcept {
  if (g_finder && g_finder_versioned) {
    if (VersionedLogger* logger = reinterpret_cast<VersionedLoggerFinder*>(g_finder)->findLogger()) {
      logger->log(nvinfer1::ILogger::Severity::kERROR, message.c_str());
      return;
    }
  } else if (g_finder) {
    if (nvinfer1::ILogger* logger = g_finder->findLogger()) {
      logger->log(nvinfer1::ILogger::Severity::kERROR, message.c_str());
      return;
    }
  }
  std::fprintf(stderr, "[trtllm_replayssm] %s\n", message.c_str());
}

}  // namespace trt
}  // namespace replayssm

RSSM_TRT_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder) {
  using namespace replayssm::trt;
  // The finder's virtual table names its library; when it lives elsewhere (a language binding), the TensorRT
  // library in the process decides.
  int layout = layout_of(vtable_of(finder));
  if (layout < 0) {
    HostRegistry host;
    dl_iterate_phdr(find_registry, &host);
    layout = host.versioned ? 1 : 0;
  }
  g_finder_versioned = layout == 1;
  g_finder = layout == 1 || kLegacyLayoutKnown ? finder : nullptr;
}

// The SM architectures the library holds kernels for (CMake's CUDA architectures, e.g. "89;90"): an engine for
// another target would fail at its first launch, so the engine builder refuses it before building.
RSSM_TRT_EXPORT char const* rssm_trt_cuda_archs() { return RSSM_TRT_CUDA_ARCHS; }
