// The quantize op on the reference backend: hand-computed golden bytes, then a sweep over every
// scheme x layout x input dtype x M x Kb compared byte for byte with the independent model in
// quant_test_util.hpp (formats.md section 7), plus special values and dequantization.
#include "moekit/quant/quantize.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "moekit/quant/codecs.hpp"
#include "quant/quant_test_util.hpp"

namespace moekit {
namespace {

using quant_test::bits_of;
using quant_test::float_of;

std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const std::uint8_t*>(t.data());
  return {p, p + t.nbytes()};
}
std::vector<float> floats_of(const Tensor& t) {
  const auto* p = t.ptr<const float>();
  return {p, p + t.numel()};
}

Tensor f32_tensor(const std::vector<float>& v, Shape shape) {
  Tensor t(DType::kF32, shape);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

// The input in `dtype`, and (through `exact`) its exact fp32 values.
Tensor make_input(const std::vector<float>& v, Shape shape, DType dtype,
                  std::vector<float>* exact) {
  Tensor t(dtype, shape);
  exact->resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) {
      t.ptr<float>()[i] = v[i];
      (*exact)[i] = v[i];
    } else if (dtype == DType::kBF16) {
      t.ptr<std::uint16_t>()[i] = float_to_bf16(v[i]);
      (*exact)[i] = bf16_to_float(t.ptr<std::uint16_t>()[i]);
    } else {
      t.ptr<std::uint16_t>()[i] = float_to_f16(v[i]);
      (*exact)[i] = f16_to_float(t.ptr<std::uint16_t>()[i]);
    }
  }
  return t;
}

// ---- Hand-computed golden vectors -----------------------------------------------------------
TEST(QuantizeGolden, Nvfp4HandComputed) {
  // gs = 1 (static). Block 0: vmax = 6, SF = RN(6 * RN(1/6)) = 1 -> e4m3 0x38, out_scale = 1, so
  // the codes are e2m1 of the inputs: every tie point, -0 and a tiny negative. Block 1: all zero.
  // Block 2: vmax = 1e-4, SF ~ 1.7e-5 rounds to e4m3 0 -> out_scale = FLT_MAX: non-zero codes
  // saturate to +-6, -0 stays 0x8.
  std::vector<float> x = {0,    0.25f, 0.26f, 0.75f, -0.75f, 1.25f, 1.3f,  1.75f,
                          2.5f, 2.6f,  3.5f,  -5,    5.1f,   6,     -0.1f, -0.0f};
  x.resize(32, 0.0f);
  const std::vector<float> tiny = {1e-4f, -1e-4f, 0, -0.0f, 5e-5f, -5e-5f, 1e-5f, 0,
                                   0,     0,      0, 0,     0,     0,      0,     0};
  x.insert(x.end(), tiny.begin(), tiny.end());
  const Tensor in = f32_tensor(x, Shape{1, 48});
  const Tensor gs = f32_tensor({1.0f}, Shape{1});
  const QuantizedTensor q = quantize(in, {QuantScheme::kNVFP4, ScaleLayout::kLinear}, gs);
  EXPECT_EQ(bytes_of(q.values),
            (std::vector<std::uint8_t>{0x00, 0x21, 0x2A, 0x43, 0x54, 0xE6, 0x77, 0x88,  //
                                       0,    0,    0,    0,    0,    0,    0,    0,     //
                                       0xF7, 0x80, 0xF7, 0x07, 0,    0,    0,    0}));
  EXPECT_EQ(bytes_of(q.scales), (std::vector<std::uint8_t>{0x38, 0x00, 0x00}));
  EXPECT_EQ(floats_of(q.global_scale), std::vector<float>{1.0f});
  const std::vector<float> dq = floats_of(dequantize(q.view()));
  const std::vector<float> want0 = {0, 0, 0.5f, 1, -1, 1, 1.5f, 2, 2, 3, 4, -4, 6, 6, -0.0f, -0.0f};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bits_of(dq[i]), bits_of(want0[i])) << i;
  for (int i = 16; i < 48; ++i) EXPECT_EQ(std::fabs(dq[i]), 0.0f) << i;  // tiny-SF block -> 0
}

