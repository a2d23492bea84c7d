// Framework-free enums shared by the kernels, the C ABI and the adapters.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Element types of tensors the kernels read or write. Values are part of the C ABI: append only.
typedef enum rssm_dtype {
  RSSM_DTYPE_FP32 = 0,
  RSSM_DTYPE_FP16 = 1,
  RSSM_DTYPE_BF16 = 2,
} rssm_dtype;

// Status codes returned by every C ABI function. Values are part of the C ABI: append only.
typedef enum rssm_status {
  RSSM_OK = 0,
  RSSM_ERR_INVALID_ARGUMENT = 1,  // a size, dtype, pointer or stride the kernels do not support
  RSSM_ERR_CUDA = 2,              // a CUDA runtime call failed (launch error)
  RSSM_ERR_ABI_MISMATCH = 3,      // the caller's params struct has a different size than the library's
} rssm_status;

// Per-slot cursor record, int32 x RSSM_CURSOR_FIELDS, device resident.
//   [0] history: records in the ring since the checkpoint (0 .. L-1)
//   [1] origin: ring position of the first record (standard decode keeps it at 0; speculative decode moves it)
//   [2] arrivals: scratch counter the decode kernel uses to advance the cursor once per row (0 between launches)
//   [3] reserved (0)
#define RSSM_CURSOR_FIELDS 4
#define RSSM_CURSOR_HISTORY 0
#define RSSM_CURSOR_ORIGIN 1
#define RSSM_CURSOR_ARRIVALS 2

#ifdef __cplusplus
}
#endif
