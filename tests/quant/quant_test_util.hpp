// Test helpers for the quant tests: logged seeds, error-message checks, and an INDEPENDENT model of
// formats.md (value tables searched in double, spec formulas written out in plain fp32, the
// layout's inverse formula) used to compute expected bytes without calling the code under test.
#pragma once

#include "test_seed.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit::quant_test {

inline std::uint64_t test_seed() { return ::moekit::process_test_seed(); }

#define QUANT_TEST_LOG_SEED(seed)                                                        \
  SCOPED_TRACE("seed " + std::to_string(seed) + " (set MOEKIT_TEST_SEED to reproduce)"); \
  ::testing::Test::RecordProperty("seed", std::to_string(seed))

// Expects fn to throw moekit::Error whose message contains every needle.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<const char*> needles) {
  try {
    fn();
  } catch (const moekit::Error& e) {
    const std::string msg = e.what();
    for (const char* n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    }
    return;
  }
  ADD_FAILURE() << "expected moekit::Error";
}

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- Independent codecs: nearest value of a table, ties to the even code, saturating. ----------
// Positive values of codes 0..n-1 in ascending order (codes ascend with value for both formats).
inline const std::vector<double>& e2m1_table() {
  static const std::vector<double> t = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return t;
}
inline const std::vector<double>& e4m3_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (int c = 0; c < 0x7F; ++c) {  // 0x7F is NaN
      const int e = c >> 3, m = c & 7;
      v.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7));
    }
    return v;
  }();
  return t;
}
inline std::uint8_t nearest_code(const std::vector<double>& table, double a) {
  if (a >= table.back()) return static_cast<std::uint8_t>(table.size() - 1);
  const auto hi = std::upper_bound(table.begin(), table.end(), a);
  const std::size_t i = static_cast<std::size_t>(hi - table.begin()) - 1;  // table[i] <= a
  const double dlo = a - table[i], dhi = table[i + 1] - a;
  if (dlo < dhi) return static_cast<std::uint8_t>(i);
  if (dhi < dlo) return static_cast<std::uint8_t>(i + 1);
  return static_cast<std::uint8_t>(i % 2 == 0 ? i : i + 1);
}
inline std::uint8_t ref_e2m1(float x) {
  if (std::isnan(x)) return 0x7;
  return static_cast<std::uint8_t>(nearest_code(e2m1_table(), std::fabs(double(x))) |
                                   (std::signbit(x) ? 0x8 : 0));
}
inline std::uint8_t ref_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  return static_cast<std::uint8_t>(nearest_code(e4m3_table(), std::fabs(double(x))) |
                                   (std::signbit(x) ? 0x80 : 0));
}
inline double ref_e2m1_value(std::uint8_t c) { return (c & 8 ? -1 : 1) * e2m1_table()[c & 7]; }
inline double ref_e4m3_value(std::uint8_t c) {
  if ((c & 0x7F) == 0x7F) return std::nan("");
  return (c & 0x80 ? -1 : 1) * e4m3_table()[c & 0x7F];
}
// Smallest b in [0, 254] with 2^(b-127) >= |t| (254 if none).
inline std::uint8_t ref_e8m0_ceil(float t) {
  const double a = std::fabs(double(t));
  for (int b = 0; b < 254; ++b) {
    if (std::ldexp(1.0, b - 127) >= a) return static_cast<std::uint8_t>(b);
  }
  return 254;
}

