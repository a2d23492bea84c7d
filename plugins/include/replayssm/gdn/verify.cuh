// Gated DeltaNet speculative verify, ReplaySSM route: T tokens per row from the checkpoint S0 and the ring of
// corrected updates (trtllm_replayssm/ops/gdn/spec_reference.py is the specification). Framework-free; the host
// launch function sits beside the kernel and is instantiated per dtype in plugins/capi/.
//
// Per value head, with h committed records since S0 (record j: u_j, k_j, g_j at ring position (origin + j) mod L)
// and the window's tokens i = 0..T-1 as records h + i; c_m = sum_{l<=m} g_l over that sequence of records:
//   S'_i k_i = e^{c_{h+i}} (S0 k_i) + sum_{j<h} e^{c_{h+i}-c_j} (k_j·k_i) u_j + sum_{i'<i} A_{i,i'} û_{i'}
//   u_i = beta_i (v_i - S'_i k_i)        A_{i,i'} = e^{c_{h+i}-c_{h+i'}} (k_{i'}·k_i)
//   y_i = e^{c_{h+i}} (S0 q_i) + sum_{j<h} e^{c_{h+i}-c_j} (k_j·q_i) u_j + sum_{i'<i} B_{i,i'} û_{i'}
//         + u_i (k_i·q_i)
// with û the u records as stored (activation dtype). The u_i are the solution of the unit-lower-triangular
// system (I + diag(beta) A) U = R, solved by forward substitution in each state row (rounding û_i as the ring
// stores it before it enters the next row of the system, as the reference does). The T records (u, k, g) are
// written at ring positions h .. h+T-1. Rows with h + 2T > L ("one window early") then fold the h committed
// records into S0 and store it (S = e^{c_{h-1}} S0 + sum_{j<h} e^{c_{h-1}-c_j} u_j k_jᵀ) and move their cursor:
// origin += h, history := 0; their outputs still read the old S0. The history is advanced by rssm_spec_commit.
//
// Work split: one block per (batch row, key head, chunk of consecutive (value head, tile) units), as the decode
// kernel. Once per block: the window's k_i, q_i (fp32, shared memory; on the tensor-core path also as tf32 B
// fragments), the key head's ring of k records, and every product k_p·k_i, k_p·q_i (ring positions p and window
// keys) the value heads of the key head share. Per unit: each thread loads its part of the checkpoint tile
// straight into registers (R rows x 32 columns; read from HBM once; the next unit's tile is loaded while this one
// finishes, as soon as the fold has released the registers), the history's u records and the tokens' v go to
// shared memory (cp.async), one warp per token computes that token's decay weights (warp suffix scan) and
// coefficients. The 2T mat-vecs S0 [rows x K] . [k_0..k_{T-1} q_0..q_{T-1}] then run on one of two paths (one
// template switch, VerifyMma); both leave each lane complete sums of its rows for runs of tokens of one kind
// (S0 k or S0 q) in the warp's exchange rows. The lane adds the history terms to them, and one lane per row
// solves the T x T system and writes y and u.
//
// Tensor-core path (16-bit activations, K = 128): m16n8k8 TF32 MMAs with fp32 accumulation; the warp's 16 rows
// are m, the 2 TM vectors n (tiles of 8), K the reduction in steps of 8. The tiling's lanes already are the
// MMA's lanes: lane 4 g + t holds rows g and g + 8 of the warp and, of every 4-column group (c W + t) VEC +
// 4 piece, exactly the columns of fragment column t. A step takes two adjacent columns 2p, 2p + 1 of such a
// group as k = t and k = t + 4: a permutation of k, applied to A and B alike, which a dot product does not see.
// So the A fragments are the lane's own registers (cvt.rna.tf32 of the fp32 state; a 16-bit state already is
// tf32), the B fragments one 16-byte shared-memory load per (c, piece, n-tile) from a copy of the vectors staged
// in that order once per block, and the C fragment leaves rows g, g + 8 x vectors nt 8 + 2t, +1 in the lane:
// no shuffle anywhere. At T = 8 a warp's unit is 32 MMAs instead of 1024 FMAs per thread and a reduce-scatter.
// FMA path (fp32 activations; K = 64, 256, whose lanes map otherwise): a thread takes all 2T dot products of
// each of its rows (2T FMAs per state element; the k_i, q_i values come from shared memory as broadcasts, each
// load feeding R rows), in passes of at most 16 partial sums; one multi-value reduce-scatter per pass
// (common/multi_reduce.cuh) leaves each lane one row's sums for a run of tokens. At T = 8 this path is bound by
// the FMAs, not by the state read (b256: 664 us against ~270 us for reading the state once).
//
// Precision: the FMA path is exact to fp32 rounding. The tensor-core path rounds the state to tf32 (10 mantissa
// bits, round to nearest: unit roundoff 2^-11, that of fp16 and 1/8 of bf16's) in S0 k_i and S0 q_i only; k_i
// and q_i are 16-bit values, exact in tf32; the history terms, the solve and the fold stay fp32 (the fold reads
// the fp32 registers: a stored checkpoint is never rounded to tf32 and sees the error only through u records).
// The error enters u and y once, just before the step rounds them to the 16-bit activation dtype anyway, so it
// is at most one more rounding of that size (docs/gdn.md, Precision, has the measured effect); fp32
// activations, where it would dominate, stay on the FMA path. A flush row adds h FMAs per element (the fold) and
// one store.
//
// Window sizes: T is a runtime value (2..8); the kernel is compiled for TM = 2, 4, 8 tokens and a window of T
// runs the smallest TM >= T with the surplus tokens masked (their k and q are zero and nothing of them is used).
//
// Read copies (CopyT = __half, __nv_bfloat16 or __nv_fp8_e4m3 with an fp32 checkpoint and 16-bit activations;
// void: none), as the decode kernel (gdn/decode.cuh): only the output read uses the copy. y_i needs S0 q_i, which
// reads the copy, while S0 k_i feeds the correction u_i, which enters the ring and, at the fold, the checkpoint: it
// reads the checkpoint, so checkpoint, rings and cursors are the same whatever the copy (spec_reference.py: S0_read
// for y, S0 for u and the fold). The copy keeps the checkpoint's layout [slots, HV, V, K] and this kernel's thread
// mapping (VerifyTiling<StateT, K>): a thread's copy vectors are its checkpoint vectors narrowed (8 or 4 bytes
// instead of 16), so the fold writes exactly the copy elements the same thread reads in a later step.
//   - Each thread loads its copy vectors into registers at the start of the unit (fp8: and the scales of the rows
//     whose sums the lane keeps), not one unit ahead as the checkpoint tile: they are live only until the products.
//   - Tensor cores: the A fragments of the S0 k_i products are the checkpoint's (tf32-rounded), those of S0 q_i the
//     copy's (16-bit values and fp8 codes are exact in tf32). The vectors are staged twice as B fragments, the k_i
//     alone (q_i zero) and the q_i alone (k_i zero): an n-tile holding both kinds (TM = 2, 4) takes two MMAs, one
//     per kind, into two accumulators (a lane then keeps, of each, the sums of its own kind: the k_i sums never
//     see a copy value, not even an fp16 copy's inf times a zero k_i); at TM = 8 tile 0 holds the k_i, tile 1
//     the q_i, one MMA each as without a copy. FMA path: each vector's products take the checkpoint's or the
//     copy's values (known at compile time: a pass's vectors are unrolled).
//   - fp8: S0 q_i = scale_row (codes · q_i), the row scale applied to the lane's sums of q_i (a lane's run holds
//     tokens of one kind of one row), before the history terms.
//   - The fold (rows with h + 2T > L, so h > 0 as L >= 2T) stores the checkpoint as without a copy and then the
//     copy, quantised from the same fp32 registers row by row (common/read_copy.cuh store_read_copy_row: fp16 /
//     bf16 nearest even; fp8 the row's amax across the W lanes holding it, scale = max(amax * (1/448), FLT_MIN),
//     code = e4m3_satfinite(v / scale), as quant.quantize_state).
// The copy adds its read to the checkpoint's (both are needed): it exists for the format's sake, not for bandwidth.
// nvfp4 copies are not read here (validation refuses them).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "replayssm/common/async_copy.cuh"
#include "replayssm/common/decode_tiling.cuh"
#include "replayssm/common/math.cuh"
#include "replayssm/common/mma.cuh"
#include "replayssm/common/multi_reduce.cuh"
#include "replayssm/common/read_copy.cuh"
#include "replayssm/gdn/snapshot.cuh"
#include "replayssm/gdn/spec_params.h"

