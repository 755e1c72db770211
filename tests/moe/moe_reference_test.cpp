// The CPU reference MoE layer against the independent float64 naive layer (scaled-down presets,
// every weight scheme, adversarial routings), a hand-computed layer, Llama4's weight-on-input,
// activation-quant emulation and validation.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "moe/host_convert.hpp"
#include "moe/moe_test_util.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"

namespace moekit {
namespace {

using reftest::expect_error;

constexpr double kFp32Bound = 1e-5;  // fp32 accumulation vs float64, ||out-ref||/||ref||

struct Problem {
  MoeLayerConfig config;
  MoeWeights weights;
  RouterWeights router;
  Tensor hidden;
  RoutingResult routing;
};

Problem make_problem(const MoeLayerConfig& c, const char* quant, std::int64_t m, std::uint64_t seed,
                     DType hidden_dtype = DType::kF32) {
  Problem p{c,
            random_moe_weights(c, parse_quant_config(quant), seed),
            random_router_weights(c, seed + 1),
            random_hidden_states(m, c.hidden_size, hidden_dtype, seed + 2),
            {}};
  Tensor logits = router_logits_reference(p.hidden, p.router);
  p.routing = route_reference(logits, p.router.correction_bias, c.routing);
  return p;
}

// Runs the reference (output poisoned first) and the naive layer; returns ||out-ref||/||ref||.
double run_and_compare(const Problem& p, const MoeReferenceOptions& opt = {},
                       Tensor* out_copy = nullptr) {
  const std::int64_t m = p.hidden.shape()[0], h = p.config.hidden_size;
  Tensor out(DType::kF32, Shape{m, h});
  std::fill(out.ptr<float>(), out.ptr<float>() + out.numel(),
            std::numeric_limits<float>::quiet_NaN());
  moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, p.config, p.weights,
                       out, opt);
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    if (!std::isfinite(out.ptr<float>()[i])) {
      ADD_FAILURE() << "element " << i << " not written or not finite";
      return INFINITY;
    }
  }
  const std::vector<double> ref = moe_reference_float64(
      p.hidden, p.routing.topk_ids, p.routing.topk_weights, p.config, p.weights, opt);
  double norm = 0;
  for (double v : ref) norm += v * v;
  if (m > 0) {
    EXPECT_GT(norm, 0.0) << "reference is all zeros: the comparison would be vacuous";
  }
  const double rel = reftest::relative_l2(out.ptr<float>(), ref.data(), m * h);
  if (out_copy) *out_copy = std::move(out);
  return rel;
}

struct PresetCase {
  const char* preset;
  std::int64_t h, i;
  int e;
  const char* quant;
  std::int64_t m;
};

void PrintTo(const PresetCase& c, std::ostream* os) {
  *os << c.preset << " H=" << c.h << " I=" << c.i << " E=" << c.e << " " << c.quant << " M=" << c.m;
}

class MoeVsNaive : public ::testing::TestWithParam<PresetCase> {};

TEST_P(MoeVsNaive, Fp32WithinBound) {
  MOEKIT_REF_SEED(seed);
  const PresetCase& pc = GetParam();
  const MoeLayerConfig c = scaled_layer_config(layer_preset(pc.preset), pc.h, pc.i, pc.e);
  SCOPED_TRACE(c.str() + " quant " + pc.quant);
  Problem p = make_problem(c, pc.quant, pc.m, seed);
  EXPECT_LT(run_and_compare(p), kFp32Bound);
}

INSTANTIATE_TEST_SUITE_P(
    ScaledPresets, MoeVsNaive,
    ::testing::Values(PresetCase{"tiny", 0, 0, 0, "nvfp4", 64},
                      PresetCase{"mixtral-8x7b", 256, 384, 0, "bf16", 33},
                      PresetCase{"qwen3-30b-a3b", 128, 64, 0, "mxfp4", 40},
                      PresetCase{"qwen3-235b-a22b", 256, 96, 32, "nvfp4/swizzled_128x4", 21},
                      PresetCase{"deepseek-v3", 256, 128, 64, "fp8_block", 24},
                      PresetCase{"gpt-oss-20b", 256, 192, 32, "mxfp4", 29},
                      PresetCase{"gpt-oss-120b", 160, 96, 16, "bf16", 17},
                      PresetCase{"llama4-scout", 256, 256, 16, "fp8_tensor", 30},
                      PresetCase{"kimi-k2", 128, 64, 48, "nvfp4", 20}),
    [](const auto& info) {
      std::string n = std::string(info.param.preset) + "_" + info.param.quant;
      for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      return n;
    });

