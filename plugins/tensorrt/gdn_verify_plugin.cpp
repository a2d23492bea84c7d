// ReplaySSMGdnVerify: the op traits (fields, tensors, shapes, launch over the C ABI).
#include "gdn_verify_plugin.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;
using Cfg = GdnVerifyConfig;

std::array<FieldSpec<Cfg>, 10> const GdnVerify::kFields = {{
    {"num_k_heads", &Cfg::num_k_heads, true, 1, 65535},
    {"num_v_heads", &Cfg::num_v_heads, true, 1, 65535},
    {"head_k_dim", &Cfg::head_k_dim, true, 1, 65535},
    {"head_v_dim", &Cfg::head_v_dim, true, 1, 65535},
    {"window", &Cfg::window, true, 1, 64},
    {"buffer_len", &Cfg::buffer_len, false, 1, 64},
    {"mode", &Cfg::mode, false, RSSM_GDN_CONVENTIONAL, RSSM_GDN_REPLAY},
    {"state_dtype", &Cfg::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Cfg::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"pad_slot_id", &Cfg::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<GdnVerify::kRoles> GdnVerify::make_io(Cfg const& cfg) {
  IOTable<kRoles> io;
  for (Role role : {Q, K, V, G, BETA, SLOT_IDX}) io.add(role);
  if (cfg.mode == RSSM_GDN_REPLAY) {
    for (Role role : {STATE, RING_U, RING_K, RING_G, CURSOR}) io.add_in_place(role);
  } else {  // the snapshot path reads the state and writes one snapshot per token
    io.add(STATE);
    io.add_in_place(SNAPSHOTS);
  }
  io.y_like = V;  // y [b, T, HV, V]
  return io;
}

DataType GdnVerify::role_type(int role, Cfg const& cfg) {
  switch (role) {
    case G:
    case BETA:
    case RING_G: return DataType::kFLOAT;
    case SLOT_IDX:
    case CURSOR: return DataType::kINT32;
    case STATE:
    case SNAPSHOTS: return trt_type(cfg.state_dtype);
    default: return trt_type(cfg.act_dtype);
  }
}

Shape GdnVerify::dims(int role, Cfg const& cfg) {
  const int64_t H = cfg.num_k_heads, HV = cfg.num_v_heads, Kd = cfg.head_k_dim, Vd = cfg.head_v_dim;
  const int64_t L = cfg.buffer_len, T = cfg.window;
  switch (role) {
    case Q:
    case K: return {kBatch, T, H, Kd};
    case V: return {kBatch, T, HV, Vd};
    case G:
    case BETA: return {kBatch, T, HV};
    case SLOT_IDX: return {kBatch};
    case STATE: return {kSlots, HV, Vd, Kd};
    case RING_U: return {kSlots, HV, L, Vd};
    case RING_K: return {kSlots, H, L, Kd};
    case RING_G: return {kSlots, HV, fp32_ring_len(cfg.buffer_len)};
    case CURSOR: return {kSlots, HV, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS};
    default: return {kSlots, T, HV, Vd, Kd};  // SNAPSHOTS
  }
}

static void fill_config(Cfg const& cfg, rssm_gdn_verify_params& p) {
  p.num_k_heads = cfg.num_k_heads, p.num_v_heads = cfg.num_v_heads;
  p.head_k_dim = cfg.head_k_dim, p.head_v_dim = cfg.head_v_dim;
  p.window = cfg.window, p.buffer_len = cfg.buffer_len, p.pad_slot_id = cfg.pad_slot_id, p.mode = cfg.mode;
  p.state_dtype = cfg.state_dtype, p.act_dtype = cfg.act_dtype;
  // TensorRT tensors are dense (kLINEAR): strides follow from the shapes.
  const int64_t T = cfg.window, hk = int64_t{cfg.num_k_heads} * cfg.head_k_dim;
  const int64_t hv = int64_t{cfg.num_v_heads} * cfg.head_v_dim;
  p.q_batch_stride = p.k_batch_stride = T * hk;
  p.q_token_stride = p.k_token_stride = hk;
  p.q_head_stride = p.k_head_stride = cfg.head_k_dim;
  p.v_batch_stride = p.y_batch_stride = T * hv;
  p.v_token_stride = p.y_token_stride = hv;
  p.v_head_stride = p.y_head_stride = cfg.head_v_dim;
  p.g_batch_stride = p.beta_batch_stride = T * cfg.num_v_heads;
  p.g_token_stride = p.beta_token_stride = cfg.num_v_heads;
}

bool GdnVerify::validate(Cfg const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values; stand-in addresses are enough.
  rssm_gdn_verify_params p{};
  void* const fake = validation_address();
  fill_config(cfg, p);
  p.batch = 1, p.num_slots = 1;
  p.state = p.ring_u = p.ring_k = p.snapshots = fake;
  p.ring_g = static_cast<float*>(fake);
  p.cursor = static_cast<int32_t*>(fake);
  p.q = p.k = p.v = p.y = fake;
  p.g = p.beta = static_cast<float const*>(fake);
  if (rssm_gdn_verify_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

rssm_status GdnVerify::launch(Cfg const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_gdn_verify_params p{};
  fill_config(cfg, p);
  p.batch = static_cast<int32_t>(t.dim(V, 0));
  p.num_slots = static_cast<int32_t>(t.dim(STATE, 0));
  // Replay: the pool is updated in place; snapshot path: the state is read only and the snapshots are written.
  p.state = cfg.mode == RSSM_GDN_REPLAY ? t.inout(STATE) : const_cast<void*>(t.in(STATE));
  p.ring_u = t.inout(RING_U), p.ring_k = t.inout(RING_K);
  p.ring_g = static_cast<float*>(t.inout(RING_G));
  p.cursor = static_cast<int32_t*>(t.inout(CURSOR));
  p.snapshots = t.inout(SNAPSHOTS);
  p.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  p.q = t.in(Q), p.k = t.in(K), p.v = t.in(V);
  p.g = static_cast<float const*>(t.in(G));
  p.beta = static_cast<float const*>(t.in(BETA));
  p.y = t.y();
  // The read-copy fields stay zero (read_format 0: no copy): the plugin has no copy inputs, and the outputs read
  // the checkpoint.
  return rssm_gdn_verify(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
