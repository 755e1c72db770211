// CUDA Experts backend "cuda_w4a16_grouped": NVFP4 / MXFP4 expert weights on SM90 as W4A16
// (moekit/gemm/w4a16.hpp). Standard activation format, modular, ReducePolicy::kAlreadyReduced.
// apply(), all on the stream and graph-capturable (no host sync, no allocation):
//   permute (expert_offsets, sorted_ids, permuted_row; cuda::detail::permute_by_expert)
//   (+ sorted_tokens) -> (router weight on the input: round the prepare's f32 rows x * w to bf16)
//   -> W4A16 GEMM1 gathering its rows itself (row_index = sorted_tokens) with bias +
//   SiLU-and-mul / SwiGLU-OAI fused -> W4A16 GEMM2 (+ bias; a programmatic dependent of GEMM1)
//   -> weighted top-k sum into [M, H] bf16 (cuda::detail::weighted_reduce_bf16).
// Above gemm::kWgmmaMinRowsPerExpert (8) rows per expert the GEMMs run the wgmma tile, which reads
// its rows in order through TMA: the routed rows are gathered and put in the wgmma K order in
// one pass first (gemm::w4a16_to_wgmma_k_order with row_index = sorted_tokens), and GEMM1 writes
// GEMM2's rows in that order.
// At decode sizes (tokens * top_k <= cuda::detail::decode_routing_max_rows(), tile decode8) the
// same in two kernels (gemm::DecodeRouting): both GEMMs sort the rows by expert themselves from
// topk_ids, and GEMM2 runs the weighted sum in its epilogue; the same bits.
// prepare_weights() shuffles the weights on the host (w4a16_shuffle_weights, experts in parallel)
// and keeps device copies; NVFP4 global (encode) scales become per-expert alphas 1/gs.
#pragma once

#include <cstdint>
#include <memory>

#include "moekit/framework/experts.hpp"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::cuda {

std::unique_ptr<ModularExperts> make_w4a16_grouped_experts(const MoeProblem& problem);

namespace detail {

// gemm::w4a16_shuffle_weights over [E, N, K/2] codes / [E, N, K/sfv] LINEAR scales, one expert per
// parallel_for task (the host shuffle is ~10 ns per code single-threaded: minutes for the large
// presets). Output identical to the single call.
void w4a16_shuffle_per_expert(gemm::W4Format format, std::int64_t num_experts, std::int64_t n,
                              std::int64_t k, bool gated, const std::uint8_t* codes,
                              const std::uint8_t* scales, std::uint8_t* out_codes,
                              std::uint8_t* out_scales);

}  // namespace detail

}  // namespace moekit::cuda
