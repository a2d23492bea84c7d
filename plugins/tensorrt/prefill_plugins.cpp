// The prefill plugins' op traits (fields, tensors, shapes, launch over the C ABI's rssm_*_prefill entry points).
#include "prefill_plugins.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;

// ---- ReplaySSMMamba2Prefill ----

std::array<FieldSpec<Mamba2PrefillConfig>, 12> const Mamba2Prefill::kFields = {{
    {"nheads", &Config::nheads, true, 1, 65535},
    {"head_dim", &Config::head_dim, true, 1, 65535},
    {"dstate", &Config::dstate, true, 1, 65535},
    {"ngroups", &Config::ngroups, true, 1, 65535},
    {"mode", &Config::mode, false, RSSM_MAMBA2_CONVENTIONAL, RSSM_MAMBA2_REPLAY},
    {"state_dtype", &Config::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Config::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"has_z", &Config::has_z, false, 0, 1},
    {"has_D", &Config::has_D, false, 0, 1},
    {"has_dt_bias", &Config::has_dt_bias, false, 0, 1},
    {"dt_softplus", &Config::dt_softplus, false, 0, 1},
    {"pad_slot_id", &Config::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<Mamba2Prefill::kRoles> Mamba2Prefill::make_io(Config const& cfg) {
  IOTable<kRoles> io;
  io.add(X), io.add(DT), io.add(B), io.add(Role::C);
  if (cfg.has_z) io.add(Z);
  io.add(A);
  if (cfg.has_D) io.add(D);
  if (cfg.has_dt_bias) io.add(DT_BIAS);
  io.add(LENGTHS), io.add(SLOT_IDX);
  io.add_in_place(STATE);
  if (cfg.mode == RSSM_MAMBA2_REPLAY) io.add_in_place(CURSOR);
  io.y_like = X;  // y [b, S, H, P]
  return io;
}

DataType Mamba2Prefill::role_type(int role, Config const& cfg) {
  switch (role) {
    case A:
    case D:
    case DT_BIAS: return DataType::kFLOAT;
    case LENGTHS:
    case SLOT_IDX:
    case CURSOR: return DataType::kINT32;
    case STATE: return trt_type(cfg.state_dtype);
    default: return trt_type(cfg.act_dtype);
  }
}

Shape Mamba2Prefill::dims(int role, Config const& cfg) {
  const int64_t H = cfg.nheads, P = cfg.head_dim, N = cfg.dstate, G = cfg.ngroups;
  switch (role) {
    case X:
    case Z: return {kBatch, kFree0, H, P};
    case DT: return {kBatch, kFree0, H};
    case B:
    case Role::C: return {kBatch, kFree0, G, N};
    case A:
    case D:
    case DT_BIAS: return {H};
    case LENGTHS:
    case SLOT_IDX: return {kBatch};
    case STATE: return {kSlots, H, P, N};
    default: return {kSlots, H, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS};  // CURSOR
  }
}

// Everything the configuration and the sizes decide (dense kLINEAR strides); pointers are the caller's.
static void fill_sizes(Mamba2PrefillConfig const& cfg, int32_t batch, int32_t tokens, int32_t slots,
                       rssm_mamba2_prefill_params& p) {
  rssm_mamba2_decode_params& s = p.step;
  s.batch = batch, s.num_slots = slots, s.nheads = cfg.nheads, s.head_dim = cfg.head_dim, s.dstate = cfg.dstate;
  s.ngroups = cfg.ngroups, s.buffer_len = 1, s.pad_slot_id = cfg.pad_slot_id, s.mode = RSSM_MAMBA2_CONVENTIONAL;
  s.state_dtype = cfg.state_dtype, s.act_dtype = cfg.act_dtype, s.dt_softplus = cfg.dt_softplus;
  const int64_t hp = int64_t{cfg.nheads} * cfg.head_dim, gn = int64_t{cfg.ngroups} * cfg.dstate;
  s.x_batch_stride = s.z_batch_stride = s.y_batch_stride = tokens * hp;
  s.x_head_stride = s.z_head_stride = s.y_head_stride = cfg.head_dim;
  s.dt_batch_stride = int64_t{tokens} * cfg.nheads, s.dt_head_stride = 1;
  s.B_batch_stride = s.C_batch_stride = tokens * gn, s.B_group_stride = s.C_group_stride = cfg.dstate;
  p.num_tokens = tokens;
  p.x_token_stride = p.z_token_stride = p.y_token_stride = hp;
  p.dt_token_stride = cfg.nheads;
  p.B_token_stride = p.C_token_stride = gn;
}

bool Mamba2Prefill::validate(Config const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values; it reads no memory, so stand-in addresses
  // are enough to check sizes and dtypes.
  rssm_mamba2_prefill_params p{};
  void* const fake = validation_address();
  fill_sizes(cfg, 1, 1, 1, p);
  p.step.state = p.step.y = fake;
  p.step.x = p.step.dt = p.step.B = p.step.C = fake;
  p.step.A = static_cast<float const*>(fake);
  p.step.slot_idx = p.lengths = static_cast<int32_t const*>(fake);
  p.workspace = static_cast<int32_t*>(fake);
  if (cfg.mode == RSSM_MAMBA2_REPLAY) p.step.cursor = static_cast<int32_t*>(fake);
  if (rssm_mamba2_prefill_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

rssm_status Mamba2Prefill::launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_mamba2_prefill_params p{};
  fill_sizes(cfg, static_cast<int32_t>(t.dim(X, 0)), static_cast<int32_t>(t.dim(X, 1)),
             static_cast<int32_t>(t.dim(STATE, 0)), p);
  rssm_mamba2_decode_params& s = p.step;
  s.state = t.inout(STATE);                            // WRITTEN: the live rows' slots
  s.cursor = static_cast<int32_t*>(t.inout(CURSOR));  // replay only (NULL otherwise); WRITTEN: reset
  s.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  s.x = t.in(X), s.dt = t.in(DT), s.B = t.in(B), s.C = t.in(Role::C), s.z = t.in(Z);
  s.A = static_cast<float const*>(t.in(A));
  s.D = static_cast<float const*>(t.in(D));
  s.dt_bias = static_cast<float const*>(t.in(DT_BIAS));
  s.y = t.y();
  p.lengths = static_cast<int32_t const*>(t.in(LENGTHS));
  p.workspace = static_cast<int32_t*>(t.workspace);  // WRITTEN: the per-token slot indices
  return rssm_mamba2_prefill(&p, sizeof(p), stream);
}

// ---- ReplaySSMGdnPrefill ----

std::array<FieldSpec<GdnPrefillConfig>, 8> const GdnPrefill::kFields = {{
    {"num_k_heads", &Config::num_k_heads, true, 1, 65535},
    {"num_v_heads", &Config::num_v_heads, true, 1, 65535},
    {"head_k_dim", &Config::head_k_dim, true, 1, 65535},
    {"head_v_dim", &Config::head_v_dim, true, 1, 65535},
    {"mode", &Config::mode, false, RSSM_GDN_CONVENTIONAL, RSSM_GDN_REPLAY},
    {"state_dtype", &Config::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Config::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"pad_slot_id", &Config::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<GdnPrefill::kRoles> GdnPrefill::make_io(Config const& cfg) {
  IOTable<kRoles> io;
  for (Role role : {Q, K, V, G, BETA, LENGTHS, SLOT_IDX}) io.add(role);
  io.add_in_place(STATE);
  if (cfg.mode == RSSM_GDN_REPLAY) io.add_in_place(CURSOR);
  io.y_like = V;  // y [b, S, HV, V]
  return io;
}

DataType GdnPrefill::role_type(int role, Config const& cfg) {
  switch (role) {
    case G:
    case BETA: return DataType::kFLOAT;
    case LENGTHS:
    case SLOT_IDX:
    case CURSOR: return DataType::kINT32;
    case STATE: return trt_type(cfg.state_dtype);
    default: return trt_type(cfg.act_dtype);
  }
}

Shape GdnPrefill::dims(int role, Config const& cfg) {
  const int64_t H = cfg.num_k_heads, HV = cfg.num_v_heads, Kd = cfg.head_k_dim, Vd = cfg.head_v_dim;
  switch (role) {
    case Q:
    case K: return {kBatch, kFree0, H, Kd};
    case V: return {kBatch, kFree0, HV, Vd};
    case G:
    case BETA: return {kBatch, kFree0, HV};
    case LENGTHS:
    case SLOT_IDX: return {kBatch};
    case STATE: return {kSlots, HV, Vd, Kd};
    default: return {kSlots, HV, RSSM_CURSOR_REPLICAS, RSSM_CURSOR_FIELDS};  // CURSOR
  }
}

static void fill_sizes(GdnPrefillConfig const& cfg, int32_t batch, int32_t tokens, int32_t slots,
                       rssm_gdn_prefill_params& p) {
  rssm_gdn_decode_params& s = p.step;
  s.batch = batch, s.num_slots = slots, s.num_k_heads = cfg.num_k_heads, s.num_v_heads = cfg.num_v_heads;
  s.head_k_dim = cfg.head_k_dim, s.head_v_dim = cfg.head_v_dim, s.buffer_len = 1, s.pad_slot_id = cfg.pad_slot_id;
  s.mode = RSSM_GDN_CONVENTIONAL, s.state_dtype = cfg.state_dtype, s.act_dtype = cfg.act_dtype;
  s.gate_mode = RSSM_GDN_GATES_PRECOMPUTED;
  const int64_t hk = int64_t{cfg.num_k_heads} * cfg.head_k_dim, hv = int64_t{cfg.num_v_heads} * cfg.head_v_dim;
  s.q_batch_stride = s.k_batch_stride = tokens * hk;
  s.q_head_stride = s.k_head_stride = cfg.head_k_dim;
  s.v_batch_stride = s.y_batch_stride = tokens * hv;
  s.v_head_stride = s.y_head_stride = cfg.head_v_dim;
  s.g_batch_stride = s.beta_batch_stride = int64_t{tokens} * cfg.num_v_heads;
  p.num_tokens = tokens;
  p.q_token_stride = p.k_token_stride = hk;
  p.v_token_stride = p.y_token_stride = hv;
  p.g_token_stride = p.beta_token_stride = cfg.num_v_heads;
}

bool GdnPrefill::validate(Config const& cfg, std::string& error) {
  rssm_gdn_prefill_params p{};
  void* const fake = validation_address();
  fill_sizes(cfg, 1, 1, 1, p);
  p.step.state = p.step.y = fake;
  p.step.q = p.step.k = p.step.v = fake;
  p.step.g = p.step.beta = static_cast<float const*>(fake);
  p.step.slot_idx = p.lengths = static_cast<int32_t const*>(fake);
  p.workspace = static_cast<int32_t*>(fake);
  if (cfg.mode == RSSM_GDN_REPLAY) p.step.cursor = static_cast<int32_t*>(fake);
  if (rssm_gdn_prefill_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

rssm_status GdnPrefill::launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_gdn_prefill_params p{};
  fill_sizes(cfg, static_cast<int32_t>(t.dim(V, 0)), static_cast<int32_t>(t.dim(V, 1)),
             static_cast<int32_t>(t.dim(STATE, 0)), p);
  rssm_gdn_decode_params& s = p.step;
  s.state = t.inout(STATE);                            // WRITTEN: the live rows' slots
  s.cursor = static_cast<int32_t*>(t.inout(CURSOR));  // replay only; WRITTEN: reset
  s.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  s.q = t.in(Q), s.k = t.in(K), s.v = t.in(V);
  s.g = static_cast<float const*>(t.in(G));
  s.beta = static_cast<float const*>(t.in(BETA));
  s.y = t.y();
  p.lengths = static_cast<int32_t const*>(t.in(LENGTHS));
  p.workspace = static_cast<int32_t*>(t.workspace);  // WRITTEN: the per-token slot indices
  return rssm_gdn_prefill(&p, sizeof(p), stream);
}

// ---- ReplaySSMConv1dPrefill ----

std::array<FieldSpec<Conv1dPrefillConfig>, 8> const Conv1dPrefill::kFields = {{
    {"channels", &Config::channels, true, 1, INT32_MAX},
    {"kernel_size", &Config::kernel_size, false, 1, 64},
    {"state_dtype", &Config::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Config::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"weight_dtype", &Config::weight_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"has_bias", &Config::has_bias, false, 0, 1},
    {"silu", &Config::silu, false, 0, 1},
    {"pad_slot_id", &Config::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<Conv1dPrefill::kRoles> Conv1dPrefill::make_io(Config const& cfg) {
  IOTable<kRoles> io;
  io.add(X), io.add(WEIGHT);
  if (cfg.has_bias) io.add(BIAS);
  io.add(LENGTHS), io.add(SLOT_IDX);
  io.add_in_place(STATE);
  io.y_like = X;  // y [b, S, C]
  return io;
}

DataType Conv1dPrefill::role_type(int role, Config const& cfg) {
  switch (role) {
    case X: return trt_type(cfg.act_dtype);
    case WEIGHT:
    case BIAS: return trt_type(cfg.weight_dtype);
    case LENGTHS:
    case SLOT_IDX: return DataType::kINT32;
    default: return trt_type(cfg.state_dtype);  // STATE
  }
}

Shape Conv1dPrefill::dims(int role, Config const& cfg) {
  const int64_t C = cfg.channels, k = cfg.kernel_size;
  switch (role) {
    case X: return {kBatch, kFree0, C};
    case WEIGHT: return {C, k};
    case BIAS: return {C};
    case LENGTHS:
    case SLOT_IDX: return {kBatch};
    default: return {kSlots, C, k - 1};  // STATE
  }
}

static void fill_sizes(Conv1dPrefillConfig const& cfg, int32_t batch, int32_t tokens, int32_t slots,
                       rssm_conv1d_prefill_params& p) {
  rssm_conv1d_params& s = p.step;
  s.mode = RSSM_CONV1D_UPDATE, s.batch = batch, s.channels = cfg.channels, s.kernel_size = cfg.kernel_size;
  s.num_tokens = 1, s.num_slots = slots, s.pad_slot_id = cfg.pad_slot_id, s.silu = cfg.silu;
  s.state_dtype = cfg.state_dtype, s.act_dtype = cfg.act_dtype, s.weight_dtype = cfg.weight_dtype;
  s.state_channel_stride = cfg.kernel_size - 1;
  s.state_slot_stride = int64_t{cfg.channels} * (cfg.kernel_size - 1);
  s.x_token_stride = s.y_token_stride = cfg.channels;  // the prompt's token stride (prefill_params.h)
  s.x_batch_stride = s.y_batch_stride = int64_t{tokens} * cfg.channels;
  p.num_tokens = tokens;
}

bool Conv1dPrefill::validate(Config const& cfg, std::string& error) {
  rssm_conv1d_prefill_params p{};
  void* const fake = validation_address();
  fill_sizes(cfg, 1, 1, 1, p);
  p.step.state = p.step.y = fake;
  p.step.x = p.step.weight = fake;
  p.step.slot_idx = p.lengths = static_cast<int32_t const*>(fake);
  p.workspace = static_cast<int32_t*>(fake);
  if (rssm_conv1d_prefill_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

rssm_status Conv1dPrefill::launch(Config const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_conv1d_prefill_params p{};
  fill_sizes(cfg, static_cast<int32_t>(t.dim(X, 0)), static_cast<int32_t>(t.dim(X, 1)),
             static_cast<int32_t>(t.dim(STATE, 0)), p);
  p.step.state = t.inout(STATE);  // WRITTEN: the live rows' slots := the last k-1 inputs of their prompts
  p.step.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  p.step.x = t.in(X), p.step.weight = t.in(WEIGHT), p.step.bias = t.in(BIAS);
  p.step.y = t.y();
  p.lengths = static_cast<int32_t const*>(t.in(LENGTHS));
  p.workspace = static_cast<int32_t*>(t.workspace);  // WRITTEN: the per-token slot indices
  return rssm_conv1d_prefill(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
