// Library-wide C ABI functions: version, status names, last error.
#include <cstdarg>
#include <cstdio>

#include "error.h"
#include "replayssm.h"

namespace replayssm {

static thread_local char g_last_error[512] = "";

rssm_status fail(rssm_status status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(g_last_error, sizeof(g_last_error), fmt, args);
  va_end(args);
  return status;
}

void clear_error() { g_last_error[0] = '\0'; }

}  // namespace replayssm

extern "C" int32_t rssm_version(void) {
  return RSSM_VERSION_MAJOR * 10000 + RSSM_VERSION_MINOR * 100 + RSSM_VERSION_PATCH;
}

extern "C" const char* rssm_status_string(rssm_status status) {
  switch (status) {
    case RSSM_OK: return "RSSM_OK";
    case RSSM_ERR_INVALID_ARGUMENT: return "RSSM_ERR_INVALID_ARGUMENT";
    case RSSM_ERR_CUDA: return "RSSM_ERR_CUDA";
    case RSSM_ERR_ABI_MISMATCH: return "RSSM_ERR_ABI_MISMATCH";
  }
  return "RSSM_UNKNOWN_STATUS";
}

extern "C" const char* rssm_last_error(void) { return replayssm::g_last_error; }
