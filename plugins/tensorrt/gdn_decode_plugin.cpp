// ReplaySSMGdnDecode: the op traits (fields, tensors, shapes, launch over the C ABI).
#include "gdn_decode_plugin.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;
using Cfg = GdnDecodeConfig;

std::array<FieldSpec<Cfg>, 10> const GdnDecode::kFields = {{
    {"num_k_heads", &Cfg::num_k_heads, true, 1, 65535},
    {"num_v_heads", &Cfg::num_v_heads, true, 1, 65535},
    {"head_k_dim", &Cfg::head_k_dim, true, 1, 65535},
    {"head_v_dim", &Cfg::head_v_dim, true, 1, 65535},
    {"buffer_len", &Cfg::buffer_len, false, 1, 64},
    {"mode", &Cfg::mode, false, RSSM_GDN_CONVENTIONAL, RSSM_GDN_REPLAY},
    {"state_dtype", &Cfg::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Cfg::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"pad_slot_id", &Cfg::pad_slot_id, false, INT32_MIN, INT32_MAX},
    {"latency_route_kib", &Cfg::latency_route_kib, false, kLatencyRouteDefault, INT32_MAX},
}};

IOTable<GdnDecode::kRoles> GdnDecode::make_io(Cfg const& cfg) {
  IOTable<kRoles> io;
  for (Role role : {Q, K, V, G, BETA, SLOT_IDX}) io.add(role);
  io.add_in_place(STATE);
  if (cfg.mode == RSSM_GDN_REPLAY)
    for (Role role : {RING_U, RING_K, RING_G, CURSOR}) io.add_in_place(role);
  io.y_like = V;  // y [b, HV, V]
  return io;
}

DataType GdnDecode::role_type(int role, Cfg const& cfg) {
  switch (role) {
    case G:
    case BETA:
    case RING_G: return DataType::kFLOAT;
    case SLOT_IDX:
    case CURSOR: return DataType::kINT32;
    case STATE: return trt_type(cfg.state_dtype);
    default: return trt_type(cfg.act_dtype);
  }
}

Shape GdnDecode::dims(int role, Cfg const& cfg) {
  const int64_t H = cfg.num_k_heads, HV = cfg.num_v_heads, Kd = cfg.head_k_dim, Vd = cfg.head_v_dim;
  const int64_t L = cfg.buffer_len;
  switch (role) {
    case Q:
    case K: return {kBatch, H, Kd};
    case V: return {kBatch, HV, Vd};
    case G:
    case BETA: return {kBatch, HV};
    case SLOT_IDX: return {kBatch};
    case STATE: return {kSlots, HV, Vd, Kd};
    case RING_U: return {kSlots, HV, L, Vd};
    case RING_K: return {kSlots, H, L, Kd};
    case RING_G: return {kSlots, HV, fp32_ring_len(cfg.buffer_len)};
    default: return {kSlots, HV, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS};  // CURSOR
  }
}

static void fill_config(Cfg const& cfg, rssm_gdn_decode_params& p) {
  p.num_k_heads = cfg.num_k_heads, p.num_v_heads = cfg.num_v_heads;
  p.head_k_dim = cfg.head_k_dim, p.head_v_dim = cfg.head_v_dim;
  p.buffer_len = cfg.buffer_len, p.pad_slot_id = cfg.pad_slot_id, p.mode = cfg.mode;
  p.latency_route_bytes = int64_t{cfg.latency_route_kib} * 1024;
  p.state_dtype = cfg.state_dtype, p.act_dtype = cfg.act_dtype;
  // TensorRT tensors are dense (kLINEAR): strides follow from the shapes.
  p.q_batch_stride = p.k_batch_stride = int64_t{cfg.num_k_heads} * cfg.head_k_dim;
  p.q_head_stride = p.k_head_stride = cfg.head_k_dim;
  p.v_batch_stride = p.y_batch_stride = int64_t{cfg.num_v_heads} * cfg.head_v_dim;
  p.v_head_stride = p.y_head_stride = cfg.head_v_dim;
  p.g_batch_stride = p.beta_batch_stride = cfg.num_v_heads;
}

static bool check_config(Cfg const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values; stand-in addresses are enough.
  rssm_gdn_decode_params p{};
  void* const fake = validation_address();
  fill_config(cfg, p);
  p.batch = 1, p.num_slots = 1;
  p.state = p.ring_u = p.ring_k = fake;
  p.ring_g = static_cast<float*>(fake);
  p.cursor = static_cast<int32_t*>(fake);
  p.q = p.k = p.v = p.y = fake;
  p.g = p.beta = static_cast<float const*>(fake);
  if (rssm_gdn_decode_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

bool GdnDecode::validate(Cfg& cfg, std::string& error) {
  return resolve_latency_route(cfg, check_config, error);
}

rssm_status GdnDecode::launch(Cfg const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_gdn_decode_params p{};
  fill_config(cfg, p);
  p.batch = static_cast<int32_t>(t.dim(V, 0));
  p.num_slots = static_cast<int32_t>(t.dim(STATE, 0));
  p.state = t.inout(STATE);  // WRITTEN
  p.ring_u = t.inout(RING_U), p.ring_k = t.inout(RING_K);  // replay only (NULL otherwise); WRITTEN
  p.ring_g = static_cast<float*>(t.inout(RING_G));
  p.cursor = static_cast<int32_t*>(t.inout(CURSOR));
  p.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  p.q = t.in(Q), p.k = t.in(K), p.v = t.in(V);
  p.g = static_cast<float const*>(t.in(G));
  p.beta = static_cast<float const*>(t.in(BETA));
  p.y = t.y();
  return rssm_gdn_decode(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
