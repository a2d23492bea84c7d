// Asynchronous global -> shared copies (cp.async, sm_80+): each thread queues copies that complete without
// holding registers; copies are grouped per thread (commit) and waited for by group;
// a block barrier after the wait publishes them to the block.
#pragma once
#include <stdint.h>

namespace replayssm {

// Copies BYTES (4, 8 or 16) from global to shared memory; both addresses aligned to BYTES.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(gmem_src), "n"(BYTES) : "memory");
  }
}

// The block (THREADS threads) copies [gmem_src, gmem_src + bytes) to smem_dst in 16-byte pieces (bytes a multiple
// of 16, both ends 16-byte aligned): thread t queues pieces t, t + THREADS, ...; the stride is a compile-time
// constant so that the unrolled copies address with immediate offsets (a 64-bit address formed per piece costs
// ~10 instructions next to the copy's own 4 issue slots).
template <int THREADS>
__device__ __forceinline__ void cp_async_block(void* smem_dst, const void* gmem_src, int bytes) {
  constexpr int kStep = THREADS * 16;
  uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst)) + threadIdx.x * 16;
  const char* src = static_cast<const char*>(gmem_src) + threadIdx.x * 16;
  int n = (bytes - static_cast<int>(threadIdx.x) * 16 + kStep - 1) / kStep;  // this thread's pieces
  for (; n >= 4; n -= 4, dst += 4 * kStep, src += 4 * kStep)
    asm volatile(
        "cp.async.cg.shared.global [%0], [%1], 16;\n"
        "cp.async.cg.shared.global [%0+%2], [%1+%2], 16;\n"
        "cp.async.cg.shared.global [%0+%3], [%1+%3], 16;\n"
        "cp.async.cg.shared.global [%0+%4], [%1+%4], 16;\n" ::"r"(dst),
        "l"(src), "n"(kStep), "n"(2 * kStep), "n"(3 * kStep)
        : "memory");
  for (; n > 0; --n, dst += kStep, src += kStep)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// Closes the calling thread's group of copies queued since the last commit (possibly empty).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most PENDING of the calling thread's most recent groups are still in flight.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Asks L2 to fetch [src, src + bytes) from memory ahead of the loads that will read it (Hopper's bulk prefetch:
// one instruction for a contiguous range, holding no register or shared memory; src 16-byte aligned, bytes a
// multiple of 16). No effect on results; a no-op before sm_90.
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes));
#endif
}

}  // namespace replayssm
