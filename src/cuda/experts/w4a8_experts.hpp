// CUDA Experts backend "cuda_w4a8_grouped": MXFP4 expert weights x fp8 (e4m3, per-token scale)
// activations on SM90's fp8 tensor cores (moekit/gemm/w4a8.hpp). Standard activation format,
// modular, ReducePolicy::kAlreadyReduced. apply(), all on the stream and graph-capturable (no host
// sync, no allocation):
//   permute (expert_offsets, sorted_ids, permuted_row) -> gather the prepare's e4m3 token rows
//   and their scales in expert order -> W4A8 GEMM1 with bias + SiLU-and-mul /
//   SwiGLU-OAI fused -> bf16 [M*k, I] -> per-row fp8 quantization (the quantize op, CUDA backend)
//   -> W4A8 GEMM2 (+ bias) -> weighted top-k sum into [M, H] bf16.
// prepare_weights() converts the weights on the host (w4a8_prepare_weights, experts in parallel)
// and refuses, naming the matrix, expert and row, weights whose block scales are not exactly
// representable in e4m3 (a row spanning more than 15 binades of scale); cuda_w4a16_grouped runs
// those with bf16 activations.
#pragma once

#include <memory>

#include "moekit/framework/experts.hpp"

namespace moekit::cuda {

std::unique_ptr<ModularExperts> make_w4a8_grouped_experts(const MoeProblem& problem);

}  // namespace moekit::cuda
