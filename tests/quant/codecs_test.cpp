// Scalar codecs (formats.md sections 1-2): exhaustive over every bf16 pattern and a ~16M fp32
// sample, against the CUDA toolkit's host emulation (when its headers are present) and against
// the independent table model of quant_test_util.hpp (always).
#include "moekit/quant/codecs.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "moekit/core/parallel.hpp"
#include "quant/quant_test_util.hpp"

#if MOEKIT_HAVE_CUDA_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace moekit {
namespace {

using quant_test::bits_of;
using quant_test::float_of;

// ---- Inputs --------------------------------------------------------------------------------
const std::vector<float>& every_bf16() {
  static const std::vector<float> all = [] {
    std::vector<float> v(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) v[h] = float_of(h << 16);
    return v;
  }();
  return all;
}

void add_with_neighbors(std::vector<float>& v, float x) {
  for (float s : {x, -x}) {
    v.push_back(s);
    v.push_back(std::nextafter(s, std::numeric_limits<float>::infinity()));
    v.push_back(std::nextafter(s, -std::numeric_limits<float>::infinity()));
  }
}

// Every tie point of e2m1, e4m3, bf16 and f16 (+-, with both neighbours), every power of two
// (the e8m0 boundaries) and the special values.
const std::vector<float>& fp32_ties() {
  static const std::vector<float> ties = [] {
    std::vector<float> v;
    const auto& t2 = quant_test::e2m1_table();
    for (std::size_t i = 0; i + 1 < t2.size(); ++i)
      add_with_neighbors(v, float((t2[i] + t2[i + 1]) / 2));
    const auto& t8 = quant_test::e4m3_table();
    for (std::size_t i = 0; i + 1 < t8.size(); ++i)
      add_with_neighbors(v, float((t8[i] + t8[i + 1]) / 2));
    add_with_neighbors(v, 464.0f);
    for (std::uint32_t h = 0; h < 0x7F80; ++h) {  // bf16 midpoints
      add_with_neighbors(v, float_of((h << 16) | 0x8000u));
    }
    for (std::uint32_t h = 0; h < 0x7C00; ++h) {  // f16 midpoints (exact in fp32)
      const std::uint16_t a = static_cast<std::uint16_t>(h), b = static_cast<std::uint16_t>(h + 1);
      add_with_neighbors(v, float((double(f16_to_float(a)) + double(f16_to_float(b))) / 2));
    }
    for (int e = -149; e <= 127; ++e) add_with_neighbors(v, std::ldexp(1.0f, e));
    for (float s : {0.0f, std::numeric_limits<float>::infinity(), 3.4028235e38f,
                    std::numeric_limits<float>::denorm_min()}) {
      add_with_neighbors(v, s);
    }
    for (std::uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u}) {
      v.push_back(float_of(nan));
    }
    return v;
  }();
  return ties;
}

// The tie points plus random fp32 subnormals, random bits and random values in the formats'
// range: about 16M floats.
const std::vector<float>& fp32_sample() {
  static const std::vector<float> sample = [] {
    std::vector<float> v = fp32_ties();
    v.reserve(16u << 20);
    std::mt19937_64 rng(12345);  // fixed: the sample is data, the same on every run
    for (int i = 0; i < 1 << 20; ++i) {
      v.push_back(float_of(static_cast<std::uint32_t>(rng() & 0x807FFFFFu)));  // subnormals
    }
    for (int i = 0; i < 7 << 20; ++i) v.push_back(float_of(static_cast<std::uint32_t>(rng())));
    std::uniform_int_distribution<int> exp(-30, 20);
    while (v.size() < (16u << 20)) {
      const std::uint32_t mant = static_cast<std::uint32_t>(rng()) & 0x807FFFFFu;
      v.push_back(float_of(mant | static_cast<std::uint32_t>(exp(rng) + 127) << 23));
    }
    return v;
  }();
  return sample;
}

// Runs check(x) -> bool over v in parallel; reports the first few mismatches.
template <typename Check, typename Describe>
void check_all(const std::vector<float>& v, Check check, Describe describe) {
  std::atomic<std::int64_t> bad{0};
  std::atomic<std::int64_t> first{-1};
  parallel_for(static_cast<std::int64_t>(v.size()), 1 << 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      if (!check(v[static_cast<std::size_t>(i)])) {
        if (bad++ == 0) first = i;
      }
    }
  });
  EXPECT_EQ(bad.load(), 0) << "first mismatch: " << (first >= 0 ? describe(v[first]) : "");
}

