// ReplaySSMConv1d: the op traits (fields, tensors, shapes, launch over the C ABI).
#include "conv1d_plugin.h"

#include <climits>

namespace replayssm {
namespace trt {

using nvinfer1::DataType;
using Cfg = Conv1dConfig;

std::array<FieldSpec<Cfg>, 10> const Conv1d::kFields = {{
    {"mode", &Cfg::mode, false, RSSM_CONV1D_UPDATE, RSSM_CONV1D_COMMIT},
    {"channels", &Cfg::channels, true, 1, INT32_MAX},
    {"kernel_size", &Cfg::kernel_size, false, 1, 64},
    {"num_tokens", &Cfg::num_tokens, false, 1, 64},
    {"state_dtype", &Cfg::state_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"act_dtype", &Cfg::act_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"weight_dtype", &Cfg::weight_dtype, false, RSSM_DTYPE_FP32, RSSM_DTYPE_BF16},
    {"has_bias", &Cfg::has_bias, false, 0, 1},
    {"silu", &Cfg::silu, false, 0, 1},
    {"pad_slot_id", &Cfg::pad_slot_id, false, INT32_MIN, INT32_MAX},
}};

IOTable<Conv1d::kRoles> Conv1d::make_io(Cfg const& cfg) {
  IOTable<kRoles> io;
  if (cfg.mode == RSSM_CONV1D_COMMIT) {  // no activations: the windows shift by the accepted counts
    io.add(ACCEPTED), io.add(SLOT_IDX);
    io.add_in_place(WINDOWS);
    return io;
  }
  io.add(X), io.add(WEIGHT);
  if (cfg.has_bias) io.add(BIAS);
  io.add(SLOT_IDX);
  io.add_in_place(cfg.mode == RSSM_CONV1D_UPDATE ? STATE : WINDOWS);
  io.y_like = X;  // y: update [b, C], verify [b, T, C]
  return io;
}

DataType Conv1d::role_type(int role, Cfg const& cfg) {
  switch (role) {
    case X: return trt_type(cfg.act_dtype);
    case WEIGHT:
    case BIAS: return trt_type(cfg.weight_dtype);
    case ACCEPTED:
    case SLOT_IDX: return DataType::kINT32;
    default: return trt_type(cfg.state_dtype);  // STATE, WINDOWS
  }
}

Shape Conv1d::dims(int role, Cfg const& cfg) {
  const int64_t C = cfg.channels, k = cfg.kernel_size, T = cfg.num_tokens;
  switch (role) {
    case X: return cfg.mode == RSSM_CONV1D_UPDATE ? Shape{kBatch, C} : Shape{kBatch, T, C};
    case WEIGHT: return {C, k};
    case BIAS: return {C};
    case ACCEPTED:
    case SLOT_IDX: return {kBatch};
    case STATE: return {kSlots, C, k - 1};
    default: return {kSlots, C, k - 1 + T};  // WINDOWS
  }
}

// Everything the configuration decides, dense (kLINEAR) strides included.
static void fill_config(Cfg const& cfg, rssm_conv1d_params& p) {
  p.mode = cfg.mode, p.channels = cfg.channels, p.kernel_size = cfg.kernel_size, p.num_tokens = cfg.num_tokens;
  p.pad_slot_id = cfg.pad_slot_id, p.silu = cfg.silu;
  p.state_dtype = cfg.state_dtype, p.act_dtype = cfg.act_dtype, p.weight_dtype = cfg.weight_dtype;
  const int64_t width = cfg.kernel_size - 1 + (cfg.mode == RSSM_CONV1D_UPDATE ? 0 : cfg.num_tokens);
  p.state_channel_stride = width;
  p.state_slot_stride = int64_t{cfg.channels} * width;
  const int64_t tokens = cfg.mode == RSSM_CONV1D_VERIFY ? cfg.num_tokens : 1;
  p.x_token_stride = p.y_token_stride = cfg.channels;
  p.x_batch_stride = p.y_batch_stride = tokens * cfg.channels;
}

bool Conv1d::validate(Cfg const& cfg, std::string& error) {
  // The C ABI's validation is the one table of supported values (k, T per mode, dtype combinations); it reads
  // no memory, so stand-in addresses are enough.
  rssm_conv1d_params p{};
  void* const fake = validation_address();
  fill_config(cfg, p);
  p.batch = 1, p.num_slots = 1;
  p.state = fake;
  p.accepted = static_cast<int32_t const*>(fake);
  p.x = p.weight = p.y = fake;
  if (rssm_conv1d_validate(&p, sizeof(p)) != RSSM_OK) {
    error = rssm_last_error();
    return false;
  }
  return true;
}

rssm_status Conv1d::launch(Cfg const& cfg, Tensors<kRoles> const& t, cudaStream_t stream) {
  rssm_conv1d_params p{};
  fill_config(cfg, p);
  const Role pool = cfg.mode == RSSM_CONV1D_UPDATE ? STATE : WINDOWS;
  p.batch = static_cast<int32_t>(t.dim(cfg.mode == RSSM_CONV1D_COMMIT ? ACCEPTED : X, 0));
  p.num_slots = static_cast<int32_t>(t.dim(pool, 0));
  p.state = t.inout(pool);  // WRITTEN: the slots of non-padding rows (commit: rows with a in 1..T)
  p.slot_idx = static_cast<int32_t const*>(t.in(SLOT_IDX));
  p.accepted = static_cast<int32_t const*>(t.in(ACCEPTED));
  p.x = t.in(X), p.weight = t.in(WEIGHT), p.bias = t.in(BIAS);
  p.y = t.y();
  return rssm_conv1d(&p, sizeof(p), stream);
}

}  // namespace trt
}  // namespace replayssm
