// The shape and semantics of one MoE layer (what a model's config.json says), and the presets of
// docs/performance.md. Separate from kernel configs (tiles, stages), which live with each backend.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moekit/activation/activation.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

struct MoeLayerConfig {
  std::string name;                    // preset name or "custom"
  int num_experts = 0;                 // E (global)
  std::int64_t hidden_size = 0;        // H
  std::int64_t intermediate_size = 0;  // I (per expert)
  int num_shared_experts = 0;          // informational: shared experts run as a dense MLP elsewhere
  RoutingConfig routing;               // includes top_k
  ActivationConfig activation;
  bool has_bias = false;         // per-expert biases after each GEMM (gpt-oss)
  bool has_router_bias = false;  // the router linear layer has a bias (gpt-oss)
  int top_k() const { return routing.top_k; }
  // E >= 1, H >= 1, I >= 1, routing valid for E, activation valid; throws moekit::Error naming
  // the bad field.
  void validate() const;
  std::string str() const;
};

// Presets of docs/performance.md: mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3,
// gpt-oss-20b, gpt-oss-120b, llama4-scout, kimi-k2, plus "tiny" (the embedded default job:
// E=8, k=2, H=256, I=512, SiLU, RenormalizeNaive).
// Notes: mixtral's router is "softmax -> top-k, renormalized", i.e. kRenormalizeNaive. gpt-oss
// checkpoints interleave gate/up rows; moekit's MoeWeights hold halves (loaders de-interleave), so
// the preset's activation layout is kHalves.
const MoeLayerConfig& layer_preset(std::string_view name);  // throws listing valid names
std::vector<std::string> layer_preset_names();

// A smaller copy of a layer for CPU tests and tools: hidden / intermediate / expert count
// replaced where the argument is > 0 (routing groups and top-k kept; validated). The name becomes
// "<name>@E<e>xH<h>xI<i>".
MoeLayerConfig scaled_layer_config(const MoeLayerConfig& config, std::int64_t hidden_size,
                                   std::int64_t intermediate_size, int num_experts = 0);

}  // namespace moekit