std::string hex(std::uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", u);
  return buf;
}

// ---- Against the independent table model (always runs) ---------------------------------------
TEST(Codecs, E2M1MatchesTableModel) {
  for (const auto* v : {&every_bf16(), &fp32_sample()}) {
    check_all(
        *v, [](float x) { return float_to_e2m1(x) == quant_test::ref_e2m1(x); },
        [](float x) {
          return hex(bits_of(x)) + " -> " + std::to_string(float_to_e2m1(x)) + " vs " +
                 std::to_string(quant_test::ref_e2m1(x));
        });
  }
}

TEST(Codecs, E4M3MatchesTableModel) {
  for (const auto* v : {&every_bf16(), &fp32_sample()}) {
    check_all(
        *v, [](float x) { return float_to_e4m3(x) == quant_test::ref_e4m3(x); },
        [](float x) {
          return hex(bits_of(x)) + " -> " + std::to_string(float_to_e4m3(x)) + " vs " +
                 std::to_string(quant_test::ref_e4m3(x));
        });
  }
}

TEST(Codecs, E8M0CeilMatchesModel) {
  // Scan order matters little here: the model is a 254-step search, so use the bf16 set plus
  // every power of two and its neighbours (the only places where the answer changes).
  std::vector<float> v = every_bf16();
  for (int e = -149; e <= 127; ++e) add_with_neighbors(v, std::ldexp(1.0f, e));
  for (std::uint32_t m : {0x3FFFFFu, 0x400000u, 0x400001u, 0x7FFFFFu}) v.push_back(float_of(m));
  check_all(
      v,
      [](float x) {
        return std::isnan(x) ? e8m0_ceil(x) == 0xFF : e8m0_ceil(x) == quant_test::ref_e8m0_ceil(x);
      },
      [](float x) { return hex(bits_of(x)) + " -> " + std::to_string(e8m0_ceil(x)); });
}

TEST(Codecs, DecodersMatchTableModel) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(double(e2m1_to_float(static_cast<std::uint8_t>(c))),
              quant_test::ref_e2m1_value(static_cast<std::uint8_t>(c)));
    EXPECT_EQ(std::signbit(e2m1_to_float(static_cast<std::uint8_t>(c))), (c & 8) != 0);
  }
  for (int c = 0; c < 256; ++c) {
    const auto u = static_cast<std::uint8_t>(c);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(e4m3_to_float(u)));
      continue;
    }
    EXPECT_EQ(double(e4m3_to_float(u)), quant_test::ref_e4m3_value(u)) << c;
    EXPECT_EQ(std::signbit(e4m3_to_float(u)), (c & 0x80) != 0) << c;
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(u)), u) << c;  // round trip
  }
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(double(e8m0_to_float(static_cast<std::uint8_t>(b))), std::ldexp(1.0, b - 127)) << b;
    EXPECT_EQ(e8m0_ceil(e8m0_to_float(static_cast<std::uint8_t>(b))), b);
    EXPECT_EQ(e8m0_floor(e8m0_to_float(static_cast<std::uint8_t>(b))), b == 0 ? 0 : b);
  }
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
}

TEST(Codecs, HandPickedValues) {
  EXPECT_EQ(float_to_e2m1(0.25f), 0x0);
  EXPECT_EQ(float_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.25f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.75f), 0x4);
  EXPECT_EQ(float_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(float_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(float_to_e2m1(5.0000005f), 0x7);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(-INFINITY), 0xF);
  EXPECT_EQ(float_to_e2m1(-NAN), 0x7);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(float_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(float_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie to even (0)
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(3.0f, -10)), 0x82);  // 1.5 * 2^-9 ties to 2 * 2^-9
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(e8m0_ceil(1.0f), 127);
  EXPECT_EQ(e8m0_ceil(1.0000001f), 128);
  EXPECT_EQ(e8m0_ceil(0.0f), 0);
  EXPECT_EQ(e8m0_ceil(float_of(0x400000u)), 0);  // 2^-127
  EXPECT_EQ(e8m0_ceil(float_of(0x400001u)), 1);
  EXPECT_EQ(e8m0_ceil(3e38f), 254);
  EXPECT_EQ(e8m0_ceil(INFINITY), 254);
  EXPECT_EQ(e8m0_floor_exponent(6.0f, 2), 127);  // floor(log2 6) = 2 -> 2 - 2 + 127
  EXPECT_EQ(e8m0_floor_exponent(8.0f, 2), 128);
  EXPECT_EQ(e8m0_floor_exponent(1e-39f, 2), 0);
  EXPECT_EQ(e8m0_floor_exponent(0.0f, 8), 0);
  EXPECT_EQ(e8m0_floor_exponent(3e38f, 2), 252);
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3F80);  // tie to even
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3F82);  // tie to even (up)
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(float_of(0x7F800001u)))));
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -26)), 0x0001);
  EXPECT_EQ(bits_of(exp2_int(-149)), 1u);
  EXPECT_EQ(bits_of(exp2_int(-127)), 0x400000u);
  EXPECT_EQ(exp2_int(127), std::ldexp(1.0f, 127));
  EXPECT_EQ(bits_of(kRcp6), 0x3E2AAAABu);
}

