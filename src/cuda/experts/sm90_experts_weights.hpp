// Internal: the weights of the SM90 grouped experts in the layout their kernels read, made once by
// prepare_weights (host work + one copy to the device).
//   bf16, fp8 block: the checkpoint layout [E, N, K] as is (used in place when already on the
//     device), fp8 with its 128x128 scales;
//   W4A16: codes / scales shuffled (gemm/w4a16/sm90_w4a16_weight_shuffle.hpp), NVFP4's per-expert
//     global (encode) scale gs as the decode factor 1 / gs;
//   W4A8: codes / scales converted exactly to e4m3 with a per-row factor
//     (gemm/w4a8/sm90_w4a8_weight_layout.hpp); weights whose scales span more than e4m3 can hold
//     are refused, naming the matrix, expert and row.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/gemm/grouped_gemm.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit::cuda {

struct Sm90Matrix {
  Tensor values_owned, scales_owned;  // device copies (empty when used in place)
  const void* values = nullptr;       // device
  const void* scales = nullptr;       // device: fp8 f32 scales, or the 4-bit layouts' bytes
  Tensor expert_scale;                // W4A16 NVFP4: f32 [E]
  Tensor row_scale;                   // W4A8: f32 [E * N]
};

struct Sm90Weights {
  Sm90Matrix w13, w2;
  Tensor w13_bias, w2_bias;  // device f32 [E, 2I] / [E, H] (layers with biases)
  // bf16 / fp8 with an expert map and biases: GEMM2's bias by GLOBAL expert id, f32
  // [E_global, H] (other ranks' rows zero, never read), for the weighted reduce, which indexes
  // the bias by the slot's top-k id.
  Tensor w2_bias_global;
  // Weights and K allow 16-byte TMA boxes (the bf16 decode kernel's weight ring).
  bool aligned16 = false;
};

// `what`: the experts' name, for errors. Throws moekit::Error naming the tensor on a bad shape,
// dtype or value (W4A8: scales not representable).
Sm90Weights prepare_sm90_weights(gemm::GemmScheme scheme, const MoeProblem& problem,
                                 const MoeWeights& weights, const std::string& what);

// The W4A16 weight shuffle over [E, N, K/2] codes / [E, N, K/sfv] LINEAR scales, one expert per
// parallel_for task (the host shuffle is ~10 ns per code single-threaded: minutes for the large
// presets). Output identical to one gemm::w4a16_shuffle_weights call.
void w4a16_shuffle_per_expert(QuantScheme format, std::int64_t num_experts, std::int64_t n,
                              std::int64_t k, bool gated, const std::uint8_t* codes,
                              const std::uint8_t* scales, std::uint8_t* out_codes,
                              std::uint8_t* out_scales);

}  // namespace moekit::cuda