namespace replayssm {
namespace gdn {

constexpr int kMaxWindow = 8;
constexpr int kVerifyWarps = 8;

// Thread-to-state mapping of the verify kernel for state rows of K elements: W lanes share a row, each holding
// C = 32 columns of it as 16-byte chunks (chunk c of lane w: columns (c W + w) VEC .. + VEC-1, so a warp's access
// to a row is contiguous), for R rows (rows rho G + lane / W of the warp's RW rows). With R = 2 one k_i or q_i
// chunk loaded from shared memory feeds two rows; K = 64 keeps R = 1 so that a warp still covers 16 rows.
template <typename StateT, int K>
struct VerifyTiling {
  static constexpr int C = 32;
  static constexpr int W = K / C;
  static constexpr int R = K == 64 ? 1 : 2;
  static constexpr int G = 32 / W;
  static constexpr int RW = G * R;
  static constexpr int VEC = 16 / sizeof(StateT);
  static constexpr int NC = C / VEC;
  // A row's vectors at a lane as common/read_copy.cuh names them (store_read_copy_row): NV chunks of VEC, LPR
  // lanes per row.
  static constexpr int NV = NC, LPR = W;
  static_assert(K % C == 0 && W >= 2 && W <= 8, "head_k_dim must be 64, 128 or 256");
};

// Passes of the dot products: NV = 2 TM vectors per row (k_0.., then q_0..), VP per pass so that a lane keeps
// at most 16 partial sums; after a pass's reduce-scatter each lane holds NRES complete sums.
template <int TM, int R, int W>
struct VerifyPasses {
  static constexpr int NV = 2 * TM;
  static constexpr int VP = NV < 16 / R ? NV : 16 / R;
  static constexpr int NPASS = NV / VP;
  static constexpr int M = R * VP;
  static constexpr int NRES = M / W;
  static_assert(M >= W && TM % NRES == 0, "a lane's sums must be one row's run of tokens of one kind");
};

// Whether S0 [rows x K] . [k_0..k_{TM-1} q_0..q_{TM-1}] runs on tensor cores (m16n8k8 TF32): for 16-bit
// activations (fp32 activations keep the fp32 FMA path, exact to fp32 rounding), and where the tiling's lanes
// are the MMA's lanes: W = 4 lanes per row (lane % 4 is the fragment's t) and R = 2 rows per lane, G = 8 apart
// (lane / 4 is g; rows g and g + 8 of the warp's 16), i.e. K = 128. K = 64 and 256 map lanes otherwise and keep
// the FMA path. NT n-tiles of 8 vectors cover the 2 TM vectors (TM = 2: one tile, half of it zeros).
template <typename StateT, typename ActT, int K, int TM>
struct VerifyMma {
  using Tl = VerifyTiling<StateT, K>;
  static constexpr bool on = sizeof(ActT) == 2 && Tl::W == 4 && Tl::R == 2 && Tl::G == 8;
  static constexpr int NT = (2 * TM + 7) / 8;
  static constexpr int Q = Tl::VEC / 4;  // 16-byte pieces (4 tf32 values) of B per state chunk
};

// Launch shape: a value head splits into `tiles` tiles of `rows` rows (one unit each, `warps` warps); the units
// of a key head (HV/H value heads x tiles) split into chunks of `units` consecutive units, one block each.
struct VerifyShape {
  int tiles, tiles_log2, warps, rows, units, chunks;
};

// The most units per block (up to kMaxUnits) that still gives every SM four blocks or more: what depends on the
// key head only (its ring of k records, the products) is staged and computed once per block. Example: Qwen3.5-122B
// (H 16, HV 64, K = V = 128) at batch 256: one 128-row tile per value head, 4 units per block, 4096 blocks.
inline VerifyShape verify_shape(int V, int RW, int HV, int H, long long batch, int sms) {
  VerifyShape s{};
  s.warps = std::min(kVerifyWarps, V / RW);
  s.rows = s.warps * RW;
  s.tiles = V / s.rows;
  while ((1 << s.tiles_log2) < s.tiles) ++s.tiles_log2;
  const int group_units = HV / H * s.tiles;
  s.units = 1;
  for (int u = kMaxUnits; u > 1; u /= 2) {
    if (group_units % u == 0 && batch * H * (group_units / u) >= 4LL * sms) {
      s.units = u;
      break;
    }
  }
  s.chunks = group_units / s.units;
  return s;
}

// Dynamic shared memory of one block, byte offsets (16-byte aligned): block-wide buffers, then two areas of
// per-unit buffers used by alternate units (a unit fills its area before the block barrier of its main loop,
// which every warp passes only after finishing the unit before it).
struct VerifyPlan {
  int vecs;    // [2 TM][K] fp32: k_0..k_{TM-1}, q_0..q_{TM-1} (zeros past T)
  int frag;    // tensor-core path only: [NT][NC][Q][32 lanes][4] tf32, the vectors as B fragments (see kernel)
  int ring_k;  // [L][K] act: the key head's ring of k records
  int prod;    // [L + TM][2 TM] fp32: products of ring position p (then window key i') with k_i and q_i
  int xch;     // [warps][RW][2 TM + 4] fp32: S' k_i, S' q_i of each row (lane -> row-solver exchange)
  int par0, par_bytes;
  int coef_k, coef_q;  // in an area: [L][TM] fp32, e^{c_{h+i}-c_j} (k_j·k_i) and (k_j·q_i) for j < h
  int A, Bq;           // [TM][TM] fp32: window coefficients (k_{i'}·k_i), (k_{i'}·q_i) with their decay
  int tok;             // [3][TM] fp32: e^{c_{h+i}}, beta_i, g_i
  int wf;              // [L + 1] fp32: fold weights e^{c_{h-1}-c_j}, then e^{c_{h-1}}
  int u_hist;          // [L][rows] act: the tile's u records of the history, in history order
  int v_win;           // [TM][rows] act: the tile's v of the tokens
  int bytes;
};

// frag_sets: 2 with a read copy on the tensor-core path (the k_i alone, the q_i alone), else 1.
inline VerifyPlan verify_plan(int L, int K, int TM, int warps, int RW, int act_bytes, bool mma, int frag_sets = 1) {
  VerifyPlan s{};
  const int rows = warps * RW, NV = 2 * TM;
  SmemBump bump;  // consecutive 16-byte-aligned regions
  s.vecs = bump.take(NV * K * 4);
  s.frag = bump.take(mma ? frag_sets * round_up(NV, 8) * K * 4 : 0);
  s.ring_k = bump.take(L * K * act_bytes);
  s.prod = bump.take((L + TM) * NV * 4);
  s.xch = bump.take(warps * RW * (NV + 4) * 4);
  s.par0 = bump.off;
  bump.off = 0;
  s.coef_k = bump.take(L * TM * 4);
  s.coef_q = bump.take(L * TM * 4);
  s.A = bump.take(TM * TM * 4);
  s.Bq = bump.take(TM * TM * 4);
  s.tok = bump.take(3 * TM * 4);
  s.wf = bump.take((L + 1) * 4);
  s.u_hist = bump.take(L * rows * act_bytes);
  s.v_win = bump.take(TM * rows * act_bytes);
  s.par_bytes = bump.off;
  s.bytes = s.par0 + 2 * s.par_bytes;
  return s;
}

// A thread's vector of 4 copy elements (the copy of an fp32 checkpoint's 16-byte vector) as the integer word(s)
// it is loaded into, and their widening to fp32 (exact: fp16 / bf16 values and fp8 codes are fp32 values).
// Integer words and explicit conversions rather than Packed<CopyT, 4> and to_float: ptxas then keeps the copy in
// fewer registers (the fp8 and bf16 variants spilled several times more with the element arrays).
template <typename CopyT>
using CopyWord = std::conditional_t<sizeof(CopyT) == 1, uint32_t, uint2>;

template <typename CopyT>
__device__ __forceinline__ void widen_copy(uint2 w, float (&x)[4]) {
  if constexpr (std::is_same_v<CopyT, __nv_bfloat16>) {
    x[0] = __uint_as_float(w.x << 16);
    x[1] = __uint_as_float(w.x & 0xffff0000u);
    x[2] = __uint_as_float(w.y << 16);
    x[3] = __uint_as_float(w.y & 0xffff0000u);
  } else {
    static_assert(std::is_same_v<CopyT, __half>, "16-bit copies are fp16 or bf16");
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&w.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
    x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
  }
}

template <typename CopyT>
__device__ __forceinline__ void widen_copy(uint32_t w, float (&x)[4]) {
  static_assert(std::is_same_v<CopyT, __nv_fp8_e4m3>, "8-bit copies are fp8 e4m3");
  __nv_fp8x4_e4m3 codes;
  codes.__x = w;
  const float4 v = static_cast<float4>(codes);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}

template <typename StateT, typename ActT, int K, int TM, typename CopyT>
__global__ void __launch_bounds__(kVerifyWarps * 32, 2)
    verify_kernel(const __grid_constant__ rssm_gdn_verify_params p, const VerifyShape shape, const VerifyPlan sp) {
  using Tl = VerifyTiling<StateT, K>;
  using Ps = VerifyPasses<TM, Tl::R, Tl::W>;
  constexpr int W = Tl::W, R = Tl::R, G = Tl::G, RW = Tl::RW, VEC = Tl::VEC, NC = Tl::NC;
  constexpr int NV = Ps::NV, VP = Ps::VP, NPASS = Ps::NPASS, M = Ps::M, NRES = Ps::NRES, XS = NV + 4;
  using Mma = VerifyMma<StateT, ActT, K, TM>;
  constexpr bool kMma = Mma::on;
  constexpr int NT = Mma::NT, Q = Mma::Q;
  // The S0 k_i, S0 q_i sums a lane owns once the products are done: runs of RLEN consecutive vectors (tokens of
  // one kind) of LR rows. Tensor cores: rows gw and gw + 8, vectors nt 8 + 2w, +1 of each n-tile nt (the C
  // fragment); FMA path: one row, a run of NRES vectors per pass.
  constexpr int LR = kMma ? 2 : 1, RUNS = kMma ? NT : NPASS, RLEN = kMma ? 2 : NRES;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr bool kCopy = !std::is_void_v<CopyT>;                    // a read copy: S0 q_i reads it
  constexpr bool kRowScale = std::is_same_v<CopyT, __nv_fp8_e4m3>;  // ... with a scale per state row
  using CT = std::conditional_t<kCopy, CopyT, StateT>;              // the copy's element type (StateT: unused)
  static_assert(!kCopy || (std::is_same_v<StateT, float> && VEC == 4 && sizeof(ActT) == 2),
                "read copies of an fp32 checkpoint (vectors of 4), with 16-bit activations");

  extern __shared__ __align__(16) char smem[];
  const int T = p.window, L = p.buffer_len, HV = p.num_v_heads, H = p.num_k_heads, V = p.head_v_dim;
  const int b = blockIdx.y, kh = blockIdx.x / shape.chunks, chunk = blockIdx.x - kh * shape.chunks;
  const int U = shape.units, TL = shape.tiles_log2, TR = shape.rows;
  const int unit0 = chunk * U;
  const int head0 = kh * (HV / H) + (unit0 >> TL);  // first value head of this block
  const int tile_base = unit0 & (shape.tiles - 1);  // unit u is (head0 + (tile_base + u) >> TL, its low bits)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  const int gw = lane / W, w = lane % W;
  const int ldg = round_up(L, 4);  // ring_g row length

  const int slot = p.slot_idx ? p.slot_idx[b] : b;
  if (slot == p.pad_slot_id || slot < 0 || slot >= p.num_slots) return;  // padding: touch nothing

  float* const vecs = reinterpret_cast<float*>(smem + sp.vecs);
  const ActT* const rk_s = reinterpret_cast<const ActT*>(smem + sp.ring_k);
  float* const prod = reinterpret_cast<float*>(smem + sp.prod);
  float* const xw = reinterpret_cast<float*>(smem + sp.xch) + warp * RW * XS;

  const int64_t sh0 = static_cast<int64_t>(slot) * HV + head0;
  StateT* const state_blk = static_cast<StateT*>(p.state) + sh0 * V * K;
  ActT* const ring_u_blk = static_cast<ActT*>(p.ring_u) + sh0 * L * V;
  float* const ring_g_blk = p.ring_g + sh0 * ldg;
  int32_t* const cursor_blk = p.cursor + sh0 * RSSM_CURSOR_REPLICAS * RSSM_CURSOR_FIELDS;
  ActT* const ring_k_row = static_cast<ActT*>(p.ring_k) + (static_cast<int64_t>(slot) * H + kh) * L * K;
  CT* const read_blk = kCopy ? static_cast<CT*>(p.read_state) + sh0 * V * K : nullptr;
  float* const read_scale_blk = kRowScale ? p.read_scale + sh0 * V : nullptr;

  // What a unit needs from HBM before it can start, loaded one unit ahead (the next unit's loads are in flight
  // while this one finishes): this thread's part of the checkpoint tile (rows warp * RW + rho * G + gw), the
  // unit's cursor replica and, in the warps that compute decay weights, the head's ring of g (positions lane,
  // lane + 32) and the tokens' g (lane i).
  const int thread_off = (warp * RW + gw) * K + w * VEC;
  const int fold_warp = T < nwarps ? T : 0;  // computes the fold weights (warps 0..T-1: one token each)
  const bool weight_warp = warp < T || warp == fold_warp;
  struct Ahead {
    uint4 raw[R][NC];
    int2 cur;
    float rg0, rg1, gwv;
  };
  auto load_ahead = [&](int u, Ahead& a) {
    const int uu = tile_base + u, hl = uu >> TL, tile = uu & (shape.tiles - 1);
    const StateT* src = state_blk + static_cast<int64_t>(uu) * TR * K + thread_off;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < NC; ++c) a.raw[r][c] = __ldcs(reinterpret_cast<const uint4*>(src + r * G * K + c * W * VEC));
    a.cur = *reinterpret_cast<const int2*>(cursor_blk + (hl * RSSM_CURSOR_REPLICAS + tile) * RSSM_CURSOR_FIELDS);
    if (weight_warp) {
      const float* rg = ring_g_blk + static_cast<int64_t>(hl) * ldg;
      a.rg0 = lane < L ? rg[lane] : 0.f;
      a.rg1 = lane + 32 < L ? rg[lane + 32] : 0.f;
      a.gwv = lane < T ? p.g[b * p.g_batch_stride + lane * p.g_token_stride + head0 + hl] : 0.f;
    }
  };

