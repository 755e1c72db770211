// Internal: the standard-format CPU experts path (permute -> pipeline -> contiguous or reduced
// output), shared by the standard modular experts and the monolithic experts.
#pragma once

#include "framework/byte_carver.hpp"
#include "moekit/framework/experts.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/moe/weights.hpp"

namespace moekit::cpu {

// Lays out (and, with `run`, computes) the standard path for m tokens. policy: kContiguous
// (output f32 [M, k, H], non-local slots zero) or kAlreadyReduced (output [M, H] f32 or bf16).
void run_standard_core(const MoeProblem& problem, const MoeWeights* weights, std::int64_t m,
                       const QuantizedView& a1q, const TensorView& topk_ids,
                       const TensorView& topk_weights, ReducePolicy policy,
                       const TensorView& output, detail::ByteCarver& ws13, const TensorView& ws2,
                       bool run);

TensorView expert_map_view(const MoeProblem& problem);  // absent when the identity

}  // namespace moekit::cpu
