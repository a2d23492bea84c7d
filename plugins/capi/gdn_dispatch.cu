// The one dispatch point of the Gated DeltaNet decode family: validation of runtime values against the closed
// lists below, then the jump to the specialisation compiled in gdn_decode_<state dtype>[_read_<copy>].cu.
#include <type_traits>

#include "dispatch.h"
#include "replayssm.h"
#include "replayssm/gdn/decode.cuh"

namespace replayssm {
namespace gdn {

// Closed list (mirrored by trtllm_replayssm/config.py GDN_HEAD_DIMS): head_k_dim and head_v_dim.
static const int kHeadDims[] = {64, 128, 256};

// Read copies compiled (mirrored by trtllm_replayssm/config.py GDN_KERNEL_READ_COPIES): an fp32 checkpoint with
// fp16 / bf16 activations, copy fp16, bf16 or fp8, GDN replay mode (not KDA), every head_k_dim above.
static const int kReadFormats[] = {RSSM_READ_FP16, RSSM_READ_BF16, RSSM_READ_FP8};
static const char kReadCopiesText[] =
    "GDN read copies need state_dtype=0 (fp32), act_dtype 1 or 2 (fp16, bf16), mode=1 (replay), "
    "per_channel_decay=0, read_format 1, 2 or 3 (fp16, bf16, fp8)";

#define RSSM_DECLARE(S, A, D, R) \
  extern template cudaError_t launch_decode<S, A, D, R>(const rssm_gdn_decode_params&, cudaStream_t);
RSSM_FOR_COPY_FAMILY_TYPES(RSSM_DECLARE)
#undef RSSM_DECLARE

// validate() has admitted a read copy only with the combinations compiled (kReadFormats, kReadCopiesText).
static cudaError_t dispatch(const rssm_gdn_decode_params& p, cudaStream_t stream) {
  const auto launch = [&](auto s, auto a, auto d, auto r) {
    using S = tag_type<decltype(s)>;
    using A = tag_type<decltype(a)>;
    return launch_decode<S, A, decltype(d)::value, tag_type<decltype(r)>>(p, stream);
  };
  return with_copy_family_types(p.state_dtype, p.act_dtype, p.read_format, p.head_k_dim, launch);
}

// The read-copy fields: a compiled combination (kReadCopiesText) and the copy's buffers.
static rssm_status validate_read_copy(const rssm_gdn_decode_params& p) {
  if (p.read_format == RSSM_READ_NVFP4)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=4 (nvfp4) is not supported by the GDN decode kernel; %s",
                kReadCopiesText);
  if (const rssm_status st = check_read_copy(p, RSSM_GDN_REPLAY, kReadFormats, kReadCopiesText)) return st;
  if (p.read_format != RSSM_READ_NONE && p.per_channel_decay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "read_format=%d (%s) with per_channel_decay=1 (KDA) is not supported; %s",
                p.read_format, read_format_name(p.read_format), kReadCopiesText);
  return RSSM_OK;
}

// The latency route's field (dispatch.h check_latency_route), scalar decay, and a head whose blocks of four warp
// tiles each own a cursor replica.
static rssm_status validate_latency_route(const rssm_gdn_decode_params& p) {
  if (const rssm_status st = check_latency_route(p, RSSM_GDN_REPLAY)) return st;
  if (!p.latency_route_bytes) return RSSM_OK;
  const long long v = static_cast<long long>(p.latency_route_bytes);
  if (p.per_channel_decay)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "latency_route_bytes=%lld is not supported with per_channel_decay=1 (KDA)", v);
  if (!latency_route_fits(p.head_v_dim, p.head_k_dim))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "latency_route_bytes=%lld needs head_v_dim * head_k_dim <= %d, got %d * %d",
                v, kLatencyRouteMaxHeadElems, p.head_v_dim, p.head_k_dim);
  return RSSM_OK;
}

