// Inputs for the tests that run the `moekit` binary: a tiny bf16 Qwen3-MoE checkpoint written by
// moekit's own exporter (several MoE layers, so that a quantize run can be stopped between two),
// replay files, and a byte-exact snapshot of a directory (to show an input was not modified).
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/io_test_util.hpp"
#include "moekit/io/moe_export.hpp"
#include "moekit/io/safetensors.hpp"
#include "moekit/moe/random_weights.hpp"

namespace moekit::clitest {

// E=4, k=2, H=64, I=128, RenormalizeNaive; layers 0..layers-1 are all MoE layers, one
// safetensors file each, plus a config.json and a tokenizer file (a "small side file").
inline MoeLayerConfig write_tiny_checkpoint(const std::string& dir, std::uint64_t seed,
                                            int layers = 3) {
  MoeLayerConfig c;
  c.name = "qwen3_moe";
  c.num_experts = 4;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.routing.top_k = 2;
  c.routing.method = RoutingMethod::kRenormalizeNaive;
  for (int l = 0; l < layers; ++l) {
    const MoeWeights w = random_moe_weights(c, QuantConfig{QuantScheme::kBF16}, seed + 10 * l);
    const RouterWeights r = random_router_weights(c, seed + 10 * l + 1);
    const auto tensors =
        io::export_moe_layer(w, r, io::CheckpointFormat::kBF16, l, io::ExpertNaming::kQwen);
    io::write_safetensors(dir + "/model-" + std::to_string(l) + ".safetensors",
                          io::named_views(tensors));
  }
  std::ofstream(dir + "/config.json")
      << R"({"model_type":"qwen3_moe","num_hidden_layers":)" << layers
      << R"(,"hidden_size":64,"num_experts":4,"num_experts_per_tok":2,)"
      << R"("moe_intermediate_size":128,"norm_topk_prob":true})";
  std::ofstream(dir + "/tokenizer.json") << R"({"version":"1.0"})";
  return c;
}

// Every file under `dir` (relative path -> bytes).
inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    files[std::filesystem::relative(e.path(), dir).string()] = ss.str();
  }
  return files;
}

// Names in `dir` (not recursive), sorted: what a failed write must not have added to.
inline std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace moekit::clitest
