// Block-scale layouts (formats.md section 6): offset formulas, their inverses, and the host
// swizzle / unswizzle transforms.
#include "moekit/quant/layout.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "quant/quant_test_util.hpp"

namespace moekit {
namespace {

const std::int64_t kRows[] = {1, 3, 7, 8, 9, 31, 32, 33, 127, 128, 129, 257};
const std::int64_t kCols[] = {1, 2, 3, 4, 5, 8, 9};

// scale_offset is a bijection from the valid (r, c) onto the buffer minus padding, and the
// inverse formula of formats.md maps each offset back.
TEST(Layout, OffsetsMatchInverseFormula) {
  for (ScaleLayout layout : {ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
    for (std::int64_t m : kRows) {
      for (std::int64_t kb : kCols) {
        SCOPED_TRACE(std::string(layout_name(layout)) + " M=" + std::to_string(m) +
                     " Kb=" + std::to_string(kb));
        const std::int64_t size = scale_padded_rows(layout, m) * scale_padded_cols(layout, kb);
        EXPECT_EQ(scale_padded_rows(layout, m), quant_test::ref_padded_rows(layout, m));
        EXPECT_EQ(scale_padded_cols(layout, kb), quant_test::ref_padded_cols(layout, kb));
        std::vector<int> hits(static_cast<std::size_t>(size), 0);
        for (std::int64_t r = 0; r < scale_padded_rows(layout, m); ++r) {
          for (std::int64_t c = 0; c < scale_padded_cols(layout, kb); ++c) {
            const std::int64_t o = scale_offset(layout, r, c, kb);
            ASSERT_GE(o, 0);
            ASSERT_LT(o, size);
            ++hits[static_cast<std::size_t>(o)];
            std::int64_t rr, cc;
            quant_test::swizzled_inverse(layout, o, kb, &rr, &cc);
            ASSERT_EQ(rr, r) << "c=" << c;
            ASSERT_EQ(cc, c) << "r=" << r;
          }
        }
        for (int h : hits) ASSERT_EQ(h, 1);
      }
    }
  }
}

// The kernels' split offsets (row part + column part) equal scale_offset for every layout.
TEST(Layout, RowPlusColumnOffsetEqualsOffset) {
  for (ScaleLayout layout :
       {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
    for (std::int64_t m : kRows) {
      for (std::int64_t kb : kCols) {
        for (std::int64_t r = 0; r < scale_padded_rows(layout, m); ++r) {
          for (std::int64_t c = 0; c < scale_padded_cols(layout, kb); ++c) {
            ASSERT_EQ(scale_row_offset(layout, r, kb) + scale_col_offset(layout, c),
                      scale_offset(layout, r, c, kb))
                << layout_name(layout) << " M=" << m << " Kb=" << kb << " r=" << r << " c=" << c;
          }
        }
      }
    }
  }
}

TEST(Layout, Swizzled128x4KnownOffsets) {
  // formats.md: (floor(r/128)*Tk + floor(c/4))*512 + (r%32)*16 + floor((r%128)/32)*4 + c%4.
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 0, 0, 5), 0);
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 1, 0, 5), 16);
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 32, 0, 5), 4);
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 0, 3, 5), 3);
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 0, 4, 5), 512);
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 128, 0, 5), 1024);  // Tk = 2
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled128x4, 127, 7, 8), 512 + 31 * 16 + 3 * 4 + 3);
  EXPECT_EQ(scale_offset(ScaleLayout::kSwizzled8x4, 9, 5, 5), (1 * 2 + 1) * 32 + 1 * 4 + 1);
  EXPECT_EQ(scale_offset(ScaleLayout::kLinear, 9, 4, 5), 49);
}

TEST(Layout, SwizzleRoundTripAndPadding) {
  const std::uint64_t seed = quant_test::test_seed() + 2;
  QUANT_TEST_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  for (ScaleLayout layout :
       {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
    for (std::int64_t m : {1, 3, 127, 128, 129}) {
      for (std::int64_t kb : {3, 4, 5}) {
        for (bool batched : {false, true}) {
          SCOPED_TRACE(std::string(layout_name(layout)) + " M=" + std::to_string(m) +
                       " Kb=" + std::to_string(kb) + (batched ? " B=2" : ""));
          const std::int64_t b = batched ? 2 : 1;
          const Shape lin_shape = batched ? Shape{b, m, kb} : Shape{m, kb};
          Tensor lin(DType::kE8M0, lin_shape);
          std::vector<std::uint8_t> src(static_cast<std::size_t>(b * m * kb));
          for (auto& v : src) v = static_cast<std::uint8_t>(1 + rng() % 255);  // never 0
          std::memcpy(lin.data(), src.data(), src.size());
          const std::int64_t pr = scale_padded_rows(layout, m), pc = scale_padded_cols(layout, kb);
          Tensor sw(DType::kE8M0, batched ? Shape{b, pr, pc} : Shape{pr, pc});
          std::memset(sw.data(), 0xCD, sw.nbytes());
          swizzle_scales(lin, layout, sw);
          const auto* p = sw.ptr<const std::uint8_t>();
          EXPECT_EQ(std::vector<std::uint8_t>(p, p + sw.nbytes()),
                    quant_test::ref_layout(src, b, m, kb, layout));
          Tensor back(DType::kE8M0, lin_shape);
          unswizzle_scales(sw, layout, m, kb, back);
          EXPECT_EQ(std::memcmp(back.data(), src.data(), src.size()), 0);
        }
      }
    }
  }
}

TEST(Layout, Validation) {
  Tensor lin(DType::kE4M3, Shape{3, 5});
  Tensor ok(DType::kE4M3, Shape{128, 8});
  quant_test::expect_error(
      [&] {
        swizzle_scales(lin, ScaleLayout::kSwizzled128x4, Tensor(DType::kE4M3, Shape{128, 5}));
      },
      {"swizzle_scales", "out.shape", "[128, 8]", "[128, 5]"});
  quant_test::expect_error(
      [&] {
        swizzle_scales(lin, ScaleLayout::kSwizzled128x4, Tensor(DType::kE8M0, Shape{128, 8}));
      },
      {"out.dtype", "e4m3", "e8m0"});
  quant_test::expect_error(
      [&] {
        swizzle_scales(Tensor(DType::kF32, Shape{3, 5}), ScaleLayout::kSwizzled128x4, ok);
      },
      {"linear.dtype", "f32"});
  const TensorView on_gpu(reinterpret_cast<void*>(0x1000), DType::kE4M3, Shape{3, 5},
                          Device::cuda(0));
  quant_test::expect_error([&] { swizzle_scales(on_gpu, ScaleLayout::kSwizzled128x4, ok); },
                           {"linear.device", "host", "cuda:0"});
  quant_test::expect_error(
      [&] {
        unswizzle_scales(ok, ScaleLayout::kSwizzled128x4, 3, 5, Tensor(DType::kE4M3, Shape{3, 4}));
      },
      {"unswizzle_scales", "out.shape", "[3, 5]"});
  quant_test::expect_error([&] { unswizzle_scales(ok, ScaleLayout::kSwizzled8x4, 3, 5, lin); },
                           {"swizzled.shape", "[8, 8]", "[128, 8]"});
}

}  // namespace
}  // namespace moekit