MoeLayerConfig small(const char* preset = "tiny") {
  return scaled_layer_config(layer_preset(preset), 128, 64, 8);
}

TEST(MoeReference, ZeroTokens) {
  MOEKIT_REF_SEED(seed);
  Problem p = make_problem(small(), "nvfp4", 0, seed);
  EXPECT_EQ(run_and_compare(p), 0.0);
}

TEST(MoeReference, OneTokenAndFewerTokensThanTopK) {
  MOEKIT_REF_SEED(seed);
  Problem one = make_problem(small(), "mxfp4", 1, seed);
  EXPECT_LT(run_and_compare(one), kFp32Bound);
  const MoeLayerConfig qwen =
      scaled_layer_config(layer_preset("qwen3-30b-a3b"), 64, 32, 16);  // k = 8
  Problem few = make_problem(qwen, "bf16", 3, seed, DType::kBF16);
  EXPECT_LT(run_and_compare(few), kFp32Bound);
}

TEST(MoeReference, AllTokensToOneExpertAndEmptyExperts) {
  MOEKIT_REF_SEED(seed);
  Problem p = make_problem(small(), "fp8_block", 45, seed);  // 45 tokens > 2 token tiles
  auto* ids = p.routing.topk_ids.ptr<std::int32_t>();
  for (std::int64_t s = 0; s < 45 * 2; ++s) ids[s] = s % 2 ? 3 : 6;  // experts 3 and 6 only
  EXPECT_LT(run_and_compare(p), kFp32Bound);
  for (std::int64_t s = 0; s < 45 * 2; ++s) ids[s] = 5;  // both slots of every token to expert 5
  EXPECT_LT(run_and_compare(p), kFp32Bound);
}

TEST(MoeReference, DequantBudgetDoesNotChangeTheResult) {
  MOEKIT_REF_SEED(seed);
  Problem p = make_problem(small(), "nvfp4", 40, seed);
  Tensor a(DType::kF32, Shape{40, 128}), b(DType::kF32, Shape{40, 128});
  moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, p.config, p.weights,
                       a);
  MoeReferenceOptions one_at_a_time;
  one_at_a_time.dequant_budget_bytes = 1;
  moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, p.config, p.weights, b,
                       one_at_a_time);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

// A layer small enough to evaluate by hand: E=2, H=2, I=1, bf16 weights with exact values.
struct HandLayer {
  MoeLayerConfig config;
  MoeWeights weights;
};

HandLayer hand_layer(RoutingMethod method) {
  HandLayer l;
  l.config.name = "hand";
  l.config.num_experts = 2;
  l.config.hidden_size = 2;
  l.config.intermediate_size = 1;
  l.config.routing.method = method;
  l.config.routing.top_k = 1;
  Tensor w13(DType::kF32, Shape{2, 2, 2}), w2(DType::kF32, Shape{2, 2, 1});
  // expert 0: gate = x0, up = x1, out = (2a, 3a); expert 1: gate = x1, up = x0, out = (-a, a).
  const float v13[] = {1, 0, 0, 1, 0, 1, 1, 0};
  const float v2[] = {2, 3, -1, 1};
  std::copy(v13, v13 + 8, w13.ptr<float>());
  std::copy(v2, v2 + 4, w2.ptr<float>());
  MoeWeights master;
  master.num_experts = 2;
  master.hidden_size = 2;
  master.intermediate_size = 1;
  master.w13 = quantize(w13, QuantConfig{});
  master.w2 = quantize(w2, QuantConfig{});
  l.weights = quantize_moe_weights(master, QuantConfig{});
  return l;
}

double silu(double x) { return x / (1 + std::exp(-x)); }
double sigm(double x) { return 1 / (1 + std::exp(-x)); }

TEST(MoeReference, HandComputedLayer) {
  HandLayer l = hand_layer(RoutingMethod::kTopK);
  Tensor x = reftest::f32_tensor({1, 2, 3, -1}, Shape{2, 2});
  Tensor logits = reftest::f32_tensor({0.5f, 0.25f, -1.0f, 0.75f}, Shape{2, 2});
  Tensor out(DType::kF32, Shape{2, 2});
  moe_reference(x, logits, {}, l.config, l.weights, out);
  // token 0 -> expert 0 (w 0.5): a = silu(1) * 2; token 1 -> expert 1 (w 0.75): a = silu(-1) * 3.
  const double a0 = silu(1) * 2, a1 = silu(-1) * 3;
  EXPECT_NEAR(out.ptr<float>()[0], 0.5 * 2 * a0, 1e-6);
  EXPECT_NEAR(out.ptr<float>()[1], 0.5 * 3 * a0, 1e-6);
  EXPECT_NEAR(out.ptr<float>()[2], 0.75 * -a1, 1e-6);
  EXPECT_NEAR(out.ptr<float>()[3], 0.75 * a1, 1e-6);
}

