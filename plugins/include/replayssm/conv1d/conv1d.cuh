// Causal depthwise conv1d in front of the SSM mixers: the standard decode update, the speculative verify of T
// tokens over a window of k-1+T inputs, and the commit by accepted count (params.h gives the equations;
// trtllm_replayssm/ops/conv1d.py is the specification). Framework-free; instantiated per activation dtype in
// plugins/capi/.
//
// The op is memory-bound: a step reads and writes each input a handful of times and does k multiply-adds.
// Two paths, chosen per call by the dispatch (plugins/capi/conv1d_dispatch.cu):
//
// Register update (update mode, the decode hot path): one thread per (batch row, group of kGroupChannels = 8
// consecutive channels), consecutive threads on consecutive groups of one row. A thread loads its 8 windows
// (8 x (k-1) contiguous state elements), its 8 inputs, 8 x k weights and 8 biases with 16-byte loads, computes
// the 8 outputs in registers and stores the shifted windows and the outputs with 16-byte stores: no shared
// memory, no barrier. It needs packed windows (channel stride k-1), C % 8 == 0 and every base pointer and row
// stride 16-byte aligned (update_in_registers_applies); at Nemotron-3-Super's 10240 channels a batch row is
// 1280 threads, 10 blocks of 128.
//
// Staged tiles (verify, commit, and updates the register path does not take: strided windows, odd channel
// counts, unaligned slices of a projection output): one block per (batch row, tile of kTileChannels channels).
// The block stages its slot's window tile (one contiguous run of channels x width elements when channels are
// packed), the x tile and the weights in shared memory with 16-byte loads, each thread moving a few 16-byte
// chunks (a chunk is 8 channels of a 16-bit row, 4 of an fp32 row); computes each (token, channel) output from
// shared memory; and writes y and the window tile back with 16-byte stores. Rows whose start is not 16-byte
// aligned, or tails shorter than a chunk, move element by element (any channel count works).
//
// Both paths compute an output with the same fp32 operations in the same order (acc = 0; one fma per window
// tap, oldest first; one fma of the last tap with x; + bias; SiLU), so they give bit-identical y and state.
//
// Windows are written back whole: the history and stale draft positions get their own bits again, so every
// 32-byte sector of the tile is fully written (no partial-sector writes) and the bytes that change are exactly
// the ones the reference changes.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/conv1d/params.h"

