// Scheme / layout / rule names, QuantConfig strings, and infer_quant_shapes.
#include <gtest/gtest.h>

#include "moekit/quant/quantize.hpp"
#include "quant/quant_test_util.hpp"

namespace moekit {
namespace {

const QuantScheme kSchemes[] = {
    QuantScheme::kBF16,          QuantScheme::kFP8PerTensor,    QuantScheme::kFP8PerToken,
    QuantScheme::kFP8Block1x128, QuantScheme::kFP8Block128x128, QuantScheme::kMXFP8,
    QuantScheme::kNVFP4,         QuantScheme::kNVFP4PerToken,   QuantScheme::kMXFP4};

TEST(Scheme, NamesRoundTrip) {
  const char* names[] = {"bf16",  "fp8_tensor", "fp8_token",   "fp8_1x128", "fp8_block",
                         "mxfp8", "nvfp4",      "nvfp4_token", "mxfp4"};
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(scheme_name(kSchemes[i]), names[i]);
    EXPECT_EQ(parse_scheme(names[i]), kSchemes[i]);
  }
  for (ScaleLayout l :
       {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
    EXPECT_EQ(parse_layout(layout_name(l)), l);
  }
  EXPECT_EQ(layout_name(ScaleLayout::kSwizzled128x4), "swizzled_128x4");
  EXPECT_EQ(parse_rule("floor"), ScaleRule::kFloor);
  EXPECT_EQ(rule_name(ScaleRule::kRceil), "rceil");
  EXPECT_EQ(parse_quant_backend("cuda"), QuantBackend::kCuda);
  EXPECT_EQ(backend_name(QuantBackend::kReference), "reference");
}

TEST(Scheme, ParseErrorsListValidNames) {
  quant_test::expect_error([] { parse_scheme("nvfp5"); },
                           {"scheme", "nvfp4|nvfp4_token", "'nvfp5'"});
  quant_test::expect_error([] { parse_layout("swizzled"); },
                           {"layout", "swizzled_128x4", "'swizzled'"});
  quant_test::expect_error([] { parse_rule("round"); }, {"rule", "rceil|floor", "'round'"});
  quant_test::expect_error([] { parse_quant_backend("gpu"); },
                           {"backend", "reference|cuda", "'gpu'"});
}

TEST(Scheme, Properties) {
  for (QuantScheme s : kSchemes) {
    SCOPED_TRACE(std::string(scheme_name(s)));
    const bool nv = s == QuantScheme::kNVFP4 || s == QuantScheme::kNVFP4PerToken;
    const bool mx = s == QuantScheme::kMXFP4 || s == QuantScheme::kMXFP8;
    const bool fp8blk = s == QuantScheme::kFP8Block1x128 || s == QuantScheme::kFP8Block128x128;
    EXPECT_EQ(scale_block_size(s), nv ? 16 : mx ? 32 : fp8blk ? 128 : 0);
    EXPECT_EQ(is_fp4(s), nv || s == QuantScheme::kMXFP4);
    EXPECT_EQ(has_block_scales(s), nv || mx);
    EXPECT_EQ(is_mx(s), mx);
  }
}

TEST(Scheme, ConfigStringRoundTrip) {
  EXPECT_EQ((QuantConfig{QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4}).str(),
            "nvfp4/swizzled_128x4");
  EXPECT_EQ((QuantConfig{QuantScheme::kMXFP4, ScaleLayout::kLinear, ScaleRule::kFloor}).str(),
            "mxfp4/linear/floor");
  EXPECT_EQ((QuantConfig{QuantScheme::kFP8Block1x128}).str(), "fp8_1x128");
  for (QuantScheme s : kSchemes) {
    for (ScaleLayout l :
         {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4, ScaleLayout::kSwizzled8x4}) {
      for (ScaleRule r : {ScaleRule::kRceil, ScaleRule::kFloor}) {
        if ((!has_block_scales(s) && l != ScaleLayout::kLinear) ||
            (!is_mx(s) && r != ScaleRule::kRceil)) {
          continue;
        }
        const QuantConfig c{s, l, r};
        EXPECT_EQ(parse_quant_config(c.str()), c) << c.str();
      }
    }
  }
  EXPECT_EQ(parse_quant_config("mxfp8/floor"),
            (QuantConfig{QuantScheme::kMXFP8, ScaleLayout::kLinear, ScaleRule::kFloor}));
  quant_test::expect_error([] { parse_quant_config("fp8_tensor/swizzled_128x4"); },
                           {"config", "nothing after the scheme", "'swizzled_128x4'"});
  quant_test::expect_error([] { parse_quant_config("nvfp4/floor"); },
                           {"config", "swizzled_128x4", "'floor'"});
  quant_test::expect_error([] { parse_quant_config("int4"); }, {"scheme", "'int4'"});
}

struct ShapeCase {
  QuantConfig config;
  Shape x;
  DType value_dtype;
  Shape values;
  DType scale_dtype;
  Shape scales;
  bool has_global;
  Shape global;
};

TEST(QuantShapes, AllSchemes) {
  using S = QuantScheme;
  using L = ScaleLayout;
  const ShapeCase cases[] = {
      {{S::kBF16}, Shape{3, 64}, DType::kBF16, Shape{3, 64}, DType::kF32, Shape{}, false, Shape{}},
      {{S::kFP8PerTensor},
       Shape{3, 64},
       DType::kE4M3,
       Shape{3, 64},
       DType::kF32,
       Shape{1},
       false,
       Shape{}},
      {{S::kFP8PerTensor},
       Shape{2, 3, 64},
       DType::kE4M3,
       Shape{2, 3, 64},
       DType::kF32,
       Shape{2},
       false,
       Shape{}},
      {{S::kFP8PerToken},
       Shape{2, 3, 64},
       DType::kE4M3,
       Shape{2, 3, 64},
       DType::kF32,
       Shape{2, 3},
       false,
       Shape{}},
      {{S::kFP8Block1x128},
       Shape{3, 200},
       DType::kE4M3,
       Shape{3, 200},
       DType::kF32,
       Shape{3, 2},
       false,
       Shape{}},
      {{S::kFP8Block128x128},
       Shape{4, 129, 257},
       DType::kE4M3,
       Shape{4, 129, 257},
       DType::kF32,
       Shape{4, 2, 3},
       false,
       Shape{}},
      {{S::kMXFP8},
       Shape{3, 96},
       DType::kE4M3,
       Shape{3, 96},
       DType::kE8M0,
       Shape{3, 3},
       false,
       Shape{}},
      {{S::kMXFP8, L::kSwizzled128x4},
       Shape{3, 96},
       DType::kE4M3,
       Shape{3, 96},
       DType::kE8M0,
       Shape{128, 4},
       false,
       Shape{}},
      {{S::kNVFP4},
       Shape{129, 80},
       DType::kE2M1x2,
       Shape{129, 40},
       DType::kE4M3,
       Shape{129, 5},
       true,
       Shape{1}},
      {{S::kNVFP4, L::kSwizzled128x4},
       Shape{2, 129, 80},
       DType::kE2M1x2,
       Shape{2, 129, 40},
       DType::kE4M3,
       Shape{2, 256, 8},
       true,
       Shape{2}},
      {{S::kNVFP4, L::kSwizzled8x4},
       Shape{9, 48},
       DType::kE2M1x2,
       Shape{9, 24},
       DType::kE4M3,
       Shape{16, 4},
       true,
       Shape{1}},
      {{S::kNVFP4PerToken},
       Shape{2, 5, 32},
       DType::kE2M1x2,
       Shape{2, 5, 16},
       DType::kE4M3,
       Shape{2, 5, 2},
       true,
       Shape{2, 5}},
      {{S::kNVFP4PerToken},
       Shape{5, 32},
       DType::kE2M1x2,
       Shape{5, 16},
       DType::kE4M3,
       Shape{5, 2},
       true,
       Shape{5}},
      {{S::kMXFP4, L::kSwizzled128x4},
       Shape{0, 128},
       DType::kE2M1x2,
       Shape{0, 64},
       DType::kE8M0,
       Shape{0, 4},
       false,
       Shape{}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config.str() + " " + c.x.str());
    const QuantShapes q = infer_quant_shapes(c.x, c.config);
    EXPECT_EQ(q.value_dtype, c.value_dtype);
    EXPECT_EQ(q.values, c.values) << q.values.str();
    EXPECT_EQ(q.scales, c.scales) << q.scales.str();
    if (c.scales.rank() > 0) {
      EXPECT_EQ(q.scale_dtype, c.scale_dtype);
    }
    EXPECT_EQ(q.has_global_scale, c.has_global);
    EXPECT_EQ(q.global_scale, c.global) << q.global_scale.str();
  }
}

TEST(QuantShapes, Validation) {
  quant_test::expect_error(
      [] {
        infer_quant_shapes(Shape{4, 24}, {QuantScheme::kNVFP4});
      },
      {"infer_quant_shapes", "K", "multiple of 16", "nvfp4", "24"});
  quant_test::expect_error(
      [] {
        infer_quant_shapes(Shape{4, 48}, {QuantScheme::kMXFP4});
      },
      {"K", "multiple of 32", "mxfp4", "48"});
  quant_test::expect_error(
      [] {
        infer_quant_shapes(Shape{2, 4, 16}, {QuantScheme::kMXFP8});
      },
      {"K", "multiple of 32", "mxfp8", "16"});
  quant_test::expect_error([] { infer_quant_shapes(Shape{64}, {QuantScheme::kBF16}); },
                           {"x.shape", "[M, K] or [B, M, K]", "[64]"});
  quant_test::expect_error(
      [] {
        infer_quant_shapes(Shape{1, 2, 3, 64}, {QuantScheme::kBF16});
      },
      {"x.shape", "[1, 2, 3, 64]"});
  quant_test::expect_error(
      [] {
        infer_quant_shapes(Shape{4, 128}, {QuantScheme::kFP8PerToken, ScaleLayout::kSwizzled128x4});
      },
      {"config.layout", "linear", "fp8_token", "swizzled_128x4"});
  quant_test::expect_error(
      [] {
        infer_quant_shapes(Shape{4, 128},
                           {QuantScheme::kNVFP4, ScaleLayout::kLinear, ScaleRule::kFloor});
      },
      {"config.rule", "rceil", "nvfp4", "floor"});
}

}  // namespace
}  // namespace moekit
