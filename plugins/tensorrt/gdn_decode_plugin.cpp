// ReplaySSMGdnDecode: the family traits (fields, tensors, checks, launch over the C ABI).
#include "gdn_decode_plugin.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;
using Cfg = GdnDecodeConfig;

std::array<FieldSpec<Cfg>, 9> const GdnDecode::kFields = {{
    {"num_k_heads", &Cfg::num_k_heads, true, 1, 65535},
    {"num_v_heads", &Cfg::num_v_heads, true, 1, 65535},
    {"head_k_dim", &Cfg::head_k_dim, true, 1, 65535},
    {"head_v_dim", &Cfg::head_v_dim, true, 1, 65535},
    {"buffer_len", &Cfg::buffer_len, false, 1, 64},
    {"mode", &Cfg::mode, false, RSSM_GDN_CONVENTIONAL, RSSM_GDN_REPLAY},
    {"state_dtype", &Cfg::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Cfg::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"pad_slot_id", &Cfg::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<GdnDecode::kRoles> GdnDecode::make_io(Cfg const& cfg) {
  IOTable<kRoles> io;
  for (Role role : {Q, K, V, G, BETA, SLOT_IDX}) io.add(role);
  io.add_in_place(STATE);
  if (cfg.mode == RSSM_GDN_REPLAY)
    for (Role role : {RING_U, RING_K, RING_G, CURSOR}) io.add_in_place(role);
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

static void fill_config(Cfg const& cfg, rssm_gdn_decode_params& p) {
  p.num_k_heads = cfg.num_k_heads, p.num_v_heads = cfg.num_v_heads;
  p.head_k_dim = cfg.head_k_dim, p.head_v_dim = cfg.head_v_dim;
  p.buffer_len = cfg.buffer_len, p.pad_slot_id = cfg.pad_slot_id, p.mode = cfg.mode;
  p.state_dtype = cfg.state_dtype, p.act_dtype = cfg.act_dtype;
  // TensorRT tensors are dense (kLINEAR): strides follow from the shapes.
  p.q_batch_stride = p.k_batch_stride = int64_t{cfg.num_k_heads} * cfg.head_k_dim;
  p.q_head_stride = p.k_head_stride = cfg.head_k_dim;
  p.v_batch_stride = p.y_batch_stride = int64_t{cfg.num_v_heads} * cfg.head_v_dim;
  p.v_head_stride = p.y_head_stride = cfg.head_v_dim;
  p.g_batch_stride = p.beta_batch_stride = cfg.num_v_heads;
}

bool GdnDecode::validate(Cfg const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values; stand-in addresses are enough.
  rssm_gdn_decode_params p{};
  void* const fake = reinterpret_cast<void*>(uintptr_t{1} << 20);
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

bool GdnDecode::check_shapes(Cfg const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                             std::string& error) {
  nvinfer1::Dims const& q = in[io.input[Q]].dims;
  nvinfer1::Dims const& v = in[io.input[V]].dims;
  nvinfer1::Dims const& s = in[io.input[STATE]].dims;
  if (q.nbDims != 3 || q.d[1] != cfg.num_k_heads || q.d[2] != cfg.head_k_dim || v.nbDims != 3 ||
      v.d[1] != cfg.num_v_heads || v.d[2] != cfg.head_v_dim || s.nbDims != 4 || s.d[1] != cfg.num_v_heads ||
      s.d[2] != cfg.head_v_dim || s.d[3] != cfg.head_k_dim) {
    error = "q must be [batch, num_k_heads, head_k_dim], v [batch, num_v_heads, head_v_dim] and state "
            "[slots, num_v_heads, head_v_dim, head_k_dim]";
    return false;
  }
  return true;
}

rssm_status GdnDecode::launch_params(Cfg const& cfg, IOTable<kRoles> const& io, nvinfer1::PluginTensorDesc const* in,
                                     void const* const* inputs, void* y, void* state, void* ring_u, void* ring_k,
                                     void* ring_g, void* cursor, cudaStream_t stream) {
  rssm_gdn_decode_params p{};
  fill_config(cfg, p);
  p.batch = static_cast<int32_t>(in[io.input[V]].dims.d[0]);
  p.num_slots = static_cast<int32_t>(in[io.input[STATE]].dims.d[0]);
  p.state = state;
  if (cfg.mode == RSSM_GDN_REPLAY) {
    p.ring_u = ring_u, p.ring_k = ring_k;
    p.ring_g = static_cast<float*>(ring_g);
    p.cursor = static_cast<int32_t*>(cursor);
  }
  p.slot_idx = static_cast<int32_t const*>(inputs[io.input[SLOT_IDX]]);
  p.q = inputs[io.input[Q]], p.k = inputs[io.input[K]], p.v = inputs[io.input[V]];
  p.g = static_cast<float const*>(inputs[io.input[G]]);
  p.beta = static_cast<float const*>(inputs[io.input[BETA]]);
  p.y = y;
  return rssm_gdn_decode(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
