// Internal: pieces shared by the CPU PrepareFinalize implementations.
#pragma once

#include "framework/byte_carver.hpp"
#include "moekit/framework/experts.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::cpu {

// The activation QuantConfig prepare produces: the problem's, with LINEAR block scales.
QuantConfig dispatch_quant_config(const MoeProblem& problem);

// Quantizes the GEMM1 input of x [M, H] (scaled by topk_weights[:, 0] first when the routing method
// applies the weight on the input) into pieces taken from `carver`. With `run` false only the
// pieces are laid out (x may be a shape-only view). activation_quant kBF16: the input passes
// through (x itself, or the f32 scaled copy).
QuantizedView prepare_gemm1_input(detail::ByteCarver& carver, const MoeProblem& problem,
                                  const TensorView& x, const TensorView& topk_weights,
                                  const TensorView& static_scale, bool run);

// Support checks of the CPU prepare side (detail::prepare_input_supports).
Support cpu_prepare_supports(const MoeProblem& problem);

// source_row [M, k] for a contiguous [M, k, H] expert output: t*k + j, or -1 where topk_ids[t, j]
// is not a local expert.
void contiguous_source_rows(const MoeProblem& problem, const TensorView& topk_ids,
                            const TensorView& source_row);

// The finalize of the CPU PrepareFinalize implementations: weight + reduce per policy into output
// [M, H] (problem.activation_dtype). `rows` is the [M, k] source_row map for kContiguous /
// kBatchedPerExpert (filled by the caller), unused for kAlreadyReduced.
void cpu_finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                  const DispatchedActivations& dispatched, const TensorView& rows,
                  const TensorView& output);

// Converts / copies a [M, H] f32 or bf16 tensor into output (bf16 round-to-nearest-even).
void convert_rows(const TensorView& src, const TensorView& output);

}  // namespace moekit::cpu
