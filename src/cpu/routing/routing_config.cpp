// RoutingConfig: names, parsing, printing and validation.
#include <cmath>
#include <sstream>
#include <string>

#include "moekit/core/error.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

namespace {
constexpr RoutingMethod kAllMethods[] = {
    RoutingMethod::kDefault,    RoutingMethod::kRenormalize, RoutingMethod::kRenormalizeNaive,
    RoutingMethod::kTopK,       RoutingMethod::kSigmoid,     RoutingMethod::kSigmoidRenorm,
    RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4,      RoutingMethod::kMiniMax2,
};
}  // namespace

std::string_view routing_method_name(RoutingMethod m) {
  switch (m) {
    case RoutingMethod::kDefault:
      return "default";
    case RoutingMethod::kRenormalize:
      return "renormalize";
    case RoutingMethod::kRenormalizeNaive:
      return "renormalize_naive";
    case RoutingMethod::kTopK:
      return "topk";
    case RoutingMethod::kSigmoid:
      return "sigmoid";
    case RoutingMethod::kSigmoidRenorm:
      return "sigmoid_renorm";
    case RoutingMethod::kDeepSeekV3:
      return "deepseek_v3";
    case RoutingMethod::kLlama4:
      return "llama4";
    case RoutingMethod::kMiniMax2:
      return "minimax2";
  }
  return "?";
}

RoutingMethod parse_routing_method(std::string_view name) {
  std::string valid;
  for (RoutingMethod m : kAllMethods) {
    if (routing_method_name(m) == name) return m;
    if (!valid.empty()) valid += '|';
    valid += routing_method_name(m);
  }
  throw_arg_error("parse_routing_method", "routing method", "one of " + valid, std::string(name));
}

bool routing_uses_bias(RoutingMethod m) {
  return m == RoutingMethod::kDeepSeekV3 || m == RoutingMethod::kMiniMax2;
}

bool routing_weight_on_input(RoutingMethod m) { return m == RoutingMethod::kLlama4; }

std::string RoutingConfig::str() const {
  std::ostringstream os;
  os << routing_method_name(method) << "(top_k=" << top_k;
  if (method == RoutingMethod::kDeepSeekV3)
    os << ", groups=" << num_expert_groups << ", topk_group=" << topk_group;
  if (method == RoutingMethod::kDeepSeekV3 || method == RoutingMethod::kMiniMax2)
    os << ", scale=" << routed_scaling_factor;
  os << ")";
  return os.str();
}

void RoutingConfig::validate(int num_experts) const {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  MOEKIT_CHECK_ARG(top_k >= 1 && top_k <= num_experts, "top_k",
                   "in [1, num_experts=" + std::to_string(num_experts) + "]", top_k);
  MOEKIT_CHECK_ARG(std::isfinite(routed_scaling_factor) && routed_scaling_factor > 0.0f,
                   "routed_scaling_factor", "finite and > 0", routed_scaling_factor);
  if (method == RoutingMethod::kDeepSeekV3) {
    MOEKIT_CHECK_ARG(
        num_expert_groups >= 1 && num_experts % num_expert_groups == 0, "num_expert_groups",
        ">= 1 and dividing num_experts=" + std::to_string(num_experts), num_expert_groups);
    MOEKIT_CHECK_ARG(topk_group >= 1 && topk_group <= num_expert_groups, "topk_group",
                     "in [1, num_expert_groups=" + std::to_string(num_expert_groups) + "]",
                     topk_group);
    const int kept_experts = topk_group * (num_experts / num_expert_groups);
    MOEKIT_CHECK_ARG(
        top_k <= kept_experts, "top_k",
        "<= topk_group * num_experts / num_expert_groups = " + std::to_string(kept_experts), top_k);
  } else {
    // Grouping is a DeepSeekV3 notion; a grouped config for another method is a mistake.
    MOEKIT_CHECK_ARG(num_expert_groups == 1, "num_expert_groups",
                     "1 for routing method " + std::string(routing_method_name(method)),
                     num_expert_groups);
    MOEKIT_CHECK_ARG(topk_group == 1, "topk_group",
                     "1 for routing method " + std::string(routing_method_name(method)),
                     topk_group);
  }
}

}  // namespace moekit