TEST(MoeReference, Llama4ScalesTheInputNotTheOutput) {
  HandLayer l = hand_layer(RoutingMethod::kLlama4);
  Tensor x = reftest::f32_tensor({1, 2}, Shape{1, 2});
  Tensor logits = reftest::f32_tensor({0.5f, 0.25f}, Shape{1, 2});
  Tensor out(DType::kF32, Shape{1, 2});
  moe_reference(x, logits, {}, l.config, l.weights, out);
  const double w = sigm(0.5);
  const double a = silu(w * 1) * (w * 2);  // expert applied to w * x
  EXPECT_NEAR(out.ptr<float>()[0], 2 * a, 1e-6);
  EXPECT_NEAR(out.ptr<float>()[1], 3 * a, 1e-6);
  EXPECT_GT(std::fabs(out.ptr<float>()[0] - w * 2 * silu(1) * 2), 0.1);  // not w * expert(x)
}

TEST(MoeReference, RouterLogitsPathEqualsRoutedPath) {
  MOEKIT_REF_SEED(seed);
  const MoeLayerConfig c = scaled_layer_config(layer_preset("deepseek-v3"), 128, 64, 32);
  Problem p = make_problem(c, "bf16", 19, seed);
  Tensor logits = router_logits_reference(p.hidden, p.router);
  Tensor a(DType::kF32, Shape{19, 128}), b(DType::kF32, Shape{19, 128});
  moe_reference(p.hidden, logits, p.router.correction_bias, c, p.weights, a);
  moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, c, p.weights, b);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0);
}

TEST(MoeReference, ReluSquaredUngatedWeights) {
  MOEKIT_REF_SEED(seed);
  MoeLayerConfig c = small();
  c.activation.kind = Activation::kRelu2;
  Problem p = make_problem(c, "nvfp4", 17, seed);
  EXPECT_FALSE(p.weights.gated);
  EXPECT_EQ(p.weights.w13.values.shape()[1], 64);
  EXPECT_LT(run_and_compare(p), kFp32Bound);
}

// ---- activation-quant emulation --------------------------------------------------------------

// The fp32 and float64 pipelines quantize GEMM2's input from intermediates that differ by fp32
// rounding, so a few elements may land on the other side of a rounding boundary: the bound is
// looser than kFp32Bound but far below the quantization error itself (checked against w4a16).
// The emulation bound of a problem: emulation_error_bound for its activation scheme and size.
double emulate_bound(const Problem& p, const MoeReferenceOptions& opt) {
  return emulation_error_bound(emulated_activation_quant(opt, p.weights.quant.scheme).scheme,
                               p.routing.topk_ids.numel() * p.config.intermediate_size);
}

TEST(MoeReferenceEmulate, ErrorBoundPerFormatAndSize) {
  using S = QuantScheme;
  // 8 2^-m / sqrt(N): e4m3 (m = 3), e2m1 (m = 1), bf16 (m = 7).
  EXPECT_DOUBLE_EQ(emulation_error_bound(S::kFP8Block1x128, 4096), 1.0 / 64);
  EXPECT_DOUBLE_EQ(emulation_error_bound(S::kFP8PerTensor, 4096), 1.0 / 64);
  EXPECT_DOUBLE_EQ(emulation_error_bound(S::kMXFP8, 4096), 1.0 / 64);
  EXPECT_DOUBLE_EQ(emulation_error_bound(S::kNVFP4, 4096), 4.0 / 64);
  EXPECT_DOUBLE_EQ(emulation_error_bound(S::kBF16, 256), 1.0 / 256);
  // Large problems (many small flips) and M = 0: the 2e-3 floor.
  EXPECT_EQ(emulation_error_bound(S::kFP8Block1x128, std::int64_t{1} << 24), 2e-3);
  EXPECT_EQ(emulation_error_bound(S::kBF16, 65536), 2e-3);
  EXPECT_EQ(emulation_error_bound(S::kNVFP4, 0), 2e-3);
  expect_error([] { emulation_error_bound(S::kNVFP4, -1); },
               {"requantized_elements", ">= 0", "-1"});
}