  // ---- Prologue: unit 0's checkpoint tile in flight; the key head's ring of k records (asynchronous); the
  // window's k_i and q_i as fp32; then every product the value heads of the key head share.
  Ahead ahead;
  load_ahead(0, ahead);
  uint4 (&raw)[R][NC] = ahead.raw;
  {
    const char* src = reinterpret_cast<const char*>(ring_k_row);
    const int n16 = L * K * static_cast<int>(sizeof(ActT)) / 16;
    for (int i = threadIdx.x; i < n16; i += blockDim.x) cp_async<16>(smem + sp.ring_k + i * 16, src + i * 16);
    cp_async_commit();
    for (int i = threadIdx.x; i < NV * K / 4; i += blockDim.x) {
      const int vec = i / (K / 4), col = (i - vec * (K / 4)) * 4, tok = vec % TM;
      float x[4] = {0.f, 0.f, 0.f, 0.f};
      if (tok < T) {
        const ActT* base = vec < TM ? static_cast<const ActT*>(p.k) + b * p.k_batch_stride + tok * p.k_token_stride +
                                          kh * p.k_head_stride
                                    : static_cast<const ActT*>(p.q) + b * p.q_batch_stride + tok * p.q_token_stride +
                                          kh * p.q_head_stride;
        load_vec<ActT, 4>(base + col, x);
      }
      *reinterpret_cast<float4*>(vecs + vec * K + col) = make_float4(x[0], x[1], x[2], x[3]);
    }
    cp_async_wait_group<0>();
    __syncthreads();
    // Tensor-core path: the vectors as tf32 B fragments, in the order the lanes read them (one conflict-free
    // 16-byte load per lane). Entry (nt, c, piece, lane l = 4 g + t) holds vector nt 8 + g at the 4 columns
    // (c W + t) VEC + 4 piece .. + 3: the columns lane l holds of its own state rows (see the products below).
    // With a read copy, set 0 holds the k_i alone and set 1 the q_i alone (the other kind zero), at i + set NT
    // n-tiles.
    if constexpr (kMma) {
      constexpr int SETS = kCopy ? 2 : 1;
      uint4* const fb = reinterpret_cast<uint4*>(smem + sp.frag);
      for (int i = threadIdx.x; i < SETS * NT * NC * Q * 32; i += blockDim.x) {
        const int ln = i % 32, piece = (i / 32) % Q, c = (i / (32 * Q)) % NC, nts = i / (32 * Q * NC);
        const int nt = kCopy ? nts % NT : nts, set = kCopy ? nts / NT : 0;
        const int n = nt * 8 + ln / 4, col = (c * W + ln % 4) * VEC + piece * 4;
        float x[4] = {0.f, 0.f, 0.f, 0.f};
        if (n < NV && (!kCopy || (n >= TM) == (set == 1))) load_vec<float, 4>(vecs + n * K + col, x);
        fb[i] = make_uint4(to_tf32(x[0]), to_tf32(x[1]), to_tf32(x[2]), to_tf32(x[3]));
      }
    }
    // Warp per left vector (ring position p < L, then window key L + i'); a lane holds K/32 of its elements.
    constexpr int KL = K / 32;
    for (int l = warp; l < L + TM; l += nwarps) {
      float left[KL];
      if (l < L) {
        load_vec<ActT, KL>(rk_s + l * K + lane * KL, left);
      } else {
        load_vec<float, KL>(vecs + (l - L) * K + lane * KL, left);
      }
      float part[NV];
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        float r[KL];
        load_vec<float, KL>(vecs + v * K + lane * KL, r);
        part[v] = 0.f;
#pragma unroll
        for (int e = 0; e < KL; ++e) part[v] = fmaf(left[e], r[e], part[v]);
      }
      multi_reduce_scatter<NV, 32>(part);
      constexpr int SH = MultiScatter<NV, 32>::SH;
      const float sum = group_sum<SH>(part[0]);
      if (lane % SH == 0) prod[l * NV + multi_scatter_base<NV, 32>(lane)] = sum;
    }
    __syncthreads();
  }
  const int res_base = multi_scatter_base<M, W>(lane);  // FMA path: flat (row, vector) index of a lane's first sum
  const int res_rho = res_base / VP, res_vp = res_base % VP;
  auto run_row = [&](int rr) { return kMma ? rr * G + gw : res_rho * G + gw; };      // row (of the warp's RW)
  auto run_vec = [&](int run) { return kMma ? run * 8 + 2 * w : run * VP + res_vp; };  // first vector

