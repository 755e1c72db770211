// Routing: router logits [M, E] -> topk_ids i32 [M, k], topk_weights f32 [M, k].
// Exact semantics of each method are those of the CPU reference (src/cpu/routing/); ties go to the
// lower expert index.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moekit/core/tensor.hpp"

namespace moekit {

enum class RoutingMethod : std::uint8_t {
  kDefault,           // softmax over E -> top-k (weights not renormalized)
  kRenormalize,       // top-k on logits -> softmax over the k
  kRenormalizeNaive,  // softmax -> top-k -> renormalize to sum 1
  kTopK,              // top-k on logits, weights = the logits
  kSigmoid,           // sigmoid -> top-k
  kSigmoidRenorm,     // sigmoid -> top-k -> renormalize
  kDeepSeekV3,        // sigmoid + correction bias, grouped top-k (see architecture.md)
  kLlama4,            // top-1, sigmoid of the chosen logit (applied to the input)
  kMiniMax2,          // sigmoid + bias -> top-k -> scaled-sum normalize
};

struct RoutingConfig {
  RoutingMethod method = RoutingMethod::kRenormalize;
  int top_k = 1;
  int num_expert_groups = 1;            // DeepSeekV3
  int topk_group = 1;                   // DeepSeekV3
  float routed_scaling_factor = 1.0f;   // DeepSeekV3 / MiniMax2
  std::string str() const;
};

std::string_view routing_method_name(RoutingMethod m);  // "default", "renormalize", ...
RoutingMethod parse_routing_method(std::string_view name);
bool routing_uses_bias(RoutingMethod m);  // DeepSeekV3, MiniMax2 take a correction bias [E] f32

// logits: [M, E] f32 or bf16; correction_bias: [E] f32 (required iff routing_uses_bias).
// Validates top_k <= E, groups dividing E, topk_group <= groups, etc.
void route_reference(const TensorView& logits, const TensorView& correction_bias,
                     const RoutingConfig& config, const TensorView& topk_ids,
                     const TensorView& topk_weights);

}  // namespace moekit