static rssm_status validate(const rssm_gdn_decode_params& p) {
  if (p.mode != RSSM_GDN_CONVENTIONAL && p.mode != RSSM_GDN_REPLAY)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "mode=%d is not supported (0 = conventional, 1 = replay)", p.mode);
  if (const rssm_status st = check_gdn_layer(p, kHeadDims)) return st;
  if (p.num_v_heads > 65535)  // (a grid dimension of the conventional step and the latency route)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads=%d is out of range (1..65535)", p.num_v_heads);
  if (const rssm_status st = check_batch(p.batch, p.num_slots, p.slot_idx)) return st;
  if (p.mode == RSSM_GDN_REPLAY && (p.buffer_len < 1 || p.buffer_len > kMaxBufferLen))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "buffer_len=%d is out of range (1..%d)", p.buffer_len, kMaxBufferLen);
  // The kernels address within a slot and within a batch row with 32-bit offsets.
  if (static_cast<int64_t>(p.num_v_heads) * p.head_v_dim * p.head_k_dim >= (int64_t{1} << 31))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "num_v_heads * head_v_dim * head_k_dim exceeds 2^31 - 1 elements per slot");
  const int64_t head_strides[] = {p.v_head_stride, p.y_head_stride};
  for (int64_t hs : head_strides)
    if (hs < 0 || hs * p.num_v_heads >= (int64_t{1} << 31))
      return fail(RSSM_ERR_INVALID_ARGUMENT, "head stride %lld of v or y is negative or spans 2^31 elements",
                  static_cast<long long>(hs));
  const NamedPtr required[] = {{p.state, "state"}, {p.q, "q"}, {p.k, "k"}, {p.v, "v"}, {p.y, "y"}};
  if (const rssm_status st = check_pointers(required)) return st;
  if (p.per_channel_decay != 0 && p.per_channel_decay != 1)
    return fail(RSSM_ERR_INVALID_ARGUMENT, "per_channel_decay=%d is not supported (0 = GDN, 1 = KDA)",
                p.per_channel_decay);
  if (p.qk_flags & ~(RSSM_GDN_QK_L2NORM | RSSM_GDN_QK_SCALE))
    return fail(RSSM_ERR_INVALID_ARGUMENT, "qk_flags=%d is not supported (bits: 1 = L2 norm, 2 = scale q)",
                p.qk_flags);
  if (p.gate_mode == RSSM_GDN_GATES_PRECOMPUTED) {
    const NamedPtr gates[] = {{p.g, "g"}, {p.beta, "beta"}};
    if (const rssm_status st = check_pointers(gates, "required by precomputed gates")) return st;
  } else if (p.gate_mode == RSSM_GDN_GATES_RAW) {
    const NamedPtr gates[] = {{p.a, "a"}, {p.b, "b"}, {p.A_log, "A_log"}, {p.dt_bias, "dt_bias"}};
    if (const rssm_status st = check_pointers(gates, "required by raw gates")) return st;
    if (const rssm_status st = check_dtype("gate_dtype", p.gate_dtype)) return st;
    if (const rssm_status st = check_dtype("gate_param_dtype", p.gate_param_dtype)) return st;
  } else {
    return fail(RSSM_ERR_INVALID_ARGUMENT, "gate_mode=%d is not supported (0 = precomputed g, beta; 1 = raw)",
                p.gate_mode);
  }
  if (!aligned16(p.state)) return fail(RSSM_ERR_INVALID_ARGUMENT, "state is not 16-byte aligned");
  // Rows of q, k are read with vector loads, rows of v with 8-byte asynchronous copies.
  const int64_t act_bytes = p.act_dtype == RSSM_DTYPE_FP32 ? 4 : 2;
  const RowsOf<2> rows[] = {{p.q, {p.q_batch_stride, p.q_head_stride}, "q"},
                            {p.k, {p.k_batch_stride, p.k_head_stride}, "k"},
                            {p.v, {p.v_batch_stride, p.v_head_stride}, "v"}};
  if (const rssm_status st = check_rows16(rows, act_bytes)) return st;
  if (p.mode == RSSM_GDN_REPLAY) {
    const NamedPtr ring[] = {{p.ring_u, "ring_u"}, {p.ring_k, "ring_k"}, {p.ring_g, "ring_g"}, {p.cursor, "cursor"}};
    if (const rssm_status st = check_pointers(ring, "required by replay mode", true)) return st;
  }
  if (const rssm_status st = validate_read_copy(p)) return st;
  return validate_latency_route(p);
}

}  // namespace gdn
}  // namespace replayssm

RSSM_DEFINE_ENTRY_POINTS(rssm_gdn_decode, rssm_gdn_decode_params, replayssm::gdn::validate,
                         replayssm::gdn::dispatch, "gdn decode")
