// Weight preparation: every function against its inverse (bitwise round trips), hand-checked
// layouts, consistency of weights and their block scales, and the errors of scale folding.
#include "moekit/weights/prepare.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "framework/seed_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/layout.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {
namespace {

using testing::expect_error;

Tensor random_bytes(DType dtype, Shape s, std::mt19937& rng) {
  Tensor t(dtype, s);
  auto* p = static_cast<unsigned char*>(t.data());
  for (std::size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Row r of expert e as an int (rows of [E, R, C] i32 filled with e*1000 + r).
Tensor row_ids(std::int64_t e, std::int64_t rows, std::int64_t cols) {
  Tensor t(DType::kI32, Shape{e, rows, cols});
  for (std::int64_t x = 0; x < e; ++x)
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        t.ptr<std::int32_t>()[(x * rows + r) * cols + c] = static_cast<std::int32_t>(x * 1000 + r);
  return t;
}
int row_at(const Tensor& t, std::int64_t e, std::int64_t r) {
  const std::int64_t rows = t.shape()[1], cols = t.shape()[2];
  return t.ptr<std::int32_t>()[(e * rows + r) * cols];
}

TEST(WeightPrep, LayoutsByHand) {
  const Tensor t = row_ids(2, 8, 3);  // I = 4
  const Tensor swapped = swap_gate_up(t);
  EXPECT_EQ(row_at(swapped, 1, 0), 1004);
  EXPECT_EQ(row_at(swapped, 1, 4), 1000);
  const Tensor halves = deinterleave_gate_up(t);  // gate = even rows, up = odd rows
  EXPECT_EQ(row_at(halves, 0, 1), 2);
  EXPECT_EQ(row_at(halves, 0, 4), 1);
  EXPECT_EQ(row_at(halves, 0, 7), 7);
  const Tensor big =
      row_ids(1, 256, 1);  // I = 128, groups of 64: up 0-63, gate 0-63, up 64-127, ...
  const Tensor lg = interleave_linear_gate(big);
  EXPECT_EQ(row_at(lg, 0, 0), 128);         // up row 0
  EXPECT_EQ(row_at(lg, 0, 63), 128 + 63);   // up row 63
  EXPECT_EQ(row_at(lg, 0, 64), 0);          // gate row 0
  EXPECT_EQ(row_at(lg, 0, 128), 128 + 64);  // up row 64
  EXPECT_EQ(row_at(lg, 0, 192), 64);        // gate row 64
  const Tensor padded = pad_gate_up_rows(t, 6);
  EXPECT_EQ(padded.shape(), (Shape{2, 12, 3}));
  EXPECT_EQ(row_at(padded, 1, 3), 1003);
  EXPECT_EQ(row_at(padded, 1, 4), 0);  // zero padding
  EXPECT_EQ(row_at(padded, 1, 6), 1004);
}

TEST(WeightPrep, RoundTripsAreBitwise) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937 rng(static_cast<unsigned>(seed));
  for (DType dt : {DType::kBF16, DType::kE2M1x2, DType::kF32}) {
    const Tensor w = random_bytes(dt, Shape{3, 256, 24}, rng);
    EXPECT_TRUE(same_bytes(swap_gate_up(swap_gate_up(w)), w));
    EXPECT_TRUE(same_bytes(deinterleave_gate_up(interleave_gate_up(w)), w));
    EXPECT_TRUE(same_bytes(interleave_gate_up(deinterleave_gate_up(w)), w));
    EXPECT_TRUE(same_bytes(deinterleave_linear_gate(interleave_linear_gate(w)), w));
    EXPECT_TRUE(same_bytes(deinterleave_linear_gate(interleave_linear_gate(w, 32), 32), w));
    EXPECT_TRUE(same_bytes(crop_gate_up_rows(pad_gate_up_rows(w, 192), 128), w));
    EXPECT_TRUE(same_bytes(crop_rows_cols(pad_rows_cols(w, 300, 32), 256, 24), w));
  }
  // Biases [E, 2I].
  const Tensor b = random_bytes(DType::kF32, Shape{4, 10}, rng);
  EXPECT_TRUE(same_bytes(interleave_gate_up(deinterleave_gate_up(b)), b));
  EXPECT_TRUE(same_bytes(swap_gate_up(swap_gate_up(b)), b));
  EXPECT_TRUE(same_bytes(crop_gate_up_rows(pad_gate_up_rows(b, 8), 5), b));
  // Block scales: swizzle and back, every layout, ragged sizes.
  for (ScaleLayout l : {ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
    for (std::int64_t rows : {1, 127, 129}) {
      for (std::int64_t kb : {3, 4, 5}) {
        const Tensor s = random_bytes(DType::kE4M3, Shape{2, rows, kb}, rng);
        const Tensor sw = swizzle_block_scales(s, l);
        EXPECT_EQ(sw.shape(), (Shape{2, scale_padded_rows(l, rows), scale_padded_cols(l, kb)}));
        EXPECT_TRUE(same_bytes(unswizzle_block_scales(sw, rows, kb, l), s));
      }
    }
  }
}

// Reordering weights and their linear block scales with the same call keeps every weight row
// with its scales: dequantize(reordered) == reorder(dequantize(original)).
TEST(WeightPrep, WeightsAndScalesMoveTogether) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::normal_distribution<float> nd;
  Tensor x(DType::kF32, Shape{2, 256, 64});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] = nd(rng);
  QuantConfig cfg;
  cfg.scheme = QuantScheme::kMXFP4;
  const QuantizedTensor q = quantize(x, cfg);
  const Tensor deq = dequantize(q.view());
  QuantizedTensor r;
  r.config = cfg;
  r.values = interleave_linear_gate(q.values);
  r.scales = interleave_linear_gate(q.scales);
  EXPECT_TRUE(same_bytes(dequantize(r.view()), interleave_linear_gate(deq)));
  // Padding H (columns) and I (gate/up rows) with zeros: values and scales stay consistent.
  QuantizedTensor p;
  p.config = cfg;
  p.values = pad_rows_cols(pad_gate_up_rows(q.values, 160), 320, 64 / 2 + 16);  // H 64 -> 96
  p.scales = pad_rows_cols(pad_gate_up_rows(q.scales, 160), 320, 3);
  const Tensor pd = dequantize(p.view());
  EXPECT_TRUE(same_bytes(crop_rows_cols(crop_gate_up_rows(pd, 128), 256, 64), deq));
  for (std::int64_t c = 64; c < 96; ++c) EXPECT_EQ(pd.ptr<float>()[c], 0.0f);
}

TEST(WeightPrep, FoldScales) {
  Tensor w13(DType::kF32, Shape{3, 2}), a13(DType::kF32, Shape{3}), w2(DType::kF32, Shape{3}),
      a2(DType::kF32, Shape{3});
  for (int e = 0; e < 3; ++e) {
    w13.ptr<float>()[2 * e] = w13.ptr<float>()[2 * e + 1] = 0.5f * (e + 1);
    a13.ptr<float>()[e] = 0.25f;
    w2.ptr<float>()[e] = 2.0f * (e + 1);
    a2.ptr<float>()[e] = 4.0f;
  }
  const FoldedScales f = fold_scales(w13, a13, w2, a2);
  EXPECT_EQ(f.g1_alpha.ptr<float>()[2], 0.5f * 3 * 0.25f);
  EXPECT_EQ(f.a1_gscale.ptr<float>()[0], 4.0f);
  EXPECT_EQ(f.g2_alpha.ptr<float>()[1], 16.0f);
  EXPECT_EQ(f.a2_gscale.ptr<float>()[0], 0.25f);
  const UnfoldedScales u = unfold_scales(f);
  // Powers of two: the round trip is exact here (in general within 2 ulp: two divisions).
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(u.w13_scale_2.ptr<float>()[e], w13.ptr<float>()[2 * e]);
    EXPECT_EQ(u.a13_scale.ptr<float>()[e], 0.25f);
    EXPECT_EQ(u.w2_scale_2.ptr<float>()[e], w2.ptr<float>()[e]);
  }
  a13.ptr<float>()[2] = 0.3f;
  expect_error([&] { fold_scales(w13, a13); }, {"a13_scale[expert 2]", "expert 0"});
  a13.ptr<float>()[2] = 0.25f;
  Tensor a13gu(DType::kF32, Shape{3, 2});
  for (int i = 0; i < 6; ++i) a13gu.ptr<float>()[i] = 0.25f;
  a13gu.ptr<float>()[3] = 0.5f;
  expect_error([&] { fold_scales(w13, a13gu); }, {"a13_scale[expert 1, up]"});
  w13.ptr<float>()[3] = 9.0f;
  expect_error([&] { fold_scales(w13, a13); },
               {"w13_scale_2[expert 1, gate]", "w13_scale_2[expert 1, up]"});
}

TEST(WeightPrep, ErrorsNameTheArgument) {
  Tensor odd(DType::kF32, Shape{2, 5, 4});
  expect_error([&] { swap_gate_up(odd); }, {"t.shape[1]", "even", "5"});
  Tensor t(DType::kF32, Shape{1, 200, 4});
  expect_error([&] { interleave_linear_gate(t); }, {"group 64", "100"});
  expect_error([&] { pad_rows_cols(t, 100, 4); }, {"rows_to"});
  expect_error([&] { pad_gate_up_rows(t, 10); }, {"i_to"});
  expect_error([] { align_up(5, 0); }, {"alignment"});
  EXPECT_EQ(align_up(2880, 128), 2944);
  EXPECT_EQ(align_up(0, 64), 0);
}

}  // namespace
}  // namespace moekit