  for (int u = 0; u < U; ++u) {
    const int uu = tile_base + u, hl = uu >> TL, tile = uu & (shape.tiles - 1), hv = head0 + hl;
    const int row0 = tile * TR;
    char* const pa = smem + sp.par0 + (u & 1) * sp.par_bytes;
    float* const coef_k = reinterpret_cast<float*>(pa + sp.coef_k);
    float* const coef_q = reinterpret_cast<float*>(pa + sp.coef_q);
    float* const Aw = reinterpret_cast<float*>(pa + sp.A);
    float* const Bw = reinterpret_cast<float*>(pa + sp.Bq);
    float* const tok = reinterpret_cast<float*>(pa + sp.tok);  // abar [TM], beta [TM], g [TM]
    float* const wf = reinterpret_cast<float*>(pa + sp.wf);
    ActT* const u_hist = reinterpret_cast<ActT*>(pa + sp.u_hist);
    ActT* const v_win = reinterpret_cast<ActT*>(pa + sp.v_win);

    // The unit's cursor, clamped so that a corrupted cursor never indexes outside the ring and the window always
    // fits: history 0..L-T.
    const int hist = min(max(ahead.cur.x, 0), L - T);
    const int origin = ((ahead.cur.y % L) + L) % L;
    const bool flush = hist + 2 * T > L;
    const bool fold = flush && hist > 0;

    // Read copy: the thread's copy vectors (the elements of raw, narrowed) and, fp8, the scales of the rows whose
    // sums the lane keeps, loaded here rather than one unit ahead: they are live only until the products.
    CopyWord<CT> craw[kCopy ? R : 1][NC];
    float rsc[LR];
    if constexpr (kCopy) {
      const CT* csrc = read_blk + static_cast<int64_t>(uu) * TR * K + thread_off;
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < NC; ++c)
          craw[r][c] = __ldcs(reinterpret_cast<const CopyWord<CT>*>(csrc + r * G * K + c * W * VEC));
    }
    if constexpr (kRowScale) {
#pragma unroll
      for (int rr = 0; rr < LR; ++rr) rsc[rr] = read_scale_blk[uu * TR + warp * RW + run_row(rr)];
    }

