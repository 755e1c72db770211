// infer_quant_shapes: the output shapes and dtypes of quantize() (formats.md section 6).
#include <string>

#include "moekit/core/error.hpp"
#include "moekit/quant/layout.hpp"
#include "moekit/quant/quantize.hpp"
#include "quant/quantize_checks.hpp"

namespace moekit {

namespace quant_detail {

MatrixDims matrix_dims(const Shape& shape, const char* where, const char* argument) {
  if (shape.rank() != 2 && shape.rank() != 3) {
    throw_arg_error(where, argument, "[M, K] or [B, M, K]", shape.str());
  }
  MatrixDims d;
  d.batched = shape.rank() == 3;
  d.batch = d.batched ? shape[0] : 1;
  d.rows = shape[shape.rank() - 2];
  d.cols = shape[shape.rank() - 1];
  return d;
}

}  // namespace quant_detail

namespace {

// [B?, a] / [B?, a, b] with the batch dimension kept only for batched inputs.
Shape batched_shape(const quant_detail::MatrixDims& d, std::initializer_list<std::int64_t> tail) {
  std::vector<std::int64_t> dims;
  if (d.batched) dims.push_back(d.batch);
  for (std::int64_t t : tail) dims.push_back(t);
  return Shape(dims);
}

}  // namespace

QuantShapes infer_quant_shapes(const Shape& x_shape, const QuantConfig& config) {
  const auto d = quant_detail::matrix_dims(x_shape);
  const QuantScheme s = config.scheme;
  const std::string sname(scheme_name(s));

  if (!has_block_scales(s)) {
    MOEKIT_CHECK_ARG(config.layout == ScaleLayout::kLinear, "config.layout",
                     "linear (" + sname + " has no block scales)", layout_name(config.layout));
  }
  if (!is_mx(s)) {
    MOEKIT_CHECK_ARG(config.rule == ScaleRule::kRceil, "config.rule",
                     "rceil (the rule applies to MX schemes only, not " + sname + ")",
                     rule_name(config.rule));
  }
  const int sfv = scale_block_size(s);
  if (has_block_scales(s)) {
    MOEKIT_CHECK_ARG(d.cols % sfv == 0, "x.shape[-1] (K)",
                     "a multiple of " + std::to_string(sfv) + " for " + sname, d.cols);
  }

  QuantShapes q;
  const std::int64_t per_matrix = d.batched ? d.batch : 1;
  switch (s) {
    case QuantScheme::kBF16:
      q.value_dtype = DType::kBF16;
      q.values = batched_shape(d, {d.rows, d.cols});
      q.scales = Shape{};
      break;
    case QuantScheme::kFP8PerTensor:
      q.value_dtype = DType::kE4M3;
      q.values = batched_shape(d, {d.rows, d.cols});
      q.scales = Shape{per_matrix};
      break;
    case QuantScheme::kFP8PerToken:
      q.value_dtype = DType::kE4M3;
      q.values = batched_shape(d, {d.rows, d.cols});
      q.scales = batched_shape(d, {d.rows});
      break;
    case QuantScheme::kFP8Block1x128:
      q.value_dtype = DType::kE4M3;
      q.values = batched_shape(d, {d.rows, d.cols});
      q.scales = batched_shape(d, {d.rows, (d.cols + 127) / 128});
      break;
    case QuantScheme::kFP8Block128x128:
      q.value_dtype = DType::kE4M3;
      q.values = batched_shape(d, {d.rows, d.cols});
      q.scales = batched_shape(d, {(d.rows + 127) / 128, (d.cols + 127) / 128});
      break;
    case QuantScheme::kMXFP8:
    case QuantScheme::kNVFP4:
    case QuantScheme::kNVFP4PerToken:
    case QuantScheme::kMXFP4: {
      const bool fp4 = is_fp4(s);
      q.value_dtype = fp4 ? DType::kE2M1x2 : DType::kE4M3;
      q.values = batched_shape(d, {d.rows, fp4 ? d.cols / 2 : d.cols});
      q.scale_dtype = is_mx(s) ? DType::kE8M0 : DType::kE4M3;
      const std::int64_t kb = d.cols / sfv;
      q.scales = batched_shape(
          d, {scale_padded_rows(config.layout, d.rows), scale_padded_cols(config.layout, kb)});
      if (s == QuantScheme::kNVFP4) {
        q.has_global_scale = true;
        q.global_scale = Shape{per_matrix};
      } else if (s == QuantScheme::kNVFP4PerToken) {
        q.has_global_scale = true;
        q.global_scale = batched_shape(d, {d.rows});
      }
      break;
    }
  }
  return q;
}

}  // namespace moekit
