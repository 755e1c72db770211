// Routing: router logits [M, E] -> topk_ids i32 [M, k], topk_weights f32 [M, k].
// Exact semantics of each method are those of the CPU reference (src/cpu/routing/):
// - Selection is made on a per-method "selection score" (below), in fp32. Softmax and sigmoid are
//   monotone, so methods that select after a softmax/sigmoid select on the logits themselves: the
//   same experts as the exact softmax/sigmoid, without ties created by rounding.
// - Ties go to the lower expert index. NaN selection scores rank below every number.
// - Output order within a row: descending selection score, ties lower index first.
// - Weights are computed in float64 from the fp32 scores and rounded once to fp32.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moekit/core/tensor.hpp"

namespace moekit {

enum class RoutingMethod : std::uint8_t {
  kDefault,           // select by logit; w = softmax over all E of the chosen (not renormalized)
  kRenormalize,       // select by logit; w = softmax over the k chosen logits
  kRenormalizeNaive,  // select by logit; w = softmax over E, renormalized over the k to sum 1
                      // (equals kRenormalize up to rounding; what Mixtral / Qwen3 compute)
  kTopK,              // select by logit; w = the chosen logits
  kSigmoid,           // select by logit; w = sigmoid(logit)
  kSigmoidRenorm,     // select by logit; w = sigmoid(logit) / sum of the k chosen sigmoids
  kDeepSeekV3,        // s = sigmoid(l), b = s + bias (fp32); group score = sum of the top-2 b in
                      // each of G groups (top-1 if a group has one expert); keep topk_group
                      // groups (highest score, ties lower group); select the top k by b within the
                      // kept groups; w = s / (sum of chosen s + 1e-20) * routed_scaling_factor
  kLlama4,            // select by logit; w = sigmoid(logit). The MoE layer multiplies the expert
                      // INPUT by w (not its output). Llama 4 uses k = 1.
  kMiniMax2,          // s = sigmoid(l), b = s + bias; select top k by b;
                      // w = s / (sum of chosen s + 1e-20) * routed_scaling_factor
};

struct RoutingConfig {
  RoutingMethod method = RoutingMethod::kRenormalize;
  int top_k = 1;
  int num_expert_groups = 1;           // DeepSeekV3 (1 = no grouping)
  int topk_group = 1;                  // DeepSeekV3
  float routed_scaling_factor = 1.0f;  // DeepSeekV3 / MiniMax2
  std::string str() const;
  // Checks the config against E experts: 1 <= top_k <= E; for DeepSeekV3 groups >= 1 dividing E,
  // 1 <= topk_group <= groups, top_k <= topk_group * E / groups; finite scaling factor > 0.
  void validate(int num_experts) const;
};

std::string_view routing_method_name(RoutingMethod m);  // "default", "renormalize",
                                                        // "renormalize_naive", "topk", "sigmoid",
                                                        // "sigmoid_renorm", "deepseek_v3",
                                                        // "llama4", "minimax2"
RoutingMethod parse_routing_method(std::string_view name);  // throws listing the valid names
bool routing_uses_bias(RoutingMethod m);  // DeepSeekV3, MiniMax2 take a correction bias [E] f32
bool routing_weight_on_input(RoutingMethod m);  // Llama4: the weight scales the expert input

// logits: [M, E] f32 or bf16 (host, contiguous); correction_bias: [E] f32 (required iff
// routing_uses_bias, must be absent otherwise). topk_ids: i32 [M, k], topk_weights: f32 [M, k]
// (host, contiguous, preallocated). Validates everything and throws moekit::Error naming the
// argument. M = 0 is allowed.
void route_reference(const TensorView& logits, const TensorView& correction_bias,
                     const RoutingConfig& config, const TensorView& topk_ids,
                     const TensorView& topk_weights);

// Owning variant (host).
struct RoutingResult {
  Tensor topk_ids;      // i32 [M, k]
  Tensor topk_weights;  // f32 [M, k]
};
RoutingResult route_reference(const TensorView& logits, const TensorView& correction_bias,
                              const RoutingConfig& config);

}  // namespace moekit