namespace replayssm {
namespace conv1d {

constexpr int kMinKernel = 2, kMaxKernel = 4;
constexpr int kMaxTokens = 16;
// Channels per block. 128 channels keep a block's staging under 21 KB at the largest shape (fp32 window of
// 3 + 16 positions: 128 * 19 * 4 B, plus 16 x 128 fp32 inputs) and give a 12288-channel layer 96 blocks per
// batch row, enough to fill the GPU from batch 2 on.
constexpr int kTileChannels = 128;
constexpr int kThreads = 128;

// Dynamic shared memory of one block, byte offsets (16-byte aligned): the window tile in the state dtype
// ([channels][width], bit-exact copies), the inputs then the outputs in fp32 ([tokens][channels], each output
// overwrites its own input), the weights ([channels][k]) and the bias in fp32.
struct SmemPlan {
  int win, x, w, bias;
  int bytes;
};

inline SmemPlan smem_plan(int width, int tokens, int kernel_size, int state_bytes) {
  SmemPlan s{};
  SmemBump bump;  // consecutive 16-byte-aligned regions
  s.win = bump.take(kTileChannels * width * state_bytes);
  s.x = bump.take(tokens * kTileChannels * 4);
  s.w = bump.take(kTileChannels * kernel_size * 4);
  s.bias = bump.take(kTileChannels * 4);
  s.bytes = bump.off;
  return s;
}

template <typename Dst, typename Src>
__device__ __forceinline__ Dst convert(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;  // bit-exact: window copies keep their bits
  } else {
    return from_float<Dst>(to_float(v));
  }
}

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Walks a global tile of `rows` rows of `width` consecutive T elements, `stride` elements apart, in pieces:
// fn(flat index r * width + c, global offset r * stride + c, count). A piece is a 16-byte chunk (count = V)
// when every row starts 16-byte aligned, else (and for row tails) shorter; rows that abut are walked as one.
template <typename T, typename Fn>
__device__ __forceinline__ void for_each_piece(const T* base, int rows, int width, int64_t stride, Fn fn) {
  constexpr int V = 16 / sizeof(T);
  if (stride == width) {
    width *= rows;
    rows = 1;
  }
  const bool vec = aligned16(base) && (rows == 1 || (stride * static_cast<int64_t>(sizeof(T))) % 16 == 0);
  const int step = vec ? V : 1;
  const int per_row = (width + step - 1) / step;
  for (int it = threadIdx.x; it < rows * per_row; it += blockDim.x) {
    const int r = it / per_row, c = (it - r * per_row) * step;
    fn(r * width + c, r * stride + c, min(step, width - c));
  }
}

// Shared <- global, converting Src to Dst (identity when they match).
template <typename Dst, typename Src>
__device__ __forceinline__ void load_tile(Dst* dst, const Src* src, int rows, int width, int64_t stride) {
  constexpr int V = 16 / sizeof(Src);
  for_each_piece(src, rows, width, stride, [&](int f, int64_t g, int n) {
    if (n == V) {
      const Packed<Src, V> p = *reinterpret_cast<const Packed<Src, V>*>(src + g);
#pragma unroll
      for (int e = 0; e < V; ++e) dst[f + e] = convert<Dst>(p.v[e]);
    } else {
      for (int e = 0; e < n; ++e) dst[f + e] = convert<Dst>(src[g + e]);
    }
  });
}

// Global <- value(flat index) for every element of the tile.
template <typename T, typename Value>
__device__ __forceinline__ void store_tile(T* dst, int rows, int width, int64_t stride, Value value) {
  constexpr int V = 16 / sizeof(T);
  for_each_piece(dst, rows, width, stride, [&](int f, int64_t g, int n) {
    if (n == V) {
      Packed<T, V> p;
#pragma unroll
      for (int e = 0; e < V; ++e) p.v[e] = value(f + e);
      *reinterpret_cast<Packed<T, V>*>(dst + g) = p;
    } else {
      for (int e = 0; e < n; ++e) dst[g + e] = value(f + e);
    }
  });
}

// The pool row of batch row b, or -1 for a padding row (pad_slot_id or outside [0, num_slots)).
__device__ __forceinline__ int live_slot(const rssm_conv1d_params& p, int b) {
  const int s = p.slot_idx ? p.slot_idx[b] : b;
  return (s == p.pad_slot_id || s < 0 || s >= p.num_slots) ? -1 : s;
}

// Update (tokens = 1, width = k-1) and verify (tokens = T, width = k-1+T) share one body: stage the window
// tile, x and the weights; verify writes the drafts into the window; every (token, channel) output reads the
// k-1 inputs before it from the window and its own input in fp32, as the reference does.
template <typename S, typename A, typename W, int K, bool VERIFY>
__global__ void __launch_bounds__(kThreads)
    conv_kernel(const __grid_constant__ rssm_conv1d_params p, const SmemPlan sp) {
  constexpr int K1 = K - 1;
  const int b = blockIdx.y, c0 = blockIdx.x * kTileChannels;
  const int slot = live_slot(p, b);
  if (slot < 0) return;  // padding: nothing read, nothing written
  const int nc = min(kTileChannels, p.channels - c0);
  const int T = VERIFY ? p.num_tokens : 1;
  const int width = K1 + (VERIFY ? T : 0);

  extern __shared__ __align__(16) unsigned char smem[];
  S* win = reinterpret_cast<S*>(smem + sp.win);      // [nc][width]
  float* xy = reinterpret_cast<float*>(smem + sp.x);  // [T][nc]: inputs, then outputs
  float* w = reinterpret_cast<float*>(smem + sp.w);   // [nc][K]
  float* bias = reinterpret_cast<float*>(smem + sp.bias);

  // WRITTEN below: the window tile of this slot (update: shifted by one; verify: drafts behind the history).
  S* gwin = static_cast<S*>(p.state) + slot * p.state_slot_stride + c0 * p.state_channel_stride;
  const A* gx = static_cast<const A*>(p.x) + b * p.x_batch_stride + c0;
  load_tile(win, gwin, nc, width, p.state_channel_stride);
  load_tile(xy, gx, T, nc, p.x_token_stride);
  load_tile(w, static_cast<const W*>(p.weight) + static_cast<int64_t>(c0) * K, 1, nc * K, 0);
  if (p.bias) load_tile(bias, static_cast<const W*>(p.bias) + c0, 1, nc, 0);
  __syncthreads();

  if constexpr (VERIFY) {
    for (int f = threadIdx.x; f < nc * T; f += blockDim.x) {
      const int c = f / T, t = f - c * T;
      win[c * width + K1 + t] = from_float<S>(xy[t * nc + c]);
    }
    __syncthreads();
    store_tile(gwin, nc, width, p.state_channel_stride, [&](int f) { return win[f]; });
  } else {
    // The new state: the last k-2 history inputs, then the new input in the state dtype; stored before the
    // outputs overwrite the inputs in shared memory.
    store_tile(gwin, nc, K1, p.state_channel_stride, [&](int f) {
      const int c = f / K1, i = f - c * K1;
      return i < K1 - 1 ? win[f + 1] : from_float<S>(xy[c]);
    });
    __syncthreads();
  }
  for (int f = threadIdx.x; f < nc * T; f += blockDim.x) {
    const int t = f / nc, c = f - t * nc;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < K1; ++i) acc = fmaf(w[c * K + i], to_float(win[c * width + t + i]), acc);
    acc = fmaf(w[c * K + K1], xy[f], acc);
    if (p.bias) acc += bias[c];
    xy[f] = p.silu ? silu_gate(acc) : acc;
  }
  __syncthreads();

