// Host reference of the dense FP4 linear layer (docs/formats.md sections 1-4 for the decoding).
#include <cmath>
#include <cstdint>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/linear/fp4_linear.hpp"

namespace moekit::linear {
namespace {

double e2m1_value(int code) {
  static const double kMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -kMagnitude[code & 7] : kMagnitude[code & 7];
}

double scale_value(QuantScheme format, int byte) {
  if (format == QuantScheme::kMXFP4) return byte == 0xFF ? NAN : std::ldexp(1.0, byte - 127);
  if ((byte & 0x7F) == 0x7F) return NAN;
  const int e = (byte >> 3) & 0xF, m = byte & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (byte & 0x80) ? -v : v;
}

}  // namespace

void fp4_linear_reference(QuantScheme format, std::int64_t m, std::int64_t n, std::int64_t k,
                          const float* x, const std::uint8_t* codes, const std::uint8_t* scales,
                          float alpha, const float* bias, float* out) {
  const int sfv = format == QuantScheme::kNVFP4 ? 16 : 32;
  MOEKIT_CHECK_ARG(m >= 0, "m", ">= 0", m);
  MOEKIT_CHECK_ARG(n > 0, "n", "> 0", n);
  MOEKIT_CHECK_ARG(k > 0 && k % sfv == 0, "k", "a positive multiple of " + std::to_string(sfv), k);
  std::vector<double> w(static_cast<std::size_t>(n * k));
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < k; ++c)
      w[r * k + c] = e2m1_value((codes[r * (k / 2) + c / 2] >> ((c % 2) * 4)) & 0xF) *
                     scale_value(format, scales[r * (k / sfv) + c / sfv]) * alpha;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (std::int64_t c = 0; c < k; ++c) s += static_cast<double>(x[i * k + c]) * w[r * k + c];
      out[i * n + r] = static_cast<float>(s + (bias ? bias[r] : 0.0));
    }
  }
}

}  // namespace moekit::linear
