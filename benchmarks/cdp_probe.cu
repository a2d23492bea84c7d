// Feasibility probe for a device-launched flush (docs/mamba2.md, Next steps 1 (b)): a small "gate" kernel that
// launches a child grid from the device (CUDA dynamic parallelism, fire-and-forget), followed by a kernel launched
// as its programmatic dependent. Questions, answered on the GPU:
//   1. Does the dependent's griddepcontrol.wait also wait for the gate's child grid (eagerly and in a CUDA graph)?
//   2. Does a kernel that launches from the device run inside a captured CUDA graph at all?
//   3. What does the device launch add to a step, against a gate that launches nothing?
// Build and run (a GPU of compute capability 9.0):
//   nvcc -O3 -arch=sm_90 -rdc=true -Iplugins/include benchmarks/cdp_probe.cu -lcudadevrt -o /tmp/cdp_probe
//   /tmp/cdp_probe
// (the programmatic dependent launch and its device calls are the project's, common/dependent_launch.cuh)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "replayssm/common/dependent_launch.cuh"

using replayssm::allow_dependent_launch;
using replayssm::launch_dependent;
using replayssm::wait_for_primary;

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::printf("CUDA error %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// The child: waits `spin_ns`, then writes its token.
__global__ void child_kernel(int* token, int value, unsigned long long spin_ns) {
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < spin_ns) {
  }
  if (threadIdx.x == 0) token[0] = value;
}

// The gate: allows its dependent at once, then launches the child from the device when asked.
__global__ void gate_kernel(int* token, int value, int launch_child, unsigned long long spin_ns) {
  allow_dependent_launch();
  if (launch_child && threadIdx.x == 0) child_kernel<<<1, 32, 0, cudaStreamFireAndForget>>>(token, value, spin_ns);
}

// The dependent: waits for its primary, then records the token it sees.
__global__ void dependent_kernel(const int* token, int* seen) {
  wait_for_primary();
  if (threadIdx.x == 0) seen[0] = *reinterpret_cast<const volatile int*>(token);
}

// One step: the gate (and its child when launch_child), then the dependent.
static cudaError_t step(int* token, int* seen, int value, int launch_child, unsigned long long spin_ns,
                        cudaStream_t s) {
  gate_kernel<<<1, 32, 0, s>>>(token, value, launch_child, spin_ns);
  cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : launch_dependent(dependent_kernel, dim3(1), dim3(32), 0, s, token, seen);
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *token, *seen;
  CHECK(cudaMalloc(&token, sizeof(int)));
  CHECK(cudaMalloc(&seen, sizeof(int)));
  int ok_all = 1;

  // 1. Eager: the child spins 50 us before writing; the dependent must see its token.
  for (int trial = 1; trial <= 3; ++trial) {
    CHECK(cudaMemsetAsync(token, 0, sizeof(int), s));
    CHECK(cudaMemsetAsync(seen, 0, sizeof(int), s));
    CHECK(step(token, seen, 100 + trial, 1, 50000ull, s));
    int h = 0;
    CHECK(cudaMemcpyAsync(&h, seen, sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    std::printf("eager trial %d: dependent saw %d (child wrote %d)\n", trial, h, 100 + trial);
    ok_all &= h == 100 + trial;
  }

  // 2. The same captured in a CUDA graph, replayed three times.
  {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaMemsetAsync(token, 0, sizeof(int), s));
    CHECK(cudaMemsetAsync(seen, 0, sizeof(int), s));
    CHECK(step(token, seen, 7, 1, 50000ull, s));
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < 3; ++r) {
      CHECK(cudaGraphLaunch(ge, s));
      int h = 0;
      CHECK(cudaMemcpyAsync(&h, seen, sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      std::printf("graph replay %d: dependent saw %d (child wrote 7)\n", r, h);
      ok_all &= h == 7;
    }
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
  }

  // 3. Cost per step in a graph of 200 steps: the gate launching nothing, or an empty child; the dependent alone.
  const int n = 200;
  auto time_graph = [&](int mode, float& us) -> cudaError_t {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < n && e == cudaSuccess; ++i)
      e = mode == 2 ? launch_dependent(dependent_kernel, dim3(1), dim3(32), 0, s, token, seen)
                     : step(token, seen, i, mode, 0ull, s);
    cudaError_t e2 = cudaStreamEndCapture(s, &g);
    if (e != cudaSuccess) return e;
    if (e2 != cudaSuccess) return e2;
    if ((e = cudaGraphInstantiate(&ge, g, 0)) != cudaSuccess) return e;
    std::vector<float> t;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int r = 0; r < 13; ++r) {
      cudaEventRecord(a, s);
      cudaGraphLaunch(ge, s);
      cudaEventRecord(b, s);
      if ((e = cudaEventSynchronize(b)) != cudaSuccess) return e;
      float ms = 0.f;
      cudaEventElapsedTime(&ms, a, b);
      if (r >= 3) t.push_back(ms * 1000.f / n);
    }
    std::sort(t.begin(), t.end());
    us = t[t.size() / 2];
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return cudaSuccess;
  };
  const char* names[3] = {"gate (no child) + dependent", "gate + empty child + dependent", "dependent alone"};
  for (int pass = 0; pass < 2; ++pass)
    for (int mode : {0, 1, 2}) {
      float us = 0.f;
      CHECK(time_graph(mode, us));
      std::printf("pass %d  %-32s %6.2f us per step\n", pass, names[mode], us);
    }
  std::printf(ok_all ? "the dependent waited for the child grid every time\n"
                     : "the dependent did NOT always wait for the child grid\n");
  return ok_all ? 0 : 2;
}