    // The history's u records and the tokens' v of the tile rows (asynchronous, waited for before the barrier).
    {
      const int cpr = TR * static_cast<int>(sizeof(ActT)) / 16;  // 16-byte pieces per record
      const char* ru = reinterpret_cast<const char*>(ring_u_blk + static_cast<int64_t>(hl) * L * V + row0);
      for (int i = threadIdx.x; i < hist * cpr; i += blockDim.x) {
        const int j = i / cpr, c = i - j * cpr;
        cp_async<16>(reinterpret_cast<char*>(u_hist) + i * 16,
                     ru + static_cast<int64_t>(ring_pos(origin, j, L)) * V * sizeof(ActT) + c * 16);
      }
      const char* vg = reinterpret_cast<const char*>(static_cast<const ActT*>(p.v) + b * p.v_batch_stride +
                                                     hv * p.v_head_stride + row0);
      for (int i = threadIdx.x; i < T * cpr; i += blockDim.x) {
        const int t = i / cpr, c = i - t * cpr;
        cp_async<16>(reinterpret_cast<char*>(v_win) + i * 16, vg + t * p.v_token_stride * sizeof(ActT) + c * 16);
      }
      cp_async_commit();
    }

    // Decay weights and coefficients: warp i takes token i; fold_warp the fold weights.
    if (weight_warp) {
      const float rg0 = ahead.rg0, rg1 = ahead.rg1, gwv = ahead.gwv;
      // Exclusive suffix sums over records 0..last (ring records below hist, then the tokens), two per lane.
      auto suffix = [&](int last, float& ex0, float& ex1, float& total) {
        auto value = [&](int m) {
          const int pos = ring_pos(origin, m < L ? m : 0, L);
          const float r0 = __shfl_sync(kFull, rg0, pos & 31), r1 = __shfl_sync(kFull, rg1, pos & 31);
          const float wv = __shfl_sync(kFull, gwv, (m - hist) & 31);
          return m < hist ? (pos < 32 ? r0 : r1) : (m <= last ? wv : 0.f);
        };
        if (L <= 32) {
          warp_suffix_sums(value(lane), ex0, total);
          ex1 = 0.f;
        } else {
          warp_suffix_sums(value(lane), value(lane + 32), ex0, ex1, total);
        }
      };
      for (int i = warp; i < T; i += nwarps) {
        float ex0, ex1, total;
        suffix(hist + i, ex0, ex1, total);
        auto put = [&](int m, float ex) {
          if (m < hist) {
            const int pos = ring_pos(origin, m, L);
            const float wgt = expf(ex);
            coef_k[m * TM + i] = wgt * prod[pos * NV + i];
            coef_q[m * TM + i] = wgt * prod[pos * NV + TM + i];
          } else if (m < hist + i) {
            const int t = m - hist;
            const float wgt = expf(ex);
            Aw[i * TM + t] = wgt * prod[(L + t) * NV + i];
            Bw[i * TM + t] = wgt * prod[(L + t) * NV + TM + i];
          }
        };
        put(lane, ex0);
        if (L > 32) put(lane + 32, ex1);
        if (lane == 0) tok[i] = expf(total);
      }
      if (warp == 0 && lane < T) {
        tok[TM + lane] = p.beta[b * p.beta_batch_stride + lane * p.beta_token_stride + hv];
        tok[2 * TM + lane] = gwv;
      }
      if (fold && warp == fold_warp) {
        float ex0, ex1, total;
        suffix(hist - 1, ex0, ex1, total);
        if (lane < hist) wf[lane] = expf(ex0);
        if (L > 32 && lane + 32 < hist) wf[lane + 32] = expf(ex1);
        if (lane == 0) wf[L] = expf(total);
      }
    }

