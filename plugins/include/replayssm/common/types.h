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

// Formats of a state's read copy (written at flush, read by the output-only route, never fed back into the
// recurrence; trtllm_replayssm/quant.py specifies each). Values are part of the C ABI: append only.
typedef enum rssm_read_format {
  RSSM_READ_NONE = 0,   // no copy: the output-only route reads the checkpoint
  RSSM_READ_FP16 = 1,   // fp16 copy of every state element
  RSSM_READ_BF16 = 2,   // bf16 copy of every state element
  RSSM_READ_FP8 = 3,    // fp8 e4m3 codes, one fp32 scale per state row (amax / 448)
  RSSM_READ_NVFP4 = 4,  // e2m1 codes, an e4m3 scale per 16 elements, an fp32 scale per 4 state rows
} rssm_read_format;

// Status codes returned by every C ABI function. Values are part of the C ABI: append only.
typedef enum rssm_status {
  RSSM_OK = 0,
  RSSM_ERR_INVALID_ARGUMENT = 1,  // a size, dtype, pointer or stride the kernels do not support
  RSSM_ERR_CUDA = 2,              // a CUDA runtime call failed (launch error)
  RSSM_ERR_ABI_MISMATCH = 3,      // the caller's params struct has a different size than the library's
} rssm_status;

// Cursors, device resident: int32 [slots, heads, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS], fields
//   [0] history: records in the ring since the checkpoint (0 .. L-1)
//   [1] origin: ring position of the first record (standard decode keeps it at 0; speculative decode moves it)
// All replicas of a slot hold the same values between launches. Each block of a step reads one replica and
// advances only replicas no other block reads in that launch, so the cursor moves on the device with no
// inter-block synchronisation (no atomics, no second launch), whatever the number of tiles per head.
#define RSSM_CURSOR_REPLICAS 8
#define RSSM_CURSOR_FIELDS 2
#define RSSM_CURSOR_HISTORY 0
#define RSSM_CURSOR_ORIGIN 1

#ifdef __cplusplus
}
#endif
