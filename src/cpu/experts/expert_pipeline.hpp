// Internal: the per-expert MLP of the CPU experts, in the CPU reference's exact arithmetic
// (src/cpu/moe/moe_reference.cpp): dequantized fp32 weights, cpu::gemm_rows_nt (each output
// element depends only on its input row and weight row, so grouping does not change bits),
// "c += bias" after each GEMM, activation_reference_rows, and the GEMM2 input quantized and
// dequantized as ONE [rows, I] tensor when activations are quantized.
#pragma once

#include <cstdint>

#include "framework/byte_carver.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::cpu {

struct PipelineRows {
  const std::int64_t* expert_begin = nullptr;  // [E_local + 1]: rows of local expert e are
                                               // [expert_begin[e], expert_begin[e] + count[e])
  const std::int64_t* expert_count = nullptr;  // [E_local]
  const float* const* a_rows = nullptr;        // [rows] GEMM1 input row (H floats) per row
  float* const* out_rows = nullptr;            // [rows] GEMM2 output row (H floats) per row
  std::int64_t rows = 0;                       // rows of the intermediate (incl. padding rows)
};

// Scratch of run_expert_pipeline for `rows` rows: g1 [rows, N1] and intermediate [rows, I] from
// ws13, one expert's dequantized weights from ws2.
struct PipelineScratch {
  float* g1 = nullptr;
  float* intermediate = nullptr;
  float* weights = nullptr;
};
PipelineScratch take_pipeline_scratch(detail::ByteCarver& ws13, std::int64_t rows,
                                      const MoeProblem& problem);
TensorSpec pipeline_weight_scratch(const MoeProblem& problem);  // the ws2 spec

// Runs GEMM1 (+bias) -> activation -> [quantize+dequantize intermediate] -> GEMM2 (+bias) for
// every local expert. Padding rows of the intermediate (rows not owned by any expert) are zero.
void run_expert_pipeline(const MoeProblem& problem, const MoeWeights& weights,
                         const PipelineRows& rows, const PipelineScratch& scratch);

// Dequantizes an activation QuantizedView ([M, K] or [B, M, K]) into f32 (kBF16: widens bf16 /
// copies f32).
void dequantize_activations(const QuantizedView& a, float* out);

// The [1] static activation scale a GEMM input uses for `scheme` (NVFP4 / FP8 per-tensor), or
// absent.
TensorView static_scale_for(const Tensor& scales, QuantScheme scheme);

// Shared checks of the CPU experts: host weights prepared, quant scheme/activation supported.
Support cpu_experts_supports(const MoeProblem& problem);
void check_cpu_weights(const MoeProblem& problem, const MoeWeights& weights);

}  // namespace moekit::cpu