// Seeds on which one intermediate element of the fp32 reference and of the float64 one round to
// neighbouring codes (sweep of 300 seeds, 2026-12-02: over the former fixed 2e-3 bound); the
// fp32 reference still matches the naive one within the size-aware bound, and far below the
// emulation's own effect.
TEST(MoeReferenceEmulate, OneCodeFlipStaysWithinTheBound) {
  struct Case {
    const char* quant;
    std::uint64_t seed;
    double at_least;  // the flip's error on this seed
  };
  for (const Case cs : {Case{"fp8_tensor", 3351335, 3e-3}, Case{"nvfp4", 17803937, 2.5e-3}}) {
    SCOPED_TRACE(cs.quant);
    const Problem p = make_problem(small(), cs.quant, 37, cs.seed);
    MoeReferenceOptions emu;
    emu.numerics = MoeNumerics::kEmulateActivationQuant;
    const double err = run_and_compare(p, emu);
    EXPECT_GT(err, cs.at_least) << "the flip this test is about did not happen";
    EXPECT_LT(err, emulate_bound(p, emu));
  }
}

TEST(MoeReferenceEmulate, MatchesNaiveAndDiffersFromWeightOnly) {
  MOEKIT_REF_SEED(seed);
  struct Case {
    const char* quant;
    double min_effect;  // ||emulate - w4a16|| / ||w4a16|| must exceed this
  };
  for (const Case cs : {Case{"nvfp4", 0.02}, Case{"mxfp4", 0.005}, Case{"fp8_block", 0.005},
                        Case{"fp8_tensor", 0.005}, Case{"bf16", 1e-4}}) {
    SCOPED_TRACE(cs.quant);
    Problem p = make_problem(small(), cs.quant, 37, seed);
    MoeReferenceOptions emu;
    emu.numerics = MoeNumerics::kEmulateActivationQuant;
    Tensor out_emu, out_w;
    const double err = run_and_compare(p, emu, &out_emu);
    EXPECT_LT(err, emulate_bound(p, emu));
    EXPECT_LT(run_and_compare(p, {}, &out_w), kFp32Bound);
    double num = 0, den = 0;
    for (std::int64_t i = 0; i < out_w.numel(); ++i) {
      const double d = out_emu.ptr<float>()[i] - out_w.ptr<float>()[i];
      num += d * d;
      den += double(out_w.ptr<float>()[i]) * out_w.ptr<float>()[i];
    }
    const double effect = std::sqrt(num / den);
    EXPECT_GT(effect, cs.min_effect);
    EXPECT_LT(effect, 0.3);
    // A reference that skipped part of the emulation would differ from the naive one by about
    // the effect; code flips stay far below it.
    EXPECT_LT(err, 0.25 * effect);
  }
}

TEST(MoeReferenceEmulate, StaticNvfp4ScalesAreUsedAndMustAgree) {
  MOEKIT_REF_SEED(seed);
  Problem p = make_problem(small(), "nvfp4", 25, seed);
  MoeReferenceOptions emu;
  emu.numerics = MoeNumerics::kEmulateActivationQuant;
  Tensor dynamic_out;
  run_and_compare(p, emu, &dynamic_out);
  // A deliberately coarse static encode scale (amax 4x too large) changes the result.
  float amax = 0;
  for (std::int64_t i = 0; i < p.hidden.numel(); ++i)
    amax = std::max(amax, std::fabs(p.hidden.ptr<float>()[i]));
  p.weights.a13_scale = Tensor(DType::kF32, Shape{8});
  p.weights.a2_scale = Tensor(DType::kF32, Shape{8});
  for (int e = 0; e < 8; ++e) {
    p.weights.a13_scale.ptr<float>()[e] = 2688.0f / (4 * amax);
    p.weights.a2_scale.ptr<float>()[e] = 2688.0f / 16.0f;
  }
  Tensor static_out;
  EXPECT_LT(run_and_compare(p, emu, &static_out), emulate_bound(p, emu));
  EXPECT_NE(std::memcmp(static_out.data(), dynamic_out.data(), static_out.nbytes()), 0);
  p.weights.a13_scale.ptr<float>()[3] *= 2;
  Tensor out(DType::kF32, Shape{25, 128});
  expect_error(
      [&] {
        moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, p.config,
                             p.weights, out, emu);
      },
      {"a13_scale[3]"});
}