TEST(QuantizeGolden, Nvfp4ComputedGlobalScale) {
  // amax = 2688 -> gs = 1; amax = 0 -> gs = 1; 16 values with amax 1344 -> gs = 2.
  const Tensor a = f32_tensor(std::vector<float>(16, 2688.0f), Shape{1, 16});
  EXPECT_EQ(floats_of(quantize(a, {QuantScheme::kNVFP4}).global_scale), std::vector<float>{1.0f});
  const Tensor z = f32_tensor(std::vector<float>(32, 0.0f), Shape{2, 1, 16});
  const QuantizedTensor qz = quantize(z, {QuantScheme::kNVFP4});
  EXPECT_EQ(floats_of(qz.global_scale), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(bytes_of(qz.scales), std::vector<std::uint8_t>(2, 0));
  EXPECT_EQ(bytes_of(qz.values), std::vector<std::uint8_t>(16, 0));
  std::vector<float> v(32, 0.0f);
  v[3] = -1344.0f;  // row 0
  v[20] = 2688.0f;  // row 1
  const QuantizedTensor qt = quantize(f32_tensor(v, Shape{2, 16}), {QuantScheme::kNVFP4PerToken});
  EXPECT_EQ(floats_of(qt.global_scale), (std::vector<float>{2.0f, 1.0f}));
}

TEST(QuantizeGolden, Mxfp4HandComputed) {
  // Row 0: vmax 6 -> t = RN(6 * RN(1/6)) = 1 -> b = 127 (RCEIL) and 127 (FLOOR: floor(log2 6) = 2).
  // Row 1: vmax 6.5 -> RCEIL b = 128 (t > 1), codes of x/2; FLOOR b = 127, 6.5 saturates to 6.
  std::vector<float> x(64, 0.0f);
  const float r0[] = {6, -3, 0.75f, 0.25f, 5, -0.0f};
  const float r1[] = {6.5f, 3, -1.5f, 0.5f};
  std::copy(std::begin(r0), std::end(r0), x.begin());
  std::copy(std::begin(r1), std::end(r1), x.begin() + 32);
  const Tensor in = f32_tensor(x, Shape{2, 32});
  const QuantizedTensor rc =
      quantize(in, {QuantScheme::kMXFP4, ScaleLayout::kLinear, ScaleRule::kRceil});
  const QuantizedTensor fl =
      quantize(in, {QuantScheme::kMXFP4, ScaleLayout::kLinear, ScaleRule::kFloor});
  EXPECT_EQ(bytes_of(rc.scales), (std::vector<std::uint8_t>{127, 128}));
  EXPECT_EQ(bytes_of(fl.scales), (std::vector<std::uint8_t>{127, 127}));
  std::vector<std::uint8_t> row0(16, 0), rc1(16, 0), fl1(16, 0);
  row0[0] = 0xD7;  // 6 -> 0x7, -3 -> 0xD
  row0[1] = 0x02;  // 0.75 -> 1.0 (0x2), 0.25 -> 0
  row0[2] = 0x86;  // 5 -> 4 (0x6), -0 -> 0x8
  rc1[0] = 0x35;   // x/2: 6.5 -> 3.25 -> 3 (0x5), 3 -> 1.5 (0x3)
  rc1[1] = 0x0A;   // -1.5 -> -0.75 ties to -1 (0xA), 0.5 -> 0.25 ties to 0
  fl1[0] = 0x57;   // 6.5 -> 6 (0x7), 3 -> 0x5
  fl1[1] = 0x1B;   // -1.5 -> 0xB, 0.5 -> 0x1
  std::vector<std::uint8_t> want_rc = row0, want_fl = row0;
  want_rc.insert(want_rc.end(), rc1.begin(), rc1.end());
  want_fl.insert(want_fl.end(), fl1.begin(), fl1.end());
  EXPECT_EQ(bytes_of(rc.values), want_rc);
  EXPECT_EQ(bytes_of(fl.values), want_fl);
  const std::vector<float> d = floats_of(dequantize(rc.view()));
  EXPECT_EQ(d[32], 6.0f);
  EXPECT_EQ(d[33], 3.0f);
  EXPECT_EQ(d[34], -2.0f);
}

TEST(QuantizeGolden, Mxfp8AndFp8HandComputed) {
  // MXFP8, vmax 1: t = RN(1/448) in [2^-9, 2^-8] -> b = 119, out_scale 2^8: 1 -> 256 (0x78),
  // -0.5 -> -128 (0xF0), 2^-20 -> 2^-12 (below half the smallest subnormal: 0).
  std::vector<float> x(32, 0.0f);
  x[0] = 1;
  x[1] = -0.5f;
  x[2] = std::ldexp(1.0f, -20);
  const QuantizedTensor m = quantize(f32_tensor(x, Shape{1, 32}), {QuantScheme::kMXFP8});
  std::vector<std::uint8_t> want(32, 0);
  want[0] = 0x78;
  want[1] = 0xF0;
  EXPECT_EQ(bytes_of(m.values), want);
  EXPECT_EQ(bytes_of(m.scales), std::vector<std::uint8_t>{119});

  // FP8 per-tensor, amax 448 -> s = 1: codes are e4m3 of the inputs.
  const QuantizedTensor t = quantize(f32_tensor({448, -224, 1, 0, -0.0f, 0.1f}, Shape{2, 3}),
                                     {QuantScheme::kFP8PerTensor});
  EXPECT_EQ(bytes_of(t.values), (std::vector<std::uint8_t>{0x7E, 0xF6, 0x38, 0x00, 0x80, 0x1D}));
  EXPECT_EQ(floats_of(t.scales), std::vector<float>{1.0f});
  // Per-token: row 1 is all zero -> the floor 1/(448*512).
  const QuantizedTensor pt =
      quantize(f32_tensor({896, 1, 0, 0}, Shape{2, 2}), {QuantScheme::kFP8PerToken});
  EXPECT_EQ(floats_of(pt.scales), (std::vector<float>{2.0f, 1.0f / 229376.0f}));
  EXPECT_EQ(bytes_of(pt.values), (std::vector<std::uint8_t>{0x7E, 0x30, 0x00, 0x00}));
  // 1x128 with amax 0 -> s = 1e-10 / 448.
  const QuantizedTensor b = quantize(f32_tensor(std::vector<float>(128, 0.0f), Shape{1, 128}),
                                     {QuantScheme::kFP8Block1x128});
  EXPECT_EQ(floats_of(b.scales), std::vector<float>{1e-10f / 448.0f});
  // bf16: a conversion.
  const QuantizedTensor h =
      quantize(f32_tensor({1.00390625f, -2.0f}, Shape{1, 2}), {QuantScheme::kBF16});
  EXPECT_EQ(h.values.ptr<std::uint16_t>()[0], 0x3F80);
  EXPECT_EQ(h.values.ptr<std::uint16_t>()[1], 0xC000);
  EXPECT_FALSE(h.scales.defined());
}

// ---- Sweep against the independent model ----------------------------------------------------
struct SweepCase {
  QuantConfig config;
  DType dtype;
  std::int64_t batch, m, k;
  bool batched, static_scale;
};

std::string describe(const SweepCase& c) {
  return c.config.str() + " " + std::string(dtype_name(c.dtype)) + " B=" + std::to_string(c.batch) +
         (c.batched ? "" : "(2-D)") + " M=" + std::to_string(c.m) + " K=" + std::to_string(c.k) +
         (c.static_scale ? " static" : "");
}

// Random rows with varied magnitudes, and blocks of zeros, -0, tiny negatives and a tiny block
// beside large values (the tiny-SF case), plus exact tie points.
std::vector<float> sweep_data(std::mt19937_64& rng, std::int64_t n, std::int64_t k) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  std::vector<float> v(static_cast<std::size_t>(n));
  float row_scale = 1.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    if (i % k == 0) row_scale = std::ldexp(1.0f, pick(rng) - 6) * (1.0f + 0.1f * pick(rng));
    const std::int64_t blk = (i % k) / 16;
    switch ((i / k + blk) % 7) {
      case 0:
        v[i] = 0.0f;
        break;
      case 1:
        v[i] = pick(rng) < 8 ? -0.0f : -1e-30f;
        break;
      case 2:
        v[i] = normal(rng) * 1e-6f;
        break;
      case 3:
        v[i] = 0.25f * static_cast<float>(pick(rng) - 8) * row_scale;
        break;
      default:
        v[i] = normal(rng) * row_scale * (pick(rng) == 0 ? 1000.0f : 1.0f);
        break;
    }
  }
  return v;
}

