// Presets (the table of docs/performance.md), scaled copies, MoeLayerConfig / MoeWeights
// validation and the deterministic random weights.
#include "moekit/moe/layer_config.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "moe/moe_test_util.hpp"
#include "moekit/moe/random_weights.hpp"

namespace moekit {
namespace {

using reftest::expect_error;

struct Row {
  const char* name;
  int e, k;
  std::int64_t h, i;
  int shared;
  RoutingMethod method;
  Activation act;
};

TEST(Presets, MatchPerformanceTable) {
  const Row rows[] = {
      {"tiny", 8, 2, 256, 512, 0, RoutingMethod::kRenormalizeNaive, Activation::kSiluAndMul},
      {"mixtral-8x7b", 8, 2, 4096, 14336, 0, RoutingMethod::kRenormalizeNaive,
       Activation::kSiluAndMul},
      {"qwen3-30b-a3b", 128, 8, 2048, 768, 0, RoutingMethod::kRenormalizeNaive,
       Activation::kSiluAndMul},
      {"qwen3-235b-a22b", 128, 8, 4096, 1536, 0, RoutingMethod::kRenormalizeNaive,
       Activation::kSiluAndMul},
      {"deepseek-v3", 256, 8, 7168, 2048, 1, RoutingMethod::kDeepSeekV3, Activation::kSiluAndMul},
      {"gpt-oss-20b", 32, 4, 2880, 2880, 0, RoutingMethod::kRenormalize, Activation::kSwigluOai},
      {"gpt-oss-120b", 128, 4, 2880, 2880, 0, RoutingMethod::kRenormalize, Activation::kSwigluOai},
      {"llama4-scout", 16, 1, 5120, 8192, 1, RoutingMethod::kLlama4, Activation::kSiluAndMul},
      {"kimi-k2", 384, 8, 7168, 2048, 1, RoutingMethod::kDeepSeekV3, Activation::kSiluAndMul},
  };
  EXPECT_EQ(layer_preset_names().size(), std::size(rows));
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    const MoeLayerConfig& c = layer_preset(r.name);
    EXPECT_EQ(c.name, r.name);
    EXPECT_EQ(c.num_experts, r.e);
    EXPECT_EQ(c.top_k(), r.k);
    EXPECT_EQ(c.hidden_size, r.h);
    EXPECT_EQ(c.intermediate_size, r.i);
    EXPECT_EQ(c.num_shared_experts, r.shared);
    EXPECT_EQ(c.routing.method, r.method);
    EXPECT_EQ(c.activation.kind, r.act);
    EXPECT_EQ(c.activation.layout, GateUpLayout::kHalves);
    EXPECT_EQ(c.has_bias, r.act == Activation::kSwigluOai);
  }
  const MoeLayerConfig& ds = layer_preset("deepseek-v3");
  EXPECT_EQ(ds.routing.num_expert_groups, 8);
  EXPECT_EQ(ds.routing.topk_group, 4);
  EXPECT_FLOAT_EQ(ds.routing.routed_scaling_factor, 2.5f);
  const MoeLayerConfig& kimi = layer_preset("kimi-k2");
  EXPECT_EQ(kimi.routing.num_expert_groups, 1);
  EXPECT_EQ(kimi.routing.topk_group, 1);
  EXPECT_FLOAT_EQ(kimi.routing.routed_scaling_factor, 2.827f);
  const MoeLayerConfig& oss = layer_preset("gpt-oss-20b");
  EXPECT_FLOAT_EQ(oss.activation.swiglu_alpha, 1.702f);
  EXPECT_FLOAT_EQ(oss.activation.swiglu_limit, 7.0f);
  EXPECT_TRUE(oss.has_router_bias);
}

TEST(Presets, UnknownNameListsValidOnes) {
  expect_error([] { layer_preset("mixtral"); }, {"preset", "mixtral-8x7b", "tiny", "got mixtral"});
}

TEST(Presets, ScaledCopyKeepsRouting) {
  MoeLayerConfig c = scaled_layer_config(layer_preset("deepseek-v3"), 256, 128, 64);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.routing.num_expert_groups, 8);
  EXPECT_EQ(c.name, "deepseek-v3@E64xH256xI128");
  // 60 experts do not split into 8 groups.
  expect_error([] { scaled_layer_config(layer_preset("deepseek-v3"), 256, 128, 60); },
               {"num_expert_groups"});
  MoeLayerConfig keep = scaled_layer_config(layer_preset("tiny"), 0, 64);
  EXPECT_EQ(keep.hidden_size, 256);
  EXPECT_EQ(keep.intermediate_size, 64);
}

TEST(LayerConfig, ValidateNamesField) {
  MoeLayerConfig c = layer_preset("tiny");
  c.hidden_size = 0;
  expect_error([&] { c.validate(); }, {"hidden_size"});
  c = layer_preset("tiny");
  c.routing.top_k = 9;
  expect_error([&] { c.validate(); }, {"top_k", "9"});
  c = layer_preset("tiny");
  c.num_experts = 0;
  expect_error([&] { c.validate(); }, {"num_experts"});
  EXPECT_NE(layer_preset("gpt-oss-20b").str().find("swiglu_oai"), std::string::npos);
}