// ---- Independent layout: the inverse formulas of formats.md section 6. -------------------------
// Fills (r, c) for byte o of one matrix's swizzled buffer; returns false for padding.
inline void swizzled_inverse(ScaleLayout layout, std::int64_t o, std::int64_t kb, std::int64_t* r,
                             std::int64_t* c) {
  const std::int64_t tk = (kb + 3) / 4;
  if (layout == ScaleLayout::kSwizzled128x4) {
    const std::int64_t w = o % 512, t = o / 512;
    *r = 128 * (t / tk) + 32 * ((w % 16) / 4) + w / 16;
    *c = 4 * (t % tk) + (w % 4);
  } else {  // 8x4: 32-byte tiles of [8 rows][4 cols]
    const std::int64_t w = o % 32, t = o / 32;
    *r = 8 * (t / tk) + w / 4;
    *c = 4 * (t % tk) + (w % 4);
  }
}
inline std::int64_t ref_padded_rows(ScaleLayout l, std::int64_t m) {
  return l == ScaleLayout::kSwizzled128x4 ? (m + 127) / 128 * 128
         : l == ScaleLayout::kSwizzled8x4 ? (m + 7) / 8 * 8
                                          : m;
}
inline std::int64_t ref_padded_cols(ScaleLayout l, std::int64_t kb) {
  return l == ScaleLayout::kLinear ? kb : (kb + 3) / 4 * 4;
}
// Lays out linear [B, M, Kb] scale bytes in `layout` (padding 0) via the inverse formula.
inline std::vector<std::uint8_t> ref_layout(const std::vector<std::uint8_t>& linear,
                                            std::int64_t batch, std::int64_t m, std::int64_t kb,
                                            ScaleLayout layout) {
  if (layout == ScaleLayout::kLinear) return linear;
  const std::int64_t per = ref_padded_rows(layout, m) * ref_padded_cols(layout, kb);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(batch * per), 0);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t o = 0; o < per; ++o) {
      std::int64_t r, c;
      swizzled_inverse(layout, o, kb, &r, &c);
      if (r < m && c < kb) out[b * per + o] = linear[(b * m + r) * kb + c];
    }
  }
  return out;
}

// ---- Independent quantizer model (formats.md sections 3-5, fp32 written out). -------------------
struct RefQuantized {
  std::vector<std::uint8_t> values;        // packed e2m1x2 or e4m3 bytes (bf16: none)
  std::vector<std::uint8_t> block_scales;  // linear [B, M, Kb]
  std::vector<float> f32_scales;           // FP8 schemes
  std::vector<float> global_scale;         // NVFP4*
};

inline float ref_amax(const float* v, std::int64_t n) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isnan(v[i])) m = std::max(m, std::fabs(v[i]));
  }
  return m;
}