TEST(MoeReferenceEmulate, StaticFp8PerTensorDecodeScale) {
  MOEKIT_REF_SEED(seed);
  Problem p = make_problem(small(), "fp8_tensor", 21, seed);
  MoeReferenceOptions emu;
  emu.numerics = MoeNumerics::kEmulateActivationQuant;
  Tensor dynamic_out, static_out;
  run_and_compare(p, emu, &dynamic_out);
  // DECODE scales: x / s must fit e4m3 (|x| <= 448 s); 8/448 saturates the largest inputs.
  p.weights.a13_scale = Tensor(DType::kF32, Shape{8});
  p.weights.a2_scale = Tensor(DType::kF32, Shape{8});
  for (int e = 0; e < 8; ++e) {
    p.weights.a13_scale.ptr<float>()[e] = 8.0f / 448.0f;
    p.weights.a2_scale.ptr<float>()[e] = 4.0f / 448.0f;
  }
  EXPECT_LT(run_and_compare(p, emu, &static_out), emulate_bound(p, emu));
  EXPECT_NE(std::memcmp(static_out.data(), dynamic_out.data(), static_out.nbytes()), 0);
}

TEST(MoeReferenceEmulate, DefaultActivationQuant) {
  EXPECT_EQ(default_activation_quant(QuantScheme::kNVFP4).scheme, QuantScheme::kNVFP4);
  EXPECT_EQ(default_activation_quant(QuantScheme::kMXFP4).scheme, QuantScheme::kMXFP8);
  EXPECT_EQ(default_activation_quant(QuantScheme::kFP8Block128x128).scheme,
            QuantScheme::kFP8Block1x128);
  EXPECT_EQ(default_activation_quant(QuantScheme::kFP8PerTensor).scheme,
            QuantScheme::kFP8PerTensor);
  EXPECT_EQ(default_activation_quant(QuantScheme::kBF16).scheme, QuantScheme::kBF16);
  EXPECT_EQ(parse_numerics(numerics_name(MoeNumerics::kEmulateActivationQuant)),
            MoeNumerics::kEmulateActivationQuant);
}

// ---- validation -------------------------------------------------------------------------------

TEST(MoeReferenceValidation, MessagesNameTheArgument) {
  MOEKIT_REF_SEED(seed);
  Problem p = make_problem(small(), "bf16", 4, seed);
  Tensor out(DType::kF32, Shape{4, 128});
  auto run = [&](const TensorView& hidden, const TensorView& ids, const TensorView& w,
                 const TensorView& o) {
    moe_reference_routed(hidden, ids, w, p.config, p.weights, o);
  };
  p.routing.topk_ids.ptr<std::int32_t>()[5] = 8;
  expect_error([&] { run(p.hidden, p.routing.topk_ids, p.routing.topk_weights, out); },
               {"topk_ids[2, 1]", "[0, 8)", "got 8"});
  p.routing.topk_ids.ptr<std::int32_t>()[5] = 0;
  Tensor bad_out(DType::kF32, Shape{4, 127});
  expect_error([&] { run(p.hidden, p.routing.topk_ids, p.routing.topk_weights, bad_out); },
               {"out shape", "[4, 128]"});
  Tensor bad_hidden(DType::kF32, Shape{4, 64});
  expect_error([&] { run(bad_hidden, p.routing.topk_ids, p.routing.topk_weights, out); },
               {"hidden_states.shape[1]", "128", "64"});
  Tensor ids3(DType::kI32, Shape{4, 3});
  expect_error([&] { run(p.hidden, ids3, p.routing.topk_weights, out); },
               {"topk_ids shape", "[4, 2]"});
  Tensor hidden_i32(DType::kI32, Shape{4, 128});
  expect_error([&] { run(hidden_i32, p.routing.topk_ids, p.routing.topk_weights, out); },
               {"hidden_states dtype"});
  MoeLayerConfig other = p.config;
  other.intermediate_size = 32;
  expect_error(
      [&] {
        moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, other, p.weights,
                             out);
      },
      {"weights.intermediate_size", "32", "64"});
  MoeLayerConfig biased = p.config;
  biased.has_bias = true;
  expect_error(
      [&] {
        moe_reference_routed(p.hidden, p.routing.topk_ids, p.routing.topk_weights, biased,
                             p.weights, out);
      },
      {"w13_bias"});
  expect_error([] { parse_numerics("w4a4"); }, {"mode", "w4a16|emulate"});
}

}  // namespace
}  // namespace moekit