// f16 against the compiler's _Float16 conversions (independent, correctly rounded; slow software
// conversions, hence the tie points rather than the whole sample), and every f16 back to fp32.
TEST(Codecs, F16MatchesCompilerFloat16) {
#if defined(__FLT16_MAX__)
  for (const auto* v : {&every_bf16(), &fp32_ties()}) {
    check_all(
        *v,
        [](float x) {
          const _Float16 h = static_cast<_Float16>(x);
          std::uint16_t ref;
          std::memcpy(&ref, &h, 2);
          const std::uint16_t got = float_to_f16(x);
          if (std::isnan(x)) return std::isnan(f16_to_float(got)) && (got >> 15) == (ref >> 15);
          return got == ref;
        },
        [](float x) { return hex(bits_of(x)) + " -> " + std::to_string(float_to_f16(x)); });
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    _Float16 f;
    const std::uint16_t u = static_cast<std::uint16_t>(h);
    std::memcpy(&f, &u, 2);
    const float ref = static_cast<float>(f);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f16_to_float(u)));
    } else {
      EXPECT_EQ(bits_of(f16_to_float(u)), bits_of(ref)) << h;
    }
  }
#else
  GTEST_SKIP() << "compiler has no _Float16";
#endif
}

TEST(Codecs, Bf16RoundTripAndRounding) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
    } else {
      ASSERT_EQ(float_to_bf16(f), h);
    }
  }
  // RN-even against a double model: the nearer of the two bf16 magnitudes around |x|.
  check_all(
      fp32_sample(),
      [](float x) {
        if (std::isnan(x)) return std::isnan(bf16_to_float(float_to_bf16(x)));
        const std::uint32_t u = bits_of(x);
        const std::uint32_t mag = u & 0x7FFFFFFFu, lo = mag >> 16;
        std::uint32_t want = lo;
        if (mag < 0x7F800000u) {
          const int e = static_cast<int>(lo >> 7);
          const double ulp = std::ldexp(1.0, std::max(e, 1) - 127 - 7);
          const double a = bf16_to_float(static_cast<std::uint16_t>(lo));
          const double d1 = std::fabs(double(x)) - a, d2 = a + ulp - std::fabs(double(x));
          want = d1 < d2 ? lo : d2 < d1 ? lo + 1 : (lo & 1 ? lo + 1 : lo);
        }
        return float_to_bf16(x) == (want | ((u >> 16) & 0x8000u));
      },
      [](float x) { return hex(bits_of(x)) + " -> " + std::to_string(float_to_bf16(x)); });
}

// ---- Against the CUDA toolkit's host emulation -----------------------------------------------
#if MOEKIT_HAVE_CUDA_HEADERS
std::uint8_t toolkit_e2m1(float x) {
  float2 f;
  f.x = x;
  f.y = 0.0f;
  return static_cast<std::uint8_t>(__nv_cvt_float2_to_fp4x2(f, __NV_E2M1, cudaRoundNearest) & 0xF);
}
std::uint8_t toolkit_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
#endif

TEST(CodecsToolkit, FloatToE2M1) {
#if MOEKIT_HAVE_CUDA_HEADERS
  // Also the packed pair order: x.x in the low nibble (= element 2j).
  float2 f;
  f.x = 1.0f;
  f.y = -6.0f;
  EXPECT_EQ(__nv_cvt_float2_to_fp4x2(f, __NV_E2M1, cudaRoundNearest), pack_e2m1x2(0x2, 0xF));
  for (const auto* v : {&every_bf16(), &fp32_sample()}) {
    check_all(
        *v, [](float x) { return float_to_e2m1(x) == toolkit_e2m1(x); },
        [](float x) {
          return hex(bits_of(x)) + " -> " + std::to_string(float_to_e2m1(x)) + " vs toolkit " +
                 std::to_string(toolkit_e2m1(x));
        });
  }
#else
  GTEST_SKIP() << "CUDA toolkit headers (cuda_fp4.h) not found: exhaustive cross-check skipped";
#endif
}

