// NaN / Inf counting and locating (io/non_finite.hpp) for every floating-point storage format.
#include "io/non_finite.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace moekit::io::detail {
namespace {

TEST(NonFinite, CountsAndLocatesInEveryFormat) {
  Tensor f32(DType::kF32, Shape{20, 4});
  for (std::int64_t i = 0; i < f32.numel(); ++i) f32.ptr<float>()[i] = float(i) - 40.0f;
  EXPECT_FALSE(count_non_finite(f32.view()).any());
  EXPECT_EQ(non_finite_message(f32.view()), "");
  f32.ptr<float>()[17 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  f32.ptr<float>()[19 * 4 + 0] = -std::numeric_limits<float>::quiet_NaN();
  f32.ptr<float>()[3 * 4 + 1] = -std::numeric_limits<float>::infinity();
  const NonFiniteCount c = count_non_finite(f32.view());
  EXPECT_EQ(c.nan, 2);
  EXPECT_EQ(c.inf, 1);
  EXPECT_EQ(c.first_nan, 17 * 4 + 2);
  EXPECT_EQ(c.first_inf, 3 * 4 + 1);
  EXPECT_EQ(non_finite_message(f32.view()),
            "contains 2 NaN values, first at [17, 2], and 1 Inf value, first at [3, 1]");

  Tensor bf16(DType::kBF16, Shape{2, 3, 4});
  std::memset(bf16.data(), 0, bf16.nbytes());
  bf16.ptr<std::uint16_t>()[1 * 12 + 2 * 4 + 3] = 0xFF80;  // -Inf
  bf16.ptr<std::uint16_t>()[5] = 0x7F7F;                   // the largest finite bf16
  EXPECT_EQ(non_finite_message(bf16.view()), "contains 1 Inf value, first at [1, 2, 3]");

  Tensor f16(DType::kF16, Shape{8});
  std::memset(f16.data(), 0, f16.nbytes());
  f16.ptr<std::uint16_t>()[6] = 0x7E00;  // NaN
  f16.ptr<std::uint16_t>()[2] = 0x7BFF;  // 65504, finite
  EXPECT_EQ(non_finite_message(f16.view()), "contains 1 NaN value, first at [6]");

  Tensor e4m3(DType::kE4M3, Shape{4});
  const std::uint8_t codes[4] = {0x7E, 0xFE, 0xFF, 0x7F};  // +-448 finite; 0x7F/0xFF NaN
  std::memcpy(e4m3.data(), codes, 4);
  EXPECT_EQ(count_non_finite(e4m3.view()).nan, 2);
  EXPECT_EQ(count_non_finite(e4m3.view()).first_nan, 2);

  Tensor e8m0(DType::kE8M0, Shape{3});
  const std::uint8_t scales[3] = {0x7F, 0xFE, 0xFF};
  std::memcpy(e8m0.data(), scales, 3);
  EXPECT_EQ(non_finite_message(e8m0.view()), "contains 1 NaN value, first at [2]");

  // Integers and packed e2m1 hold no special values.
  Tensor u8(DType::kU8, Shape{2});
  std::memset(u8.data(), 0xFF, 2);
  EXPECT_FALSE(count_non_finite(u8.view()).any());
}

// Large tensors are scanned in parallel chunks: the first index is still the smallest.
TEST(NonFinite, FirstIndexIsTheSmallestAcrossChunks) {
  Tensor t(DType::kF32, Shape{3 << 20});
  std::memset(t.data(), 0, t.nbytes());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  t.ptr<float>()[(3 << 20) - 1] = nan;
  t.ptr<float>()[(2 << 20) + 5] = nan;
  t.ptr<float>()[(1 << 20) + 7] = nan;
  const NonFiniteCount c = count_non_finite(t.view());
  EXPECT_EQ(c.nan, 3);
  EXPECT_EQ(c.first_nan, (1 << 20) + 7);
}

}  // namespace
}  // namespace moekit::io::detail
