// Helpers of the framework tests: small layers, expert slicing for EP, bitwise comparison.
// small_layer uses k = 4 by default: with k <= 2 an fp32 sum is order-independent, so a wrong
// reduction order would go unnoticed.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "moekit/framework/problem.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::testing {

inline MoeLayerConfig small_layer(RoutingMethod method, Activation act, int e = 8, int k = 4,
                                  std::int64_t h = 128, std::int64_t i = 64) {
  MoeLayerConfig c;
  c.name = "test";
  c.num_experts = e;
  c.hidden_size = h;
  c.intermediate_size = i;
  c.routing.method = method;
  c.routing.top_k = method == RoutingMethod::kLlama4 ? 1 : k;
  if (method == RoutingMethod::kDeepSeekV3) {
    c.routing.num_expert_groups = 4;
    c.routing.topk_group = 2;
    c.routing.routed_scaling_factor = 2.5f;
  }
  if (method == RoutingMethod::kMiniMax2) c.routing.routed_scaling_factor = 1.5f;
  c.activation.kind = act;
  c.has_bias = act == Activation::kSwigluOai;
  return c;
}

// The local experts of a rank (expert_map >= 0), in local order.
inline MoeWeights local_weights(const MoeWeights& w, const ParallelConfig& p) {
  return select_experts(w, p.local_experts(w.num_experts));
}

// Index of the first element whose bits differ, or -1. f32 vs f32, or bf16 vs f32 reference
// rounded to bf16.
inline std::int64_t first_bit_difference(const TensorView& got, const TensorView& ref_f32) {
  const std::int64_t n = ref_f32.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float r = ref_f32.ptr<const float>()[i];
    if (got.dtype == DType::kF32) {
      if (f32_to_bits(got.ptr<const float>()[i]) != f32_to_bits(r)) return i;
    } else if (got.ptr<const std::uint16_t>()[i] != float_to_bf16(r)) {
      return i;
    }
  }
  return -1;
}

inline std::string describe_difference(const TensorView& got, const TensorView& ref,
                                       std::int64_t i) {
  if (i < 0) return "identical";
  const float g = got.dtype == DType::kF32 ? got.ptr<const float>()[i]
                                           : bf16_to_float(got.ptr<const std::uint16_t>()[i]);
  return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", reference " +
         std::to_string(ref.ptr<const float>()[i]);
}

}  // namespace moekit::testing
