// ReplaySSMMamba2Decode: the op traits (fields, tensors, shapes, launch over the C ABI).
#include "mamba2_decode_plugin.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;
using Cfg = Mamba2DecodeConfig;

std::array<FieldSpec<Cfg>, 14> const Mamba2Decode::kFields = {{
    {"nheads", &Cfg::nheads, true, 1, 65535},
    {"head_dim", &Cfg::head_dim, true, 1, 65535},
    {"dstate", &Cfg::dstate, true, 1, 65535},
    {"ngroups", &Cfg::ngroups, true, 1, 65535},
    {"buffer_len", &Cfg::buffer_len, false, 1, 64},
    {"mode", &Cfg::mode, false, RSSM_MAMBA2_CONVENTIONAL, RSSM_MAMBA2_REPLAY},
    {"state_dtype", &Cfg::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Cfg::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"has_z", &Cfg::has_z, false, 0, 1},
    {"has_D", &Cfg::has_D, false, 0, 1},
    {"has_dt_bias", &Cfg::has_dt_bias, false, 0, 1},
    {"dt_softplus", &Cfg::dt_softplus, false, 0, 1},
    {"pad_slot_id", &Cfg::pad_slot_id, false, INT32_MIN, INT32_MAX},
    {"latency_route_kib", &Cfg::latency_route_kib, false, kLatencyRouteDefault, INT32_MAX},
}};

IOTable<Mamba2Decode::kRoles> Mamba2Decode::make_io(Cfg const& cfg) {
  IOTable<kRoles> io;
  io.add(X), io.add(DT), io.add(B), io.add(Role::C);
  if (cfg.has_z) io.add(Z);
  io.add(A);
  if (cfg.has_D) io.add(D);
  if (cfg.has_dt_bias) io.add(DT_BIAS);
  io.add(SLOT_IDX);
  io.add_in_place(STATE);
  if (cfg.mode == RSSM_MAMBA2_REPLAY)
    for (Role role : {RING_X, RING_B, RING_DT, CURSOR}) io.add_in_place(role);
  io.y_like = X;  // y [b, H, P]
  return io;
}

DataType Mamba2Decode::role_type(int role, Cfg const& cfg) {
  switch (role) {
    case A:
    case D:
    case DT_BIAS:
    case RING_DT: return DataType::kFLOAT;
    case SLOT_IDX:
    case CURSOR: return DataType::kINT32;
    case STATE: return trt_type(cfg.state_dtype);
    default: return trt_type(cfg.act_dtype);
  }
}

Shape Mamba2Decode::dims(int role, Cfg const& cfg) {
  const int64_t H = cfg.nheads, P = cfg.head_dim, N = cfg.dstate, G = cfg.ngroups, L = cfg.buffer_len;
  switch (role) {
    case X:
    case Z: return {kBatch, H, P};
    case DT: return {kBatch, H};
    case B:
    case Role::C: return {kBatch, G, N};
    case A:
    case D:
    case DT_BIAS: return {H};
    case SLOT_IDX: return {kBatch};
    case STATE: return {kSlots, H, P, N};
    case RING_X: return {kSlots, H, L, P};
    case RING_B: return {kSlots, G, L, N};
    case RING_DT: return {kSlots, H, fp32_ring_len(cfg.buffer_len)};
    default: return {kSlots, H, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS};  // CURSOR
  }
}

// Everything the configuration decides, dense (kLINEAR) strides included.
static void fill_config(Cfg const& cfg, rssm_mamba2_decode_params& p) {
  p.nheads = cfg.nheads, p.head_dim = cfg.head_dim, p.dstate = cfg.dstate, p.ngroups = cfg.ngroups;
  p.buffer_len = cfg.buffer_len, p.pad_slot_id = cfg.pad_slot_id, p.mode = cfg.mode;
  p.state_dtype = cfg.state_dtype, p.act_dtype = cfg.act_dtype, p.dt_softplus = cfg.dt_softplus;
  p.latency_route_bytes = int64_t{cfg.latency_route_kib} * 1024;
  const int64_t hp = int64_t{cfg.nheads} * cfg.head_dim, gn = int64_t{cfg.ngroups} * cfg.dstate;
  p.x_batch_stride = p.z_batch_stride = p.y_batch_stride = hp;
  p.x_head_stride = p.z_head_stride = p.y_head_stride = cfg.head_dim;
  p.dt_batch_stride = cfg.nheads, p.dt_head_stride = 1;
  p.B_batch_stride = p.C_batch_stride = gn, p.B_group_stride = p.C_group_stride = cfg.dstate;
}

static bool check_config(Cfg const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values; it reads no memory, so stand-in addresses
  // are enough to check sizes and dtypes.
  rssm_mamba2_decode_params p{};
  void* const fake = validation_address();
  fill_config(cfg, p);
  p.batch = 1, p.num_slots = 1;
  p.state = p.ring_x = p.ring_B = fake;
  p.ring_dt = static_cast<float*>(fake);
  p.cursor = static_cast<int32_t*>(fake);
  p.x = p.dt = p.B = p.C = p.y = fake;
  p.A = static_cast<float const*>(fake);
  if (rssm_mamba2_decode_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

bool Mamba2Decode::validate(Cfg& cfg, std::string& error) {
  return resolve_latency_route(cfg, check_config, error);
}

rssm_status Mamba2Decode::launch(Cfg const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_mamba2_decode_params p{};
  fill_config(cfg, p);
  p.batch = static_cast<int32_t>(t.dim(X, 0));
  p.num_slots = static_cast<int32_t>(t.dim(STATE, 0));
  p.state = t.inout(STATE);  // WRITTEN: the slots of non-padding rows (replay: on flush)
  p.ring_x = t.inout(RING_X), p.ring_B = t.inout(RING_B);  // replay only (NULL otherwise); WRITTEN
  p.ring_dt = static_cast<float*>(t.inout(RING_DT));
  p.cursor = static_cast<int32_t*>(t.inout(CURSOR));
  p.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  p.x = t.in(X), p.dt = t.in(DT), p.B = t.in(B), p.C = t.in(Role::C), p.z = t.in(Z);
  p.A = static_cast<float const*>(t.in(A));
  p.D = static_cast<float const*>(t.in(D));
  p.dt_bias = static_cast<float const*>(t.in(DT_BIAS));
  p.y = t.y();
  return rssm_mamba2_decode(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