    // ---- S0 k_i and S0 q_i of the thread's rows; a lane's sums wait in the exchange rows for the history terms.
    if constexpr (kMma) {
      // Tensor cores: the warp's 16 rows are the MMA's m, the vectors its n (NT tiles of 8), and k runs over
      // the columns in steps of 8: step (c, piece, p) takes, for t = 0..3, column (c W + t) VEC + 4 piece + 2p
      // as k = t and the column after it as k = t + 4. Lane 4 g + t holds exactly those columns of rows g and
      // g + 8 (chunk c, elements 4 piece + 2p, +1 of raw[0], raw[1]): its A fragment is its own registers, and
      // its B fragment one 16-byte load of the staged vectors (for p = 0 and 1). The C fragment leaves rows gw,
      // gw + 8 and vectors nt 8 + 2w, +1 in the lane: runs of two tokens of one kind (TM is even).
      float acc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.f;
      // Read copy: an n-tile holding both kinds (TM = 2, 4) accumulates its copy MMAs apart (accq), so that the
      // S0 k_i sums never see a copy value, not even as inf * 0; a tile of q_i only accumulates in acc.
      constexpr bool kMixed = kCopy && TM < 8;
      float accq[kMixed ? NT : 1][4];
      if constexpr (kMixed) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) accq[nt][e] = 0.f;
      }
      const uint4* const fb = reinterpret_cast<const uint4*>(smem + sp.frag) + lane;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        float x[R][VEC];
