// Thread-local error message behind rssm_last_error, and the status helpers every C ABI function uses.
#pragma once
#include "replayssm/common/types.h"

namespace replayssm {

// Records a printf-style message for rssm_last_error and returns `status`.
rssm_status fail(rssm_status status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void clear_error();

inline bool dtype_supported(int dtype) {
  return dtype == RSSM_DTYPE_FP32 || dtype == RSSM_DTYPE_FP16 || dtype == RSSM_DTYPE_BF16;
}

}  // namespace replayssm