  // WRITES y of this row: [T][nc] from the output tile.
  A* gy = static_cast<A*>(p.y) + b * p.y_batch_stride + c0;
  store_tile(gy, T, nc, p.y_token_stride, [&](int f) { return from_float<A>(xy[f]); });
}

// Commit: window positions 0..k-2 := positions a..a+k-2 for rows with a in 1..T; other rows untouched.
template <typename S, int K>
__global__ void __launch_bounds__(kThreads)
    commit_kernel(const __grid_constant__ rssm_conv1d_params p, const SmemPlan sp) {
  constexpr int K1 = K - 1;
  const int b = blockIdx.y, c0 = blockIdx.x * kTileChannels;
  const int slot = live_slot(p, b);
  if (slot < 0) return;
  const int a = p.accepted[b];
  if (a < 1 || a > p.num_tokens) return;  // rejected: the row keeps its window (see params.h)
  const int nc = min(kTileChannels, p.channels - c0);
  const int width = K1 + p.num_tokens;

  extern __shared__ __align__(16) unsigned char smem[];
  S* win = reinterpret_cast<S*>(smem + sp.win);
  // WRITTEN: the window tile of this slot, shifted left by a in its first k-1 positions.
  S* gwin = static_cast<S*>(p.state) + slot * p.state_slot_stride + c0 * p.state_channel_stride;
  load_tile(win, gwin, nc, width, p.state_channel_stride);
  __syncthreads();
  store_tile(gwin, nc, width, p.state_channel_stride, [&](int f) {
    const int c = f / width, i = f - c * width;
    return i < K1 ? win[f + a] : win[f];
  });
}

// ---- register update ----

constexpr int kGroupChannels = 8;  // channels per thread: 16 bytes of a 16-bit row, two 16-byte accesses of fp32
constexpr int kGroupThreads = 128;

// N consecutive T elements at a 16-byte aligned address, moved bit for bit in 16-byte accesses.
template <typename T, int N>
__device__ __forceinline__ void load_raw(const T* ptr, T (&out)[N]) {
  constexpr int V = 16 / sizeof(T);
  static_assert(N % V == 0, "a whole number of 16-byte accesses");
#pragma unroll
  for (int a = 0; a < N / V; ++a) {
    const Packed<T, V> q = reinterpret_cast<const Packed<T, V>*>(ptr)[a];
#pragma unroll
    for (int e = 0; e < V; ++e) out[a * V + e] = q.v[e];
  }
}

template <typename T, int N>
__device__ __forceinline__ void store_raw(T* ptr, const T (&in)[N]) {
  constexpr int V = 16 / sizeof(T);
  static_assert(N % V == 0, "a whole number of 16-byte accesses");
#pragma unroll
  for (int a = 0; a < N / V; ++a) {
    Packed<T, V> q;
#pragma unroll
    for (int e = 0; e < V; ++e) q.v[e] = in[a * V + e];
    reinterpret_cast<Packed<T, V>*>(ptr)[a] = q;
  }
}