#pragma unroll
        for (int r = 0; r < R; ++r) unpack<StateT, VEC>(raw[r][c], x[r]);
        // A 16-bit state is already a tf32 value as fp32; an fp32 state is rounded.
        auto tf32 = [](float v) { return sizeof(StateT) == 2 ? __float_as_uint(v) : to_tf32(v); };
        if constexpr (kCopy) {
          // The k_i against the checkpoint (B set 0), the q_i against the copy (B set 1; its values, fp8 codes
          // included, are tf32 values as fp32); an n-tile without vectors of a kind skips that kind's MMA.
          float xc[R][VEC];
#pragma unroll
          for (int r = 0; r < R; ++r) widen_copy<CT>(craw[r][c], xc[r]);
#pragma unroll
          for (int piece = 0; piece < Q; ++piece) {
            uint4 bk[NT], bq[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              if (nt * 8 < TM) bk[nt] = fb[((nt * NC + c) * Q + piece) * 32];
              if (nt * 8 + 8 > TM) bq[nt] = fb[(((NT + nt) * NC + c) * Q + piece) * 32];
            }
#pragma unroll
            for (int pr = 0; pr < 2; ++pr) {
              const int e = piece * 4 + 2 * pr;
              const uint32_t a[4] = {tf32(x[0][e]), tf32(x[1][e]), tf32(x[0][e + 1]), tf32(x[1][e + 1])};
              const uint32_t ac[4] = {__float_as_uint(xc[0][e]), __float_as_uint(xc[1][e]),
                                      __float_as_uint(xc[0][e + 1]), __float_as_uint(xc[1][e + 1])};
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                if (nt * 8 < TM) mma_tf32_m16n8k8(acc[nt], a, pr ? bk[nt].z : bk[nt].x, pr ? bk[nt].w : bk[nt].y);
                if (nt * 8 + 8 > TM)
                  mma_tf32_m16n8k8(kMixed && nt * 8 < TM ? accq[nt] : acc[nt], ac, pr ? bq[nt].z : bq[nt].x,
                                   pr ? bq[nt].w : bq[nt].y);
              }
            }
          }
        } else {
#pragma unroll
          for (int piece = 0; piece < Q; ++piece) {
            uint4 bv[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) bv[nt] = fb[((nt * NC + c) * Q + piece) * 32];
#pragma unroll
            for (int pr = 0; pr < 2; ++pr) {
              const int e = piece * 4 + 2 * pr;
              const uint32_t a[4] = {tf32(x[0][e]), tf32(x[1][e]), tf32(x[0][e + 1]), tf32(x[1][e + 1])};
#pragma unroll
              for (int nt = 0; nt < NT; ++nt)
                mma_tf32_m16n8k8(acc[nt], a, pr ? bv[nt].z : bv[nt].x, pr ? bv[nt].w : bv[nt].y);
            }
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int v0 = run_vec(nt);
        if (v0 < NV) {  // TM = 2: lanes w = 2, 3 hold the zero half of the tile
#pragma unroll
          for (int rr = 0; rr < LR; ++rr) {
            if constexpr (kMixed) {  // the lane's vectors are q_i: their sums are in accq
              if (v0 >= TM) {
                acc[nt][2 * rr] = accq[nt][2 * rr];
                acc[nt][2 * rr + 1] = accq[nt][2 * rr + 1];
              }
            }
            if constexpr (kRowScale) {  // sums of q_i read fp8 codes: the row's scale
              const float sc = v0 >= TM ? rsc[rr] : 1.f;
              acc[nt][2 * rr] *= sc;
              acc[nt][2 * rr + 1] *= sc;
            }
            xw[run_row(rr) * XS + v0] = acc[nt][2 * rr];
            xw[run_row(rr) * XS + v0 + 1] = acc[nt][2 * rr + 1];
          }
        }
      }
    } else {
      // FMA path: NPASS passes of VP vectors, each reduce-scattered (a lane keeps one row's run of NRES tokens).
#pragma unroll
      for (int ps = 0; ps < NPASS; ++ps) {
        float acc[M];
#pragma unroll
        for (int a = 0; a < M; ++a) acc[a] = 0.f;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          float x[R][VEC];
#pragma unroll
          for (int r = 0; r < R; ++r) unpack<StateT, VEC>(raw[r][c], x[r]);
          float xc[R][VEC];  // read copy: the same elements from the copy (fp8: codes)
          if constexpr (kCopy) {
#pragma unroll
            for (int r = 0; r < R; ++r) widen_copy<CT>(craw[r][c], xc[r]);
          }
          const float* vc = vecs + ps * VP * K + (c * W + w) * VEC;
#pragma unroll
          for (int vp = 0; vp < VP; ++vp) {
            float vv[VEC];
            load_vec<float, VEC>(vc + vp * K, vv);
            // k_i against the checkpoint, q_i (vectors TM..) against the copy: known per unrolled vector
            const float(&xs)[R][VEC] = kCopy && ps * VP + vp >= TM ? xc : x;
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
              for (int e = 0; e < VEC; ++e) acc[r * VP + vp] = fmaf(xs[r][e], vv[e], acc[r * VP + vp]);
          }
        }
        multi_reduce_scatter<M, W>(acc);
        if constexpr (kRowScale) {  // a run of q_i read fp8 codes: the row's scale
          if (run_vec(ps) >= TM)
#pragma unroll
            for (int l = 0; l < NRES; ++l) acc[l] *= rsc[0];
        }
#pragma unroll
        for (int l = 0; l < NRES; ++l) xw[run_row(0) * XS + run_vec(ps) + l] = acc[l];
      }
    }

    cp_async_wait_group<0>();
    __syncthreads();  // the unit's records, v and coefficients are visible to the block

    // ---- Flush rows with history: fold the committed records into the checkpoint tile and store it (and the
    // copy rewritten from it).
    if (fold) {
      const float abar_f = wf[L];
      StateT* dst = state_blk + static_cast<int64_t>(uu) * TR * K + thread_off;
#pragma unroll
      for (int r = 0; r < R; ++r) {  // a row at a time: the fold keeps 32 fp32 values live, not 64
        const int row_t = warp * RW + r * G + gw;
        float x[NC][VEC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          unpack<StateT, VEC>(raw[r][c], x[c]);
#pragma unroll
          for (int e = 0; e < VEC; ++e) x[c][e] *= abar_f;
        }
        for (int j = 0; j < hist; ++j) {
          const ActT* kj = rk_s + ring_pos(origin, j, L) * K + w * VEC;
          const float cu = wf[j] * to_float(u_hist[j * TR + row_t]);
#pragma unroll
          for (int c = 0; c < NC; ++c) {
            float kv[VEC];
            load_vec<ActT, VEC>(kj + c * W * VEC, kv);
#pragma unroll
            for (int e = 0; e < VEC; ++e) x[c][e] = fmaf(cu, kv[e], x[c][e]);
          }
        }
#pragma unroll
        for (int c = 0; c < NC; ++c)
          store_stream(dst + r * G * K + c * W * VEC, pack<StateT, VEC>(x[c]));  // WRITES state[slot, hv, rows]
        // WRITES read_state (and fp8 read_scale) of the row: the copy of the values just stored.
        if constexpr (kCopy)
          store_read_copy_row<CopyT, Tl>(x, read_blk + (static_cast<int64_t>(uu) * TR * K + thread_off + r * G * K),
                                         kRowScale ? read_scale_blk + uu * TR + row_t : nullptr, w);
      }
    }

    // The next unit's checkpoint tile is in flight while this one finishes (raw is free after the fold).
    if (u + 1 < U) load_ahead(u + 1, ahead);

    // ---- History terms of this lane's sums, then to the row's solver through the exchange rows.
    {
      float a[LR][RUNS][RLEN];
#pragma unroll
      for (int rr = 0; rr < LR; ++rr)
#pragma unroll
        for (int run = 0; run < RUNS; ++run) {
          const int v0 = run_vec(run), i0 = v0 % TM;
#pragma unroll
          for (int l = 0; l < RLEN; ++l)
            a[rr][run][l] = v0 < NV ? tok[i0 + l] * xw[run_row(rr) * XS + v0 + l] : 0.f;
        }
      for (int j = 0; j < hist; ++j) {
        float uj[LR];
#pragma unroll
        for (int rr = 0; rr < LR; ++rr) uj[rr] = to_float(u_hist[j * TR + warp * RW + run_row(rr)]);
#pragma unroll
        for (int run = 0; run < RUNS; ++run) {
          const int v0 = run_vec(run), i0 = v0 % TM;
          float c[RLEN];  // a run past NV (TM = 2, tensor cores) reads coef_q's row j: in bounds, never stored
          load_vec<float, RLEN>((v0 / TM ? coef_q : coef_k) + j * TM + i0, c);
#pragma unroll
          for (int rr = 0; rr < LR; ++rr)
#pragma unroll
            for (int l = 0; l < RLEN; ++l) a[rr][run][l] = fmaf(c[l], uj[rr], a[rr][run][l]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < LR; ++rr)
#pragma unroll
        for (int run = 0; run < RUNS; ++run) {
          const int v0 = run_vec(run);
          if (v0 < NV)
#pragma unroll
            for (int l = 0; l < RLEN; ++l) xw[run_row(rr) * XS + v0 + l] = a[rr][run][l];
        }
    }
    __syncwarp();

    // ---- One lane per row: forward substitution for u_i, outputs y_i; writes y and the u records.
    if (lane < RW) {
      const int row_t = warp * RW + lane, row = row0 + row_t;
      float sk[TM], sq[TM], uh[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        sk[i] = xw[lane * XS + i];
        sq[i] = xw[lane * XS + TM + i];
      }
      ActT* yrow = static_cast<ActT*>(p.y) + b * p.y_batch_stride + hv * p.y_head_stride + row;
      ActT* urow = ring_u_blk + static_cast<int64_t>(hl) * L * V + row;
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        if (i < T) {
          float a = sk[i], yq = sq[i];
#pragma unroll
          for (int t = 0; t < i; ++t) {
            a = fmaf(Aw[i * TM + t], uh[t], a);
            yq = fmaf(Bw[i * TM + t], uh[t], yq);
          }
          const float ui = tok[TM + i] * (to_float(v_win[i * TR + row_t]) - a);
          const ActT stored = from_float<ActT>(ui);
          uh[i] = to_float(stored);
          yq = fmaf(ui, prod[(L + i) * NV + TM + i], yq);
          yrow[i * p.y_token_stride] = from_float<ActT>(yq);                // WRITES y[b, i, hv, row]
          urow[static_cast<int64_t>(ring_pos(origin, hist + i, L)) * V] = stored;  // WRITES ring_u[slot, hv, h+i, row]
        }
      }
    }
    __syncwarp();  // the exchange rows are rewritten by the next unit

    // ---- The unit's other records and its cursor.
    if (tile == 0 && warp == 0 && lane < T)  // WRITES ring_g[slot, hv, h + lane]
      ring_g_blk[static_cast<int64_t>(hl) * ldg + ring_pos(origin, hist + lane, L)] = tok[2 * TM + lane];
    if (chunk == 0 && u == 0) {  // the key head's first unit: WRITES ring_k[slot, kh, h .. h+T-1]
      for (int i = threadIdx.x; i < T * K / 4; i += blockDim.x) {
        const int t = i / (K / 4), col = (i - t * (K / 4)) * 4;
        float x[4];
        load_vec<float, 4>(vecs + t * K + col, x);
        store_vec<ActT, 4>(ring_k_row + static_cast<int64_t>(ring_pos(origin, hist + t, L)) * K + col, x);
      }
    }
    // WRITES the cursor replicas this unit owns (tile, tile + tiles, ...): history 0, origin past the fold.
    if (fold && warp == 0 && lane < RSSM_CURSOR_REPLICAS && (lane & (shape.tiles - 1)) == tile)
      *reinterpret_cast<int2*>(cursor_blk + (hl * RSSM_CURSOR_REPLICAS + lane) * RSSM_CURSOR_FIELDS) =
          make_int2(0, ring_pos(origin, hist, L));
  }
}

