// The expert layouts transformers itself writes with save_pretrained, on synthetic safetensors
// files: gpt-oss bf16 fused experts ([E, H, 2I] with gate/up columns interleaved, biases), the
// fused [E, 2I, H] / [E, H, I] experts of transformers 5 (save_original_format=False) for Qwen3 /
// Mixtral, and per-expert tensors saved in float32. Each loads into moekit's convention (w13 =
// [gate; up], bf16) bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "io/io_test_util.hpp"
#include "moekit/io/moe_loader.hpp"
#include "moekit/io/safetensors.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::io {
namespace {

using testing::expect_error;

constexpr int kE = 4;
constexpr std::int64_t kH = 64, kI = 32;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string config_json(const std::string& model_type) {
  std::string s = R"({"model_type":")" + model_type + R"(","num_hidden_layers":2,"hidden_size":64,)";
  if (model_type == "gpt_oss")
    return s + R"("num_local_experts":4,"num_experts_per_tok":2,"intermediate_size":32,"swiglu_limit":7.0})";
  if (model_type == "mixtral")
    return s + R"("num_local_experts":4,"num_experts_per_tok":2,"intermediate_size":32})";
  return s + R"("num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":32,"intermediate_size":99})";
}

// A random f32 tensor whose values are exact in bf16 (so every layout compares bitwise).
Tensor random_bf16_exact(const Shape& shape, std::mt19937& gen) {
  Tensor t(DType::kF32, shape);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.ptr<float>()[i] = bf16_to_float(float_to_bf16(d(gen)));
  return t;
}

Tensor to_bf16(const Tensor& f) {
  Tensor b(DType::kBF16, f.shape());
  for (std::int64_t i = 0; i < f.numel(); ++i)
    b.ptr<std::uint16_t>()[i] = float_to_bf16(f.ptr<float>()[i]);
  return b;
}

// Reference: moekit's w13 [E, 2I, H] (gate rows then up rows) and w2 [E, H, I] as f32.
struct Experts {
  Tensor w13, w2, b13, b2;  // b13 [E, 2I] halves, b2 [E, H]
};

Experts random_experts(std::mt19937& gen) {
  return {random_bf16_exact(Shape{kE, 2 * kI, kH}, gen), random_bf16_exact(Shape{kE, kH, kI}, gen),
          random_bf16_exact(Shape{kE, 2 * kI}, gen), random_bf16_exact(Shape{kE, kH}, gen)};
}

float at(const Tensor& t, std::int64_t i) { return t.ptr<float>()[i]; }

void expect_bf16_equal(const Tensor& got, const Tensor& want_f32, const char* what) {
  ASSERT_EQ(got.dtype(), DType::kBF16) << what;
  ASSERT_EQ(got.shape(), want_f32.shape()) << what;
  for (std::int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.ptr<std::uint16_t>()[i], float_to_bf16(at(want_f32, i))) << what << " at " << i;
}

void expect_f32_equal(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << what;
}

Tensor router(std::mt19937& gen) { return to_bf16(random_bf16_exact(Shape{kE, kH}, gen)); }

TEST(MoeLoaderTransformers, GptOssBf16FusedExperts) {
  const auto seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  const Experts x = random_experts(gen);
  // gate_up_proj [E, H, 2I]: column 2j = gate row j, column 2j+1 = up row j (x @ W).
  Tensor gu(DType::kF32, Shape{kE, kH, 2 * kI}), down(DType::kF32, Shape{kE, kI, kH}),
      bgu(DType::kF32, Shape{kE, 2 * kI});
  for (std::int64_t e = 0; e < kE; ++e) {
    for (std::int64_t j = 0; j < kI; ++j) {
      for (std::int64_t h = 0; h < kH; ++h) {
        gu.ptr<float>()[(e * kH + h) * 2 * kI + 2 * j] = at(x.w13, (e * 2 * kI + j) * kH + h);
        gu.ptr<float>()[(e * kH + h) * 2 * kI + 2 * j + 1] = at(x.w13, (e * 2 * kI + kI + j) * kH + h);
      }
      bgu.ptr<float>()[e * 2 * kI + 2 * j] = at(x.b13, e * 2 * kI + j);
      bgu.ptr<float>()[e * 2 * kI + 2 * j + 1] = at(x.b13, e * 2 * kI + kI + j);
    }
    for (std::int64_t h = 0; h < kH; ++h)
      for (std::int64_t i = 0; i < kI; ++i)
        down.ptr<float>()[(e * kI + i) * kH + h] = at(x.w2, (e * kH + h) * kI + i);
  }
  testing::TempDir dir;
  const std::string p = "model.layers.1.mlp.";
  Tensor gu16 = to_bf16(gu), down16 = to_bf16(down), bgu16 = to_bf16(bgu), b216 = to_bf16(x.b2);
  Tensor rw = router(gen), rb = to_bf16(random_bf16_exact(Shape{kE}, gen));
  write_safetensors(dir.file("model.safetensors"),
                    {{p + "experts.gate_up_proj", gu16.view()},
                     {p + "experts.gate_up_proj_bias", bgu16.view()},
                     {p + "experts.down_proj", down16.view()},
                     {p + "experts.down_proj_bias", b216.view()},
                     {p + "router.weight", rw.view()},
                     {p + "router.bias", rb.view()}});
  write_text(dir.file("config.json"), config_json("gpt_oss"));
  const MoeLayer l = load_moe_layer(dir.str(), 1);
  EXPECT_EQ(l.format, CheckpointFormat::kBF16);
  EXPECT_EQ(l.config.activation.kind, Activation::kSwigluOai);
  EXPECT_TRUE(l.config.has_bias);
  expect_bf16_equal(l.weights.w13.values, x.w13, "w13");
  expect_bf16_equal(l.weights.w2.values, x.w2, "w2");
  expect_f32_equal(l.weights.w13_bias, x.b13, "w13_bias");
  expect_f32_equal(l.weights.w2_bias, x.b2, "w2_bias");
  EXPECT_TRUE(l.router.bias.defined());
}

class FusedHalves : public ::testing::TestWithParam<const char*> {};

TEST_P(FusedHalves, Transformers5FusedExperts) {
  const std::string model_type = GetParam();
  const auto seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  const Experts x = random_experts(gen);
  testing::TempDir dir;
  const std::string p =
      std::string("model.layers.0.") + (model_type == "mixtral" ? "block_sparse_moe." : "mlp.");
  Tensor rw = router(gen);
  // float32 on disk (a model saved without dtype=bfloat16): rounded to bf16 on load, exact here.
  write_safetensors(dir.file("model.safetensors"), {{p + "experts.gate_up_proj", x.w13.view()},
                                                    {p + "experts.down_proj", x.w2.view()},
                                                    {p + "gate.weight", rw.view()}});
  write_text(dir.file("config.json"), config_json(model_type));
  const MoeLayer l = load_moe_layer(dir.str(), 0);
  expect_bf16_equal(l.weights.w13.values, x.w13, "w13");
  expect_bf16_equal(l.weights.w2.values, x.w2, "w2");
  EXPECT_FALSE(l.weights.w13_bias.defined());
  EXPECT_EQ(l.config.routing.method, RoutingMethod::kRenormalizeNaive);
}

INSTANTIATE_TEST_SUITE_P(Models, FusedHalves, ::testing::Values("qwen3_moe", "mixtral"));

TEST(MoeLoaderTransformers, PerExpertFloat32Weights) {
  const auto seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  const Experts x = random_experts(gen);
  testing::TempDir dir;
  std::vector<Tensor> keep;
  std::vector<NamedTensor> named;
  const std::string p = "model.layers.1.mlp.experts.";
  for (std::int64_t e = 0; e < kE; ++e) {
    const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int j = 0; j < 3; ++j) {
      const std::int64_t rows = j < 2 ? kI : kH, cols = j < 2 ? kH : kI;
      Tensor t(DType::kF32, Shape{rows, cols});
      const Tensor& src = j < 2 ? x.w13 : x.w2;
      const std::int64_t off = j < 2 ? (e * 2 * kI + j * kI) * kH : e * kH * kI;
      std::memcpy(t.data(), src.ptr<float>() + off, t.nbytes());
      keep.push_back(std::move(t));
      named.push_back({p + std::to_string(e) + "." + names[j] + ".weight", keep.back().view()});
    }
  }
  Tensor rw = router(gen);
  named.push_back({"model.layers.1.mlp.gate.weight", rw.view()});
  write_safetensors(dir.file("model.safetensors"), named);
  write_text(dir.file("config.json"), config_json("qwen3_moe"));
  const MoeLayer l = load_moe_layer(dir.str(), 1);
  expect_bf16_equal(l.weights.w13.values, x.w13, "w13");
  expect_bf16_equal(l.weights.w2.values, x.w2, "w2");
}

TEST(MoeLoaderTransformers, FusedShapeMismatchNamesTheTensor) {
  testing::TempDir dir;
  std::mt19937 gen(1);
  Tensor w13 = to_bf16(random_bf16_exact(Shape{kE, 2 * kI, kH}, gen));
  Tensor w2 = to_bf16(random_bf16_exact(Shape{kE, kI, kH}, gen));  // gpt-oss orientation
  Tensor rw = router(gen);
  write_safetensors(dir.file("model.safetensors"),
                    {{"model.layers.0.mlp.experts.gate_up_proj", w13.view()},
                     {"model.layers.0.mlp.experts.down_proj", w2.view()},
                     {"model.layers.0.mlp.gate.weight", rw.view()}});
  write_text(dir.file("config.json"), config_json("qwen3_moe"));
  expect_error([&] { load_moe_layer(dir.str(), 0); },
               {"model.layers.0.mlp.experts.down_proj", "shape", "[4, 64, 32]", "[4, 32, 64]"});
}

}  // namespace
}  // namespace moekit::io
