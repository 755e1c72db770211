// Internal: the experts' gated activation between the grouped GEMMs (activation_kernels.cu), on raw
// device pointers with a device row count (graph-capturable with data-dependent row counts):
// [R, 2I] bf16 gate | up halves (plus GEMM1's per-expert bias) -> SiLU-and-mul or SwiGLU-OAI in
// fp32 (gated_math.cuh, the GEMM epilogues' math) -> [R, I] bf16, or -> e4m3 [R, I] in 1x128
// groups with scales f32 [R, I/128] (s = max(amax, 1e-10) / 448, q = e4m3(x / s), formats.md
// section 5): the fp8 block GEMM2's input. Only rows < *num_rows are touched.
#pragma once

#include <cstdint>

#include "moekit/activation/activation.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::cuda {

struct GatedActivationArgs {
  Activation kind = Activation::kSiluAndMul;         // kSiluAndMul or kSwigluOai
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // kSwigluOai
  // Optional GEMM1 bias, device f32 [E, 2I] (gate | up): row r of expert e (expert_offsets[e] <=
  // r < expert_offsets[e + 1], found on the device) gets gate + bias[e, c], up + bias[e, I + c].
  const float* bias = nullptr;
  const std::int32_t* expert_offsets = nullptr;  // device [E + 1] (required with bias)
  int num_experts = 0;                           // E (required with bias)
};

// gate_up: device bf16 [R, 2I] (row stride 2I); out: bf16 [R, I]. I % 8 == 0.
void gated_activation_bf16(const void* gate_up, void* out, std::int64_t max_rows,
                           std::int64_t intermediate, const std::int32_t* num_rows,
                           const GatedActivationArgs& act, StreamHandle stream);

// gate_up: device bf16 [R, 2I]; out_values: e4m3 [R, I]; out_scales: f32 [R, I/128]. I % 128 == 0.
void gated_activation_quant_fp8_block(const void* gate_up, void* out_values, float* out_scales,
                                      std::int64_t max_rows, std::int64_t intermediate,
                                      const std::int32_t* num_rows,
                                      const GatedActivationArgs& act, StreamHandle stream);

}  // namespace moekit::cuda
