// Programmatic dependent launch (sm_90+): a kernel launched with launch_dependent() may start while the kernel
// before it in the stream is still running, as soon as every block of that earlier kernel has called
// allow_dependent_launch() (or exited). Until it calls wait_for_primary(), which returns once the earlier kernel
// has finished and its writes are visible, the dependent kernel must not use a value the earlier kernel writes,
// nor write anything whose value the earlier kernel uses (a racing read whose result is discarded is harmless).
// Without the launch attribute (or before sm_90) both calls are no-ops.
#pragma once
#include <cuda_runtime.h>

#include <utility>

namespace replayssm {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The rows of an output-only step from `row0` on may run in a tail launch of finer blocks, a programmatic dependent
// of the launch of the rows before it (decode_tiling.cuh output_only_tail_rows; the two touch disjoint slots). Its
// last block waits for that first launch before it ends, so that the tail launch never ends before the first one
// (what the stream runs next then finds both done); a first launch (row0 0) waits for nothing.
__device__ __forceinline__ void wait_for_first_launch(int row0) {
  if (row0 > 0 && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1) wait_for_primary();
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the stream's previous
// kernel (cudaLaunchAttributeProgrammaticStreamSerialization); CUDA graph capture records it as a programmatic edge.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace replayssm