TEST(CodecsToolkit, FloatToE4M3) {
#if MOEKIT_HAVE_CUDA_HEADERS
  for (const auto* v : {&every_bf16(), &fp32_sample()}) {
    check_all(
        *v, [](float x) { return float_to_e4m3(x) == toolkit_e4m3(x); },
        [](float x) {
          return hex(bits_of(x)) + " -> " + std::to_string(float_to_e4m3(x)) + " vs toolkit " +
                 std::to_string(toolkit_e4m3(x));
        });
  }
  // The __nv_fp8_e4m3 type (satfinite RN constructor) agrees too.
  for (float x : every_bf16()) {
    ASSERT_EQ(float_to_e4m3(x), __nv_fp8_e4m3(x).__x) << hex(bits_of(x));
  }
#else
  GTEST_SKIP() << "CUDA toolkit headers (cuda_fp8.h) not found: exhaustive cross-check skipped";
#endif
}

TEST(CodecsToolkit, FloatToE8M0) {
#if MOEKIT_HAVE_CUDA_HEADERS
  for (const auto* v : {&every_bf16(), &fp32_sample()}) {
    check_all(
        *v,
        [](float x) {
          return e8m0_ceil(x) == __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf) &&
                 e8m0_floor(x) == __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero);
        },
        [](float x) {
          return hex(bits_of(x)) + " -> ceil " + std::to_string(e8m0_ceil(x)) + " vs " +
                 std::to_string(__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)) +
                 ", floor " + std::to_string(e8m0_floor(x)) + " vs " +
                 std::to_string(__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero));
        });
  }
#else
  GTEST_SKIP() << "CUDA toolkit headers (cuda_fp8.h) not found: exhaustive cross-check skipped";
#endif
}

TEST(CodecsToolkit, Bf16AndF16) {
#if MOEKIT_HAVE_CUDA_HEADERS
  for (const auto* v : {&every_bf16(), &fp32_sample()}) {
    check_all(
        *v,
        [](float x) {
          const std::uint16_t b = __bfloat16_as_ushort(__float2bfloat16_rn(x));
          const std::uint16_t h = __half_as_ushort(__float2half_rn(x));
          if (std::isnan(x)) {
            return std::isnan(bf16_to_float(float_to_bf16(x))) &&
                   std::isnan(f16_to_float(float_to_f16(x)));
          }
          return float_to_bf16(x) == b && float_to_f16(x) == h;
        },
        [](float x) {
          return hex(bits_of(x)) + " -> bf16 " + std::to_string(float_to_bf16(x)) + ", f16 " +
                 std::to_string(float_to_f16(x));
        });
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float ref = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
    const float got = f16_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(bits_of(got), bits_of(ref)) << h;
    }
  }
#else
  GTEST_SKIP() << "CUDA toolkit headers (cuda_bf16.h) not found: exhaustive cross-check skipped";
#endif
}

TEST(CodecsToolkit, CodesToFloat) {
#if MOEKIT_HAVE_CUDA_HEADERS
  for (int c = 0; c < 16; ++c) {
    const __half_raw h = __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(c), __NV_E2M1);
    EXPECT_EQ(bits_of(e2m1_to_float(static_cast<std::uint8_t>(c))),
              bits_of(__half2float(__half(h))))
        << c;
  }
  for (int c = 0; c < 256; ++c) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3);
    const float ref = __half2float(__half(h));
    const float got = e4m3_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(bits_of(got), bits_of(ref)) << c;
    }
    const __nv_bfloat16_raw b = __nv_cvt_e8m0_to_bf16raw(static_cast<__nv_fp8_storage_t>(c));
    const float ref8 = bf16_to_float(b.x);
    const float got8 = e8m0_to_float(static_cast<std::uint8_t>(c));
    if (std::isnan(ref8)) {
      EXPECT_TRUE(std::isnan(got8)) << c;
    } else {
      EXPECT_EQ(bits_of(got8), bits_of(ref8)) << c;
    }
  }
#else
  GTEST_SKIP() << "CUDA toolkit headers not found: exhaustive cross-check skipped";
#endif
}

}  // namespace
}  // namespace moekit