// ---- random weights ---------------------------------------------------------------------------

TEST(RandomWeights, DeterministicAndScaled) {
  MOEKIT_REF_SEED(seed);
  const MoeLayerConfig c = scaled_layer_config(layer_preset("tiny"), 128, 96, 4);
  MoeWeights a = random_master_weights(c, seed), b = random_master_weights(c, seed);
  MoeWeights other = random_master_weights(c, seed + 1);
  ASSERT_EQ(a.w13.values.nbytes(), b.w13.values.nbytes());
  EXPECT_EQ(std::memcmp(a.w13.values.data(), b.w13.values.data(), a.w13.values.nbytes()), 0);
  EXPECT_EQ(std::memcmp(a.w2.values.data(), b.w2.values.data(), a.w2.values.nbytes()), 0);
  EXPECT_NE(std::memcmp(a.w13.values.data(), other.w13.values.data(), a.w13.values.nbytes()), 0);
  EXPECT_EQ(a.w13.values.shape(), (Shape{4, 192, 128}));
  EXPECT_EQ(a.w2.values.shape(), (Shape{4, 128, 96}));
  EXPECT_FALSE(a.w13_bias.defined());
  // Sample standard deviation of w13 ~ 1/sqrt(H), of w2 ~ 1/sqrt(I) (n = 98304 / 49152).
  auto stddev = [](const Tensor& t) {
    double s = 0, s2 = 0;
    const auto* p = t.ptr<const std::uint16_t>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      std::uint32_t u = static_cast<std::uint32_t>(p[i]) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      s += f;
      s2 += double(f) * f;
    }
    const double n = double(t.numel());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stddev(a.w13.values) * std::sqrt(128.0), 1.0, 0.02);
  EXPECT_NEAR(stddev(a.w2.values) * std::sqrt(96.0), 1.0, 0.02);
}

TEST(RandomWeights, EverySchemeValidatesAndBiasesFollowConfig) {
  MOEKIT_REF_SEED(seed);
  const MoeLayerConfig c = scaled_layer_config(layer_preset("gpt-oss-20b"), 256, 128, 4);
  for (const char* q :
       {"bf16", "fp8_tensor", "fp8_block", "nvfp4", "mxfp4", "nvfp4/swizzled_128x4"}) {
    SCOPED_TRACE(q);
    MoeWeights w = random_moe_weights(c, parse_quant_config(q), seed);
    EXPECT_NO_THROW(w.validate());
    EXPECT_EQ(w.w13_bias.shape(), (Shape{4, 256}));
    EXPECT_EQ(w.w2_bias.shape(), (Shape{4, 256}));
  }
  RouterWeights r = random_router_weights(c, seed);
  EXPECT_EQ(r.weight.shape(), (Shape{4, 256}));
  EXPECT_TRUE(r.bias.defined());
  EXPECT_FALSE(r.correction_bias.defined());
  RouterWeights ds =
      random_router_weights(scaled_layer_config(layer_preset("deepseek-v3"), 64, 32, 16), seed);
  EXPECT_TRUE(ds.correction_bias.defined());
  EXPECT_FALSE(ds.bias.defined());
}

TEST(MoeWeightsValidate, MessagesNameTheTensor) {
  MOEKIT_REF_SEED(seed);
  const MoeLayerConfig c = scaled_layer_config(layer_preset("tiny"), 64, 32, 2);
  MoeWeights w = random_moe_weights(c, parse_quant_config("nvfp4"), seed);
  w.w2.scales = Tensor(DType::kE4M3, Shape{2, 64, 3});
  expect_error([&] { w.validate(); }, {"w2.scales shape", "[2, 64, 2]", "[2, 64, 3]"});
  w = random_moe_weights(c, parse_quant_config("nvfp4"), seed);
  w.w13.global_scale = Tensor();
  expect_error([&] { w.validate(); }, {"w13.global_scale", "absent"});
  w = random_moe_weights(c, parse_quant_config("fp8_tensor"), seed);
  w.w13.values = Tensor(DType::kBF16, Shape{2, 64, 64});
  expect_error([&] { w.validate(); }, {"w13.values dtype", "e4m3", "bf16"});
  w = random_moe_weights(c, parse_quant_config("bf16"), seed);
  w.w13_bias = Tensor(DType::kF32, Shape{2, 32});
  expect_error([&] { w.validate(); }, {"w13_bias shape", "[2, 64]"});
  w = random_moe_weights(c, parse_quant_config("bf16"), seed);
  w.quant = parse_quant_config("fp8_token");
  expect_error([&] { w.validate(); }, {"quant.scheme", "fp8_token"});
}

}  // namespace
}  // namespace moekit
