// The kernel Params (sm90_w4a16_grouped_gemm.cuh) of a bf16 / fp8 GroupedGemmArgs, shared by the
// configs that run on them: the decode config (sm90_bf16_decode_grouped_gemm.cu) and the wgmma
// config (sm90_bf16_fp8_wgmma_grouped_gemm.cuh).
#pragma once

#include <cuda_bf16.h>

#include "moekit/gemm/grouped_gemm.hpp"
#include "sm90_w4a16_grouped_gemm.cuh"

namespace moekit::gemm::sm90_w4a16 {

// The expert geometry, the output and the gated epilogue's bias / SwiGLU constants. The operands
// are the caller's to set (the decode kernel reads a / b through pointers, the wgmma kernel
// through tensor maps).
inline Params grouped_gemm_output_params(const GroupedGemmArgs& args) {
  Params p{};
  p.expert_offsets = args.expert_offsets;
  p.out = static_cast<__nv_bfloat16*>(args.d);
  p.ldo = args.ldd;
  p.num_experts = args.num_experts;
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  p.m = static_cast<int>(args.max_rows);
  if (args.gated != nullptr) {
    p.bias = args.gated->bias;
    p.swiglu_alpha = args.gated->swiglu_alpha;
    p.swiglu_limit = args.gated->swiglu_limit;
  }
  return p;
}

}  // namespace moekit::gemm::sm90_w4a16
