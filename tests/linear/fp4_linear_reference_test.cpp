// The FP4 linear reference against the normative quantize/dequantize (quant/quantize.hpp).
#include "test_seed.hpp"
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/linear/fp4_linear.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::linear {
namespace {

// The process seed, folded to the 32 bits mt19937 takes.
std::uint32_t test_seed() { return static_cast<std::uint32_t>(::moekit::process_test_seed()); }

TEST(Fp4LinearReference, MatchesDequantizedWeights) {
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t m = 3, n = 24, k = 64;
  for (QuantScheme format : {QuantScheme::kNVFP4, QuantScheme::kMXFP4}) {
    SCOPED_TRACE(format == QuantScheme::kNVFP4 ? "nvfp4" : "mxfp4");
    std::vector<float> w(n * k), x(m * k), bias(n), out(m * n);
    for (auto& v : w) v = normal(rng);
    for (auto& v : x) v = normal(rng);
    for (auto& v : bias) v = normal(rng);
    QuantConfig config;
    config.scheme = format;
    const QuantizedTensor q = quantize(TensorView(w.data(), DType::kF32, Shape{n, k}), config);
    const Tensor w_hat = dequantize(q.view());
    const float alpha = format == QuantScheme::kNVFP4 ? 1.0f / q.global_scale.ptr<float>()[0] : 1.0f;
    fp4_linear_reference(format, m, n, k, x.data(), q.values.ptr<std::uint8_t>(),
                         q.scales.ptr<std::uint8_t>(), alpha, bias.data(), out.data());
    double num = 0, den = 0;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t r = 0; r < n; ++r) {
        double s = bias[r];
        for (std::int64_t c = 0; c < k; ++c)
          s += double(x[i * k + c]) * w_hat.ptr<float>()[r * k + c];
        num += (out[i * n + r] - s) * (out[i * n + r] - s);
        den += s * s;
      }
    }
    // Only the fp32 rounding of 1/gs (and of the dequantized f32 weights) differs.
    EXPECT_LT(std::sqrt(num / den), 1e-6);
  }
}

TEST(Fp4LinearReference, RejectsUnalignedK) {
  std::vector<float> buf(64);
  std::vector<std::uint8_t> bytes(64);
  try {
    fp4_linear_reference(QuantScheme::kMXFP4, 1, 1, 48, buf.data(), bytes.data(), bytes.data(), 1.0f,
                         nullptr, buf.data());
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k: expected"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moekit::linear