// x: [B, M, K] fp32 (already converted from the input dtype). static_scale: per matrix or empty.
inline RefQuantized ref_quantize(const std::vector<float>& x, std::int64_t batch, std::int64_t m,
                                 std::int64_t k, const QuantConfig& cfg,
                                 const std::vector<float>& static_scale = {}) {
  RefQuantized out;
  const QuantScheme s = cfg.scheme;
  const float c6 = float_of(0x3E2AAAABu);
  const float flt_max = 3.40282346638528859812e+38f;
  if (s == QuantScheme::kNVFP4 || s == QuantScheme::kNVFP4PerToken || s == QuantScheme::kMXFP4 ||
      s == QuantScheme::kMXFP8) {
    const bool fp4 = s != QuantScheme::kMXFP8;
    const std::int64_t sfv =
        (s == QuantScheme::kNVFP4 || s == QuantScheme::kNVFP4PerToken) ? 16 : 32;
    const std::int64_t kb = k / sfv;
    out.values.assign(static_cast<std::size_t>(batch * m * (fp4 ? k / 2 : k)), 0);
    out.block_scales.assign(static_cast<std::size_t>(batch * m * kb), 0);
    for (std::int64_t b = 0; b < batch; ++b) {
      float gs = 1.0f;
      if (s == QuantScheme::kNVFP4) {
        const float amax = ref_amax(&x[b * m * k], m * k);
        gs = !static_scale.empty() ? static_scale[b] : amax == 0.0f ? 1.0f : 2688.0f / amax;
        out.global_scale.push_back(gs);
      }
      for (std::int64_t r = 0; r < m; ++r) {
        const float* row = &x[(b * m + r) * k];
        if (s == QuantScheme::kNVFP4PerToken) {
          const float amax = ref_amax(row, k);
          gs = amax == 0.0f ? 1.0f : 2688.0f / amax;
          out.global_scale.push_back(gs);
        }
        for (std::int64_t c = 0; c < kb; ++c) {
          const float vmax = ref_amax(row + c * sfv, sfv);
          std::uint8_t byte = 0;
          float out_scale = 0.0f;
          if (fp4 && s != QuantScheme::kMXFP4) {  // NVFP4 section 3
            const float gs_c6 = gs * c6;
            const float sf = vmax != 0.0f ? vmax * gs_c6 : 0.0f;
            byte = ref_e4m3(sf);
            const float sfq = static_cast<float>(ref_e4m3_value(byte));
            const float inv_gs = 1.0f / gs;
            const float denom = sfq * inv_gs;
            const float os = 1.0f / denom;
            out_scale = vmax != 0.0f ? std::fmin(os, flt_max) : 0.0f;
          } else {
            const int emax = fp4 ? 2 : 8;
            if (cfg.rule == ScaleRule::kRceil) {
              const float t = vmax * (fp4 ? c6 : 1.0f / 448.0f);
              byte = ref_e8m0_ceil(t);
            } else {
              // OCP: floor(log2(vmax)) - emax, biased, clamped.
              int e = 0;
              const int fl = vmax > 0.0f && std::isfinite(vmax) ? (std::frexp(vmax, &e), e - 1) : 0;
              const int biased = vmax == 0.0f       ? 0
                                 : std::isinf(vmax) ? 128 + 127 - emax
                                                    : fl - emax + 127;
              byte = static_cast<std::uint8_t>(std::clamp(biased, 0, 254));
            }
            out_scale = vmax != 0.0f ? static_cast<float>(std::ldexp(1.0, 127 - byte)) : 0.0f;
          }
          out.block_scales[(b * m + r) * kb + c] = byte;
          for (std::int64_t j = 0; j < sfv; ++j) {
            const float y = row[c * sfv + j] * out_scale;
            const std::int64_t e = (b * m + r) * k + c * sfv + j;
            if (fp4) {
              out.values[e / 2] |= static_cast<std::uint8_t>(ref_e2m1(y) << ((e % 2) * 4));
            } else {
              out.values[e] = ref_e4m3(y);
            }
          }
        }
      }
    }
    return out;
  }
  if (s == QuantScheme::kBF16) return out;
  // FP8 with fp32 decode scales.
  out.values.assign(static_cast<std::size_t>(batch * m * k), 0);
  const std::int64_t groups = (k + 127) / 128;
  auto block_s = [](float amax) { return std::max(amax, 1e-10f) / 448.0f; };
  for (std::int64_t b = 0; b < batch; ++b) {
    const float* mat = &x[b * m * k];
    std::vector<float> s_of(static_cast<std::size_t>(m * k));  // decode scale per element
    if (s == QuantScheme::kFP8PerTensor) {
      float sc = !static_scale.empty() ? static_scale[b] : ref_amax(mat, m * k) / 448.0f;
      if (sc == 0.0f) sc = 1.0f;
      out.f32_scales.push_back(sc);
      std::fill(s_of.begin(), s_of.end(), sc);
    } else if (s == QuantScheme::kFP8PerToken) {
      for (std::int64_t r = 0; r < m; ++r) {
        const float sc = std::max(ref_amax(mat + r * k, k) / 448.0f, 1.0f / 229376.0f);
        out.f32_scales.push_back(sc);
        std::fill(s_of.begin() + r * k, s_of.begin() + (r + 1) * k, sc);
      }
    } else if (s == QuantScheme::kFP8Block1x128) {
      for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t g = 0; g < groups; ++g) {
          const std::int64_t k0 = g * 128, n = std::min<std::int64_t>(128, k - k0);
          const float sc = block_s(ref_amax(mat + r * k + k0, n));
          out.f32_scales.push_back(sc);
          for (std::int64_t j = 0; j < n; ++j) s_of[r * k + k0 + j] = sc;
        }
      }
    } else {  // 128x128
      for (std::int64_t rt = 0; rt < (m + 127) / 128; ++rt) {
        for (std::int64_t g = 0; g < groups; ++g) {
          float amax = 0.0f;
          for (std::int64_t r = rt * 128; r < std::min(m, rt * 128 + 128); ++r) {
            const std::int64_t k0 = g * 128, n = std::min<std::int64_t>(128, k - k0);
            amax = std::max(amax, ref_amax(mat + r * k + k0, n));
          }
          const float sc = block_s(amax);
          out.f32_scales.push_back(sc);
          for (std::int64_t r = rt * 128; r < std::min(m, rt * 128 + 128); ++r) {
            for (std::int64_t kk = g * 128; kk < std::min(k, g * 128 + 128); ++kk)
              s_of[r * k + kk] = sc;
          }
        }
      }
    }
    for (std::int64_t i = 0; i < m * k; ++i) out.values[b * m * k + i] = ref_e4m3(mat[i] / s_of[i]);
  }
  return out;
}

}  // namespace moekit::quant_test