void run_case(const SweepCase& c, std::mt19937_64& rng) {
  SCOPED_TRACE(describe(c));
  const Shape shape = c.batched ? Shape{c.batch, c.m, c.k} : Shape{c.m, c.k};
  std::vector<float> exact;
  const Tensor x = make_input(sweep_data(rng, c.batch * c.m * c.k, c.k), shape, c.dtype, &exact);
  std::vector<float> statics;
  Tensor static_t;
  if (c.static_scale) {
    for (std::int64_t b = 0; b < c.batch; ++b) statics.push_back(0.37f * static_cast<float>(b + 1));
    static_t = f32_tensor(statics, Shape{c.batch});
  }
  // Preallocated, poisoned outputs: every byte (padding included) must be written.
  const QuantShapes s = infer_quant_shapes(shape, c.config);
  Tensor values(s.value_dtype, s.values), scales, gscale;
  std::memset(values.data(), 0xAB, values.nbytes());
  if (s.scales.rank() > 0) {
    scales = Tensor(s.scale_dtype, s.scales);
    std::memset(scales.data(), 0xAB, scales.nbytes());
  }
  if (s.has_global_scale) {
    gscale = Tensor(DType::kF32, s.global_scale);
    std::memset(gscale.data(), 0xAB, gscale.nbytes());
  }
  const QuantizedView out{values.view(), scales.view(), gscale.view(), c.config};
  quantize(x, c.config, out, QuantBackend::kReference, static_t.view());

  const quant_test::RefQuantized ref =
      quant_test::ref_quantize(exact, c.batch, c.m, c.k, c.config, statics);
  if (c.config.scheme == QuantScheme::kBF16) {
    for (std::size_t i = 0; i < exact.size(); ++i) {
      ASSERT_EQ(values.ptr<std::uint16_t>()[i], float_to_bf16(exact[i])) << i;
    }
    return;
  }
  EXPECT_EQ(bytes_of(values), ref.values);
  if (has_block_scales(c.config.scheme)) {
    const std::int64_t kb = c.k / scale_block_size(c.config.scheme);
    EXPECT_EQ(bytes_of(scales),
              quant_test::ref_layout(ref.block_scales, c.batch, c.m, kb, c.config.layout));
  } else {
    EXPECT_EQ(floats_of(scales), ref.f32_scales);
  }
  if (s.has_global_scale) {
    EXPECT_EQ(floats_of(gscale), ref.global_scale);
  }

  // Dequantization, bitwise against the spec formulas written out here.
  const Tensor dq =
      dequantize(QuantizedView{values.view(), scales.view(), gscale.view(), c.config});
  const float* d = dq.ptr<const float>();
  const std::int64_t sfv = scale_block_size(c.config.scheme);
  for (std::int64_t i = 0; i < c.batch * c.m * c.k; ++i) {
    const std::int64_t b = i / (c.m * c.k), r = (i / c.k) % c.m, kk = i % c.k;
    float want;
    if (is_fp4(c.config.scheme)) {
      const std::uint8_t code = (ref.values[i / 2] >> ((i % 2) * 4)) & 0xF;
      const std::uint8_t sf = ref.block_scales[(b * c.m + r) * (c.k / sfv) + kk / sfv];
      const float v = static_cast<float>(quant_test::ref_e2m1_value(code));
      if (c.config.scheme == QuantScheme::kMXFP4) {
        want = v * static_cast<float>(std::ldexp(1.0, sf - 127));
      } else {
        const float gs = ref.global_scale[c.config.scheme == QuantScheme::kNVFP4 ? b : b * c.m + r];
        want = v * static_cast<float>(quant_test::ref_e4m3_value(sf)) / gs;
      }
    } else {
      const float v = static_cast<float>(quant_test::ref_e4m3_value(ref.values[i]));
      float scale;
      const std::int64_t g = (c.k + 127) / 128;
      switch (c.config.scheme) {
        case QuantScheme::kMXFP8:
          scale = static_cast<float>(
              std::ldexp(1.0, ref.block_scales[(b * c.m + r) * (c.k / 32) + kk / 32] - 127));
          break;
        case QuantScheme::kFP8PerTensor:
          scale = ref.f32_scales[b];
          break;
        case QuantScheme::kFP8PerToken:
          scale = ref.f32_scales[b * c.m + r];
          break;
        case QuantScheme::kFP8Block1x128:
          scale = ref.f32_scales[(b * c.m + r) * g + kk / 128];
          break;
        default:
          scale = ref.f32_scales[(b * ((c.m + 127) / 128) + r / 128) * g + kk / 128];
          break;
      }
      want = v * scale;
    }
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(d[i])) << i;
    } else {
      ASSERT_EQ(bits_of(d[i]), bits_of(want)) << "element " << i;
    }
  }
}