// Host launch of the replay verify for one compiled window TM >= T; params already validated.
template <typename StateT, typename ActT, int K, int TM, typename CopyT>
cudaError_t launch_verify_window(const rssm_gdn_verify_params& p, cudaStream_t stream) {
  using Tl = VerifyTiling<StateT, K>;
  int sms = 0;
  cudaError_t err = device_sms(sms);
  if (err != cudaSuccess) return err;
  const VerifyShape shape = verify_shape(p.head_v_dim, Tl::RW, p.num_v_heads, p.num_k_heads, p.batch, sms);
  const VerifyPlan sp = verify_plan(p.buffer_len, K, TM, shape.warps, Tl::RW, sizeof(ActT),
                                    VerifyMma<StateT, ActT, K, TM>::on, std::is_void_v<CopyT> ? 1 : 2);
  auto kernel = verify_kernel<StateT, ActT, K, TM, CopyT>;
  static const int overhead = block_smem_overhead(kernel);
  if (needs_smem_opt_in(sp.bytes, overhead)) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sp.bytes);
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(p.num_k_heads * shape.chunks, p.batch);
  kernel<<<grid, shape.warps * 32, sp.bytes, stream>>>(p, shape, sp);
  return cudaGetLastError();
}

// Host launch for one (state dtype, activation dtype, head_k_dim, read copy) specialisation; params already
// validated. CopyT void: no read copy, p.mode picks the replay verify (window T on the smallest compiled TM >= T)
// or the snapshot path; otherwise replay verify only (validation refuses a copy on the snapshot path).
template <typename StateT, typename ActT, int K, typename CopyT>
cudaError_t launch_verify(const rssm_gdn_verify_params& p, cudaStream_t stream) {
  if (p.batch == 0) return cudaSuccess;
  if constexpr (std::is_void_v<CopyT>) {
    if (p.mode != RSSM_GDN_REPLAY) return launch_snapshot<StateT, ActT, K>(p, stream);
  }
  if (p.window <= 2) return launch_verify_window<StateT, ActT, K, 2, CopyT>(p, stream);
  if (p.window <= 4) return launch_verify_window<StateT, ActT, K, 4, CopyT>(p, stream);
  return launch_verify_window<StateT, ActT, K, 8, CopyT>(p, stream);
}

}  // namespace gdn
}  // namespace replayssm