// Update of kGroupChannels channels of one batch row per thread, in registers (update_in_registers_applies
// holds): the same operations, in the same order, as conv_kernel's update.
template <typename S, typename A, typename W, int K>
__global__ void __launch_bounds__(kGroupThreads)
    update_in_registers_kernel(const __grid_constant__ rssm_conv1d_params p) {
  constexpr int K1 = K - 1, G = kGroupChannels;
  const int b = blockIdx.y, c0 = (blockIdx.x * kGroupThreads + threadIdx.x) * G;
  if (c0 >= p.channels) return;
  const int slot = live_slot(p, b);
  if (slot < 0) return;  // padding: nothing read, nothing written

  // WRITTEN below: the windows of channels c0..c0+G-1 of this slot, G x (k-1) contiguous elements.
  S* gwin = static_cast<S*>(p.state) + slot * p.state_slot_stride + static_cast<int64_t>(c0) * K1;
  S win[G * K1];
  float x[G], w[G * K], bias[G] = {};
  load_raw(gwin, win);
  load_vec(static_cast<const A*>(p.x) + b * p.x_batch_stride + c0, x);
  load_vec(static_cast<const W*>(p.weight) + static_cast<int64_t>(c0) * K, w);
  if (p.bias) load_vec(static_cast<const W*>(p.bias) + c0, bias);

  float y[G];
  S next[G * K1];  // the last k-2 history inputs, then the new input in the state dtype
#pragma unroll
  for (int c = 0; c < G; ++c) {
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < K1; ++i) acc = fmaf(w[c * K + i], to_float(win[c * K1 + i]), acc);
    acc = fmaf(w[c * K + K1], x[c], acc);
    if (p.bias) acc += bias[c];
    y[c] = p.silu ? silu_gate(acc) : acc;
#pragma unroll
    for (int i = 0; i < K1; ++i) next[c * K1 + i] = i < K1 - 1 ? win[c * K1 + i + 1] : from_float<S>(x[c]);
  }
  store_raw(gwin, next);
  // WRITES y of this row, channels c0..c0+G-1.
  store_vec(static_cast<A*>(p.y) + b * p.y_batch_stride + c0, y);
}

// Whether the register update can run a validated call: update mode, packed windows (channel stride k-1), whole
// groups of kGroupChannels channels, and every 16-byte access aligned: the bases of state, x, y, weight and bias
// and the slot and batch strides (a group's offset within a row, 8 channels, is a multiple of 16 bytes).
template <typename S, typename A, typename W>
bool update_in_registers_applies(const rssm_conv1d_params& p) {
  auto rows_aligned = [](const void* base, int64_t stride, int64_t elem_bytes) {
    return aligned16(base) && (stride * elem_bytes) % 16 == 0;
  };
  return p.mode == RSSM_CONV1D_UPDATE && p.channels % kGroupChannels == 0 &&
         p.state_channel_stride == p.kernel_size - 1 && rows_aligned(p.state, p.state_slot_stride, sizeof(S)) &&
         rows_aligned(p.x, p.x_batch_stride, sizeof(A)) && rows_aligned(p.y, p.y_batch_stride, sizeof(A)) &&
         aligned16(p.weight) && (!p.bias || aligned16(p.bias));
}

// Host launch of a register update for one (state, activation, weight dtype, k) specialisation; params validated
// and update_in_registers_applies.
template <typename S, typename A, typename W, int K>
cudaError_t launch_update_in_registers(const rssm_conv1d_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const int groups = p.channels / kGroupChannels;
  const dim3 grid((groups + kGroupThreads - 1) / kGroupThreads, p.batch);
  update_in_registers_kernel<S, A, W, K><<<grid, kGroupThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// The staged-tile grid: one block per (tile of kTileChannels channels, batch row).
inline dim3 grid_of(const rssm_conv1d_params& p) {
  return dim3((p.channels + kTileChannels - 1) / kTileChannels, p.batch);
}

// Host launch of an update or verify step for one (state, activation, weight dtype, k) specialisation; params
// already validated.
template <typename S, typename A, typename W, int K>
cudaError_t launch_conv(const rssm_conv1d_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const bool verify = p.mode == RSSM_CONV1D_VERIFY;
  const int tokens = verify ? p.num_tokens : 1;
  const SmemPlan sp = smem_plan(K - 1 + (verify ? tokens : 0), tokens, K, sizeof(S));
  if (verify)
    conv_kernel<S, A, W, K, true><<<grid_of(p), kThreads, sp.bytes, stream>>>(p, sp);
  else
    conv_kernel<S, A, W, K, false><<<grid_of(p), kThreads, sp.bytes, stream>>>(p, sp);
  return cudaGetLastError();
}

// Host launch of a commit for one (state dtype, k) specialisation; params already validated.
template <typename S, int K>
cudaError_t launch_commit(const rssm_conv1d_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  const SmemPlan sp = smem_plan(K - 1 + p.num_tokens, 0, 0, sizeof(S));
  commit_kernel<S, K><<<grid_of(p), kThreads, sp.bytes, stream>>>(p, sp);
  return cudaGetLastError();
}

}  // namespace conv1d
}  // namespace replayssm
