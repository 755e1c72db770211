// MoeLayerConfig: validation, printing, the presets of docs/performance.md and scaled copies.
#include "moekit/moe/layer_config.hpp"

#include <sstream>
#include <string>

#include "moekit/core/error.hpp"

namespace moekit {

namespace {

MoeLayerConfig make(const char* name, int e, int k, std::int64_t h, std::int64_t i, int shared,
                    RoutingMethod method) {
  MoeLayerConfig c;
  c.name = name;
  c.num_experts = e;
  c.hidden_size = h;
  c.intermediate_size = i;
  c.num_shared_experts = shared;
  c.routing.method = method;
  c.routing.top_k = k;
  return c;
}

MoeLayerConfig deepseek_style(const char* name, int e, std::int64_t h, std::int64_t i, int groups,
                              int topk_group, float scale) {
  MoeLayerConfig c = make(name, e, 8, h, i, 1, RoutingMethod::kDeepSeekV3);
  c.routing.num_expert_groups = groups;
  c.routing.topk_group = topk_group;
  c.routing.routed_scaling_factor = scale;
  return c;
}

MoeLayerConfig gpt_oss(const char* name, int e) {
  MoeLayerConfig c = make(name, e, 4, 2880, 2880, 0, RoutingMethod::kRenormalize);
  c.activation.kind = Activation::kSwigluOai;  // alpha 1.702, limit 7.0 (the defaults)
  c.has_bias = true;
  c.has_router_bias = true;
  return c;
}

const std::vector<MoeLayerConfig>& presets() {
  static const std::vector<MoeLayerConfig> all = [] {
    std::vector<MoeLayerConfig> v;
    v.push_back(make("tiny", 8, 2, 256, 512, 0, RoutingMethod::kRenormalizeNaive));
    // RenormalizeNaive (docs/performance.md, Presets) = softmax -> top-k -> renormalize.
    v.push_back(make("mixtral-8x7b", 8, 2, 4096, 14336, 0, RoutingMethod::kRenormalizeNaive));
    v.push_back(make("qwen3-30b-a3b", 128, 8, 2048, 768, 0, RoutingMethod::kRenormalizeNaive));
    v.push_back(make("qwen3-235b-a22b", 128, 8, 4096, 1536, 0, RoutingMethod::kRenormalizeNaive));
    v.push_back(deepseek_style("deepseek-v3", 256, 7168, 2048, 8, 4, 2.5f));
    v.push_back(gpt_oss("gpt-oss-20b", 32));
    v.push_back(gpt_oss("gpt-oss-120b", 128));
    v.push_back(make("llama4-scout", 16, 1, 5120, 8192, 1, RoutingMethod::kLlama4));
    v.push_back(deepseek_style("kimi-k2", 384, 7168, 2048, 1, 1, 2.827f));
    for (const auto& c : v) c.validate();
    return v;
  }();
  return all;
}

}  // namespace

void MoeLayerConfig::validate() const {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  MOEKIT_CHECK_ARG(hidden_size >= 1, "hidden_size", ">= 1", hidden_size);
  MOEKIT_CHECK_ARG(intermediate_size >= 1, "intermediate_size", ">= 1", intermediate_size);
  MOEKIT_CHECK_ARG(num_shared_experts >= 0, "num_shared_experts", ">= 0", num_shared_experts);
  routing.validate(num_experts);
  activation.validate();
}

std::string MoeLayerConfig::str() const {
  std::ostringstream os;
  os << name << ": E=" << num_experts << " k=" << top_k() << " H=" << hidden_size
     << " I=" << intermediate_size;
  if (num_shared_experts) os << " shared=" << num_shared_experts;
  os << " routing=" << routing.str() << " activation=" << activation.str();
  if (has_bias) os << " +expert biases";
  if (has_router_bias) os << " +router bias";
  return os.str();
}

const MoeLayerConfig& layer_preset(std::string_view name) {
  std::string valid;
  for (const auto& c : presets()) {
    if (c.name == name) return c;
    if (!valid.empty()) valid += '|';
    valid += c.name;
  }
  throw_arg_error("layer_preset", "preset", "one of " + valid, std::string(name));
}

std::vector<std::string> layer_preset_names() {
  std::vector<std::string> names;
  for (const auto& c : presets()) names.push_back(c.name);
  return names;
}

MoeLayerConfig scaled_layer_config(const MoeLayerConfig& config, std::int64_t hidden_size,
                                   std::int64_t intermediate_size, int num_experts) {
  MoeLayerConfig c = config;
  if (hidden_size > 0) c.hidden_size = hidden_size;
  if (intermediate_size > 0) c.intermediate_size = intermediate_size;
  if (num_experts > 0) c.num_experts = num_experts;
  c.name = config.name + "@E" + std::to_string(c.num_experts) + "xH" +
           std::to_string(c.hidden_size) + "xI" + std::to_string(c.intermediate_size);
  c.validate();
  return c;
}

}  // namespace moekit
