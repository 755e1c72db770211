// activation_reference vs float64 formulas written out here, both gate/up layouts, validation.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "moe/moe_test_util.hpp"
#include "moekit/activation/activation.hpp"

namespace moekit {
namespace {

using reftest::expect_error;

double expected(Activation a, double g, double u) {
  switch (a) {
    case Activation::kSiluAndMul:
      return g / (1 + std::exp(-g)) * u;
    case Activation::kGeluErfAndMul:
      return 0.5 * g * std::erfc(-g / std::numbers::sqrt2) * u;
    case Activation::kGeluTanhAndMul: {
      const double inner = std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * std::pow(g, 3));
      return 0.5 * g * (1 + std::tanh(inner)) * u;
    }
    case Activation::kSwigluOai: {
      const double glu = g > 7.0 ? 7.0 : g;
      const double lin = u > 7.0 ? 7.0 : (u < -7.0 ? -7.0 : u);
      return glu / (1 + std::exp(-1.702 * glu)) * (lin + 1);
    }
    case Activation::kRelu2:
      return g > 0 ? g * g : 0;
  }
  return NAN;
}

class ActivationTest : public ::testing::TestWithParam<std::tuple<Activation, GateUpLayout>> {};

TEST_P(ActivationTest, MatchesFloat64) {
  MOEKIT_REF_SEED(seed);
  const auto [kind, layout] = GetParam();
  ActivationConfig cfg;
  cfg.kind = kind;
  cfg.layout = layout;
  const std::int64_t t = 5, inter = 37;
  const std::int64_t width = activation_input_width(kind, inter);
  Tensor in(DType::kF32, Shape{t, width}), out(DType::kF32, Shape{t, inter});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);  // wide: reaches the SwiGLU clamps
  for (std::int64_t i = 0; i < in.numel(); ++i) in.ptr<float>()[i] = nd(rng);
  in.ptr<float>()[0] = 7.0f;  // exactly at the limit
  in.ptr<float>()[1] = -7.5f;
  std::fill(out.ptr<float>(), out.ptr<float>() + out.numel(), NAN);  // poison
  activation_reference(in, cfg, out);
  const float* x = in.ptr<float>();
  for (std::int64_t r = 0; r < t; ++r) {
    for (std::int64_t i = 0; i < inter; ++i) {
      double g = 0, u = 0;
      if (!is_gated(kind)) {
        g = x[r * width + i];
      } else if (layout == GateUpLayout::kInterleaved) {
        g = x[r * width + 2 * i];
        u = x[r * width + 2 * i + 1];
      } else {
        g = x[r * width + i];
        u = x[r * width + inter + i];
      }
      const double want = expected(kind, g, u);
      const float got = out.ptr<float>()[r * inter + i];
      EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want))) << "row " << r << " col " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, ActivationTest,
    ::testing::Combine(::testing::Values(Activation::kSiluAndMul, Activation::kGeluErfAndMul,
                                         Activation::kGeluTanhAndMul, Activation::kSwigluOai,
                                         Activation::kRelu2),
                       ::testing::Values(GateUpLayout::kHalves, GateUpLayout::kInterleaved)),
    [](const auto& info) {
      return std::string(activation_name(std::get<0>(info.param))) + "_" +
             std::string(gate_up_layout_name(std::get<1>(info.param)));
    });

TEST(Activation, HandValues) {
  ActivationConfig c;
  c.kind = Activation::kSwigluOai;
  // gate 10 clamps to 7; up -9 clamps to -7: 7 * sigmoid(1.702*7) * (-6).
  EXPECT_NEAR(activation_scalar(c, 10.0, -9.0), 7.0 / (1 + std::exp(-double(1.702f) * 7)) * -6.0,
              1e-12);
  c.kind = Activation::kSiluAndMul;
  EXPECT_DOUBLE_EQ(activation_scalar(c, 0.0, 5.0), 0.0);
  c.kind = Activation::kRelu2;
  EXPECT_DOUBLE_EQ(activation_scalar(c, -3.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(activation_scalar(c, 3.0, 0.0), 9.0);
}

TEST(Activation, ValidationNamesArguments) {
  ActivationConfig c;
  Tensor odd(DType::kF32, Shape{2, 5}), out(DType::kF32, Shape{2, 2});
  expect_error([&] { activation_reference(odd, c, out); }, {"in.shape[1]", "5"});
  Tensor in(DType::kF32, Shape{2, 8}), wrong(DType::kF32, Shape{2, 3});
  expect_error([&] { activation_reference(in, c, wrong); }, {"out shape", "[2, 4]", "[2, 3]"});
  Tensor bf(DType::kBF16, Shape{2, 8});
  expect_error([&] { activation_reference(bf, c, out); }, {"in dtype", "bf16"});
  c.kind = Activation::kSwigluOai;
  c.swiglu_limit = -1.0f;
  Tensor out4(DType::kF32, Shape{2, 4});
  expect_error([&] { activation_reference(in, c, out4); }, {"swiglu_limit"});
  expect_error([] { parse_activation("gelu"); }, {"activation", "gelu_erf"});
}

TEST(Activation, ZeroRows) {
  Tensor in(DType::kF32, Shape{0, 8}), out(DType::kF32, Shape{0, 4});
  activation_reference(in, ActivationConfig{}, out);
  EXPECT_EQ(parse_activation("swiglu_oai"), Activation::kSwigluOai);
}

}  // namespace
}  // namespace moekit
