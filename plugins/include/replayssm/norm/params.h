// Parameters of the gated RMSNorm family (the SSM mixers' output norm), one POD struct, C compatible. Same
// conventions as the other families: sizes int32, strides int64 in elements, filled by one host function per
// adapter, validated by rssm_gated_rmsnorm_validate, passed by value to the kernel; new fields go at the end
// (rssm_gated_rmsnorm_params_size checks the size). trtllm_replayssm/ops/norm.py holds the reference (the
// specification, equal to transformers' modules).
//
// Per row r and group g of group_size elements (columns g*gs .. g*gs+gs-1), A the activation dtype, rA() a
// rounding to A, all other arithmetic in fp32, silu(z) = z / (1 + exp(-z)):
//   gate first (Nemotron-H MambaRMSNormGated, norm_before_gate = 0):
//     h = y * silu(gate);  out = rA(weight * rA(h * rsqrt(mean_g(h^2) + eps)))
//   norm first (Qwen3.5 gated RMSNorm, norm_before_gate = 1):
//     n = rA(y * rsqrt(mean_g(y^2) + eps));  p = weight * n, rounded to A when weight is in A;
//     out = rA(p * silu(gate))
// out is the module's output cast to A (the gate-first module returns fp32 when the weight is fp32).
#pragma once
#include <stdint.h>

#include "replayssm/common/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rssm_gated_rmsnorm_params {
  // ---- sizes ----
  int32_t rows;              // rows of y, gate and out (>= 0)
  int32_t num_groups;        // G: groups per row, normalised independently
  int32_t group_size;        // gs: a multiple of 8 in 8..8192; a row holds G * gs elements
  int32_t act_dtype;         // rssm_dtype of y, gate and out
  int32_t weight_dtype;      // rssm_dtype of weight: fp32 or act_dtype
  int32_t norm_before_gate;  // 0: gate first (Nemotron-H); 1: norm first (Qwen3.5)
  float eps;                 // added to the mean of squares; positive and finite

  // ---- tensors (each row's G * gs elements contiguous) ----
  const void* y;       // [rows, G * gs], act_dtype
  const void* gate;    // [rows, G * gs], act_dtype (e.g. a strided slice of the input projection's output)
  const void* weight;  // [G * gs] contiguous, weight_dtype
  void* out;           // [rows, G * gs], act_dtype. WRITTEN: every element of every row

  int64_t y_row_stride, gate_row_stride, out_row_stride;
} rssm_gated_rmsnorm_params;

#ifdef __cplusplus
}
#endif