class QuantizeSweep : public ::testing::TestWithParam<QuantScheme> {};

TEST_P(QuantizeSweep, MatchesIndependentModel) {
  const std::uint64_t seed = quant_test::test_seed();
  QUANT_TEST_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  int cases = 0;
  const QuantScheme scheme = GetParam();
  {
    const bool block = has_block_scales(scheme);
    for (ScaleLayout layout :
         {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
      if (!block && layout != ScaleLayout::kLinear) continue;
      for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
        if (!is_mx(scheme) && rule != ScaleRule::kRceil) continue;
        // Every (M, K) pair once; the input dtype rotates so each layout sees all three.
        int pair = 0;
        for (std::int64_t m : {1, 3, 127, 128, 129}) {
          const int sfv = block                          ? scale_block_size(scheme)
                          : scheme == QuantScheme::kBF16 ? 16
                                                         : 128;
          std::vector<std::int64_t> ks = {3 * sfv, 4 * sfv, 5 * sfv};
          if (scheme == QuantScheme::kFP8Block128x128 || scheme == QuantScheme::kFP8Block1x128) {
            ks = {200, 384};  // a partial last group, and whole ones
          }
          for (std::int64_t k : ks) {
            const DType dtype = std::array{DType::kF32, DType::kBF16, DType::kF16}[pair++ % 3];
            for (bool batched : {false, true}) {
              const bool can_static =
                  scheme == QuantScheme::kNVFP4 || scheme == QuantScheme::kFP8PerTensor;
              for (bool st : {false, true}) {
                if (st && !can_static) continue;
                SweepCase c{{scheme, layout, rule}, dtype, batched ? 2 : 1, m, k, batched, st};
                run_case(c, rng);
                ++cases;
                if (HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
  RecordProperty("cases", cases);
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, QuantizeSweep,
                         ::testing::Values(QuantScheme::kNVFP4, QuantScheme::kNVFP4PerToken,
                                           QuantScheme::kMXFP4, QuantScheme::kMXFP8,
                                           QuantScheme::kFP8PerTensor, QuantScheme::kFP8PerToken,
                                           QuantScheme::kFP8Block1x128,
                                           QuantScheme::kFP8Block128x128, QuantScheme::kBF16),
                         [](const auto& info) { return std::string(scheme_name(info.param)); });

// NaN, +-Inf and huge values: deterministic bytes for every scheme, equal to the model's.
TEST(QuantizeSpecial, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(4 * 128, 0.5f);
  const float specials[] = {inf, -inf, nan, -nan, 3e38f, -3e38f, 1e-40f, -1e-45f};
  for (int i = 0; i < 8; ++i) v[i * 37 % v.size()] = specials[i];
  for (int i = 0; i < 128; ++i) v[128 + i] = static_cast<float>(i % 2 ? -i : i);  // finite row
  for (QuantScheme scheme :
       {QuantScheme::kNVFP4, QuantScheme::kNVFP4PerToken, QuantScheme::kMXFP4, QuantScheme::kMXFP8,
        QuantScheme::kFP8PerTensor, QuantScheme::kFP8PerToken, QuantScheme::kFP8Block1x128,
        QuantScheme::kFP8Block128x128}) {
    for (ScaleRule rule : {ScaleRule::kRceil, ScaleRule::kFloor}) {
      if (!is_mx(scheme) && rule != ScaleRule::kRceil) continue;
      const QuantConfig cfg{scheme, ScaleLayout::kLinear, rule};
      SCOPED_TRACE(cfg.str());
      const QuantizedTensor q = quantize(f32_tensor(v, Shape{4, 128}), cfg);
      const auto ref = quant_test::ref_quantize(v, 1, 4, 128, cfg);
      EXPECT_EQ(bytes_of(q.values), ref.values);
      if (has_block_scales(scheme)) {
        EXPECT_EQ(bytes_of(q.scales), ref.block_scales);
      } else {
        const auto got = floats_of(q.scales);
        ASSERT_EQ(got.size(), ref.f32_scales.size());
        for (std::size_t i = 0; i < got.size(); ++i)
          EXPECT_EQ(bits_of(got[i]), bits_of(ref.f32_scales[i]));
      }
      if (q.global_scale.defined()) {
        const auto got = floats_of(q.global_scale);
        for (std::size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(bits_of(got[i]), bits_of(ref.global_scale[i]));
        }
      }
      (void)dequantize(q.view());  // must not crash
    }
  }
}

// Empty inputs (M = 0) are valid and produce empty outputs.
TEST(QuantizeSpecial, EmptyRows) {
  for (QuantScheme scheme : {QuantScheme::kNVFP4, QuantScheme::kMXFP4, QuantScheme::kFP8PerTensor,
                             QuantScheme::kFP8Block128x128, QuantScheme::kBF16}) {
    const Tensor x(DType::kBF16, Shape{0, 64});
    const QuantizedTensor q = quantize(x, {scheme});
    EXPECT_EQ(q.values.numel(), 0);
    EXPECT_EQ(dequantize(q.view()).shape(), (Shape{0, 64}));
  }
}

// ---- Error bounds of quantize -> dequantize (random normal data, fresh seed) --------------
TEST(QuantizeRoundTrip, RelativeErrorBounds) {
  const std::uint64_t seed = quant_test::test_seed() + 1;
  QUANT_TEST_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t m = 64, k = 512;
  std::vector<float> x(static_cast<std::size_t>(m * k));
  for (float& f : x) f = normal(rng);
  // Expected ||x - x_hat|| / ||x|| for Gaussian data (measured ~0.09 fp4, ~0.025 fp8, ~0.002
  // bf16); the bounds leave ~30% margin.
  const struct {
    QuantScheme scheme;
    double bound;
  } cases[] = {{QuantScheme::kNVFP4, 0.12},         {QuantScheme::kNVFP4PerToken, 0.12},
               {QuantScheme::kMXFP4, 0.16},         {QuantScheme::kMXFP8, 0.04},
               {QuantScheme::kFP8PerTensor, 0.04},  {QuantScheme::kFP8PerToken, 0.04},
               {QuantScheme::kFP8Block1x128, 0.04}, {QuantScheme::kFP8Block128x128, 0.04},
               {QuantScheme::kBF16, 0.003}};
  for (const auto& c : cases) {
    const QuantizedTensor q = quantize(f32_tensor(x, Shape{m, k}), {c.scheme});
    const Tensor d = dequantize(q.view());
    double num = 0, den = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double e = double(d.ptr<float>()[i]) - x[i];
      num += e * e;
      den += double(x[i]) * x[i];
    }
    const double rel = std::sqrt(num / den);
    EXPECT_LT(rel, c.bound) << scheme_name(c.scheme);
    EXPECT_GT(rel, 0.0) << scheme_name(c.scheme);
    RecordProperty(std::string(scheme_name(c.scheme)) + "_rel_err", std::to_string(rel));
  }
}

}  // namespace
}  // namespace moekit
