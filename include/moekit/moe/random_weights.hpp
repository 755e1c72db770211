// Deterministic random MoE layers for tests, tools and benchmarks: bf16 master weights drawn from
// a counter-based generator (the same seed gives the same bits on every machine and thread count),
// quantized into MoeWeights with the quant API.
// Scales are chosen so that every GEMM output is O(1) for O(1) inputs: a weight matrix with
// reduction length K has entries ~ N(0, 1/K) (standard deviation 1/sqrt(K)).
#pragma once

#include <cstdint>

#include "moekit/core/tensor.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/weights.hpp"

namespace moekit {

// Standard deviation of the optional biases (expert biases, router bias, correction bias): large
// enough that dropping a bias moves a layer's output far more than any tolerance.
inline constexpr float kRandomBiasStd = 0.1f;

// bf16 master weights (quant = kBF16): w13 [E, 2I, H] ~ N(0, 1/H), w2 [E, H, I] ~ N(0, 1/I),
// gated per config.activation; biases (f32 holding bf16-representable values, ~N(0, 0.1^2)) iff
// config.has_bias.
MoeWeights random_master_weights(const MoeLayerConfig& config, std::uint64_t seed);

// Quantizes bf16 master weights (w13 and w2 as batched [E, rows, K] tensors) into `quant` with the
// reference quantize op; biases and activation scales are copied.
MoeWeights quantize_moe_weights(const MoeWeights& master, const QuantConfig& quant);

// random_master_weights + quantize_moe_weights.
MoeWeights random_moe_weights(const MoeLayerConfig& config, const QuantConfig& quant,
                              std::uint64_t seed);

// Router: weight [E, H] f32 ~ N(0, 1/H); bias [E] iff config.has_router_bias; correction_bias [E]
// iff routing_uses_bias(config.routing.method).
RouterWeights random_router_weights(const MoeLayerConfig& config, std::uint64_t seed);

// Hidden states [M, H] ~ N(0, 1) in f32 or bf16.
Tensor random_hidden_states(std::int64_t tokens, std::int64_t hidden_size, DType dtype,
                            std::uint64_t seed);

// Fills dst[0, n) with N(mean, std^2) samples, element i depending only on (seed, stream, i).
void fill_random_normal(float* dst, std::int64_t n, float mean, float std, std::uint64_t seed,
                        std::uint64_t stream);

}  // namespace moekit
