// CUDA Experts backend "cuda_w4a16_grouped": NVFP4 / MXFP4 expert weights on SM90 as W4A16
// (moekit/gemm/w4a16.hpp). Standard activation format, modular, ReducePolicy::kAlreadyReduced.
// apply(), all on the stream and graph-capturable (no host sync, no allocation):
//   permute (expert_offsets, sorted_ids, permuted_row; cuda::detail::permute_by_expert)
//   -> gather rows -> W4A16 GEMM1 with bias + SiLU-and-mul / SwiGLU-OAI fused -> W4A16 GEMM2 (+ bias)
//   -> weighted top-k sum into [M, H] bf16 (cuda::detail::weighted_reduce_bf16).
// prepare_weights() shuffles the weights on the host (w4a16_shuffle_weights) and keeps device
// copies; NVFP4 global (encode) scales become per-expert alphas 1/gs.
#pragma once

#include <memory>

#include "moekit/framework/experts.hpp"

namespace moekit::cuda {

std::unique_ptr<ModularExperts> make_w4a16_grouped_experts(const MoeProblem& problem);

}  // namespace moekit::cuda
