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
// of the launch of the rows before it (decode_tiling.cuh output_only_tail_rows; the two touch disjoint slots; the
// first launch's blocks allow it at their start, and only when it follows). Its last block waits for that first
// launch before it ends, so that the tail launch never ends before the first one (what the stream runs next then
// finds both done); a first launch (row0 0) waits for nothing.
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

// An output-only step's launches (decode_tiling.cuh output_only_tail_rows): the rows before batch - tail in blocks of
// hpb heads, then the last `tail` rows in blocks of hpb / 2 heads as a programmatic dependent of the first launch
// (one plain launch when the tail takes every row). Both kernels take (params, heads per block, ahead, row0,
// tail_follows); shape(h) gives a launch's blocks per batch row and dynamic shared memory at h heads per block.
// first_dependent: the first launch is itself a programmatic dependent of the stream's previous kernel (its callers,
// the nvfp4 output-only launches after the flush-only launch, have no tail; a step whose tail takes every row is one
// plain launch).
struct RowsLaunchShape {
  int blocks_per_row, smem_bytes;
};
template <typename Params, typename Shape>
cudaError_t launch_rows_with_tail(void (*first)(Params, int, int, int, int),
                                  void (*tail_kernel)(Params, int, int, int, int), const Params& p, int batch, int hpb,
                                  int ahead, int tail, dim3 block, const Shape& shape, cudaStream_t stream,
                                  bool first_dependent = false) {
  if (tail < batch) {
    const RowsLaunchShape s = shape(hpb);
    const dim3 grid(s.blocks_per_row, batch - tail);
    const int follows = tail > 0;
    if (first_dependent) {
      const cudaError_t err = launch_dependent(first, grid, block, s.smem_bytes, stream, p, hpb, ahead, 0, follows);
      if (err != cudaSuccess || tail == 0) return err;
    } else {
      first<<<grid, block, s.smem_bytes, stream>>>(p, hpb, ahead, 0, follows);
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess || tail == 0) return err;
    }
  }
  const RowsLaunchShape s = shape(hpb / 2);
  const dim3 grid(s.blocks_per_row, tail);
  const int row0 = batch - tail;
  if (row0 == 0) {
    tail_kernel<<<grid, block, s.smem_bytes, stream>>>(p, hpb / 2, ahead, 0, 0);
    return cudaGetLastError();
  }
  return launch_dependent(tail_kernel, grid, block, s.smem_bytes, stream, p, hpb / 2, ahead, row0, 0);
}

}  // namespace replayssm
