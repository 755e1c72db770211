// MoeWeights::validate(): shapes, dtypes and scale shapes against the weight quant scheme.
#include "moekit/moe/weights.hpp"

#include <string>

#include "moekit/core/error.hpp"

namespace moekit {

namespace {

bool supported_weight_scheme(QuantScheme s) {
  return s == QuantScheme::kBF16 || s == QuantScheme::kFP8PerTensor ||
         s == QuantScheme::kFP8Block128x128 || s == QuantScheme::kNVFP4 || s == QuantScheme::kMXFP4;
}

void check_tensor(const Tensor& t, const std::string& name, DType dtype, const Shape& shape,
                  Device device) {
  MOEKIT_CHECK_ARG(t.defined(), name, std::string(dtype_name(dtype)) + shape.str(), "absent");
  MOEKIT_CHECK_ARG(t.dtype() == dtype, name + " dtype", dtype_name(dtype), dtype_name(t.dtype()));
  MOEKIT_CHECK_ARG(t.shape() == shape, name + " shape", shape.str(), t.shape().str());
  MOEKIT_CHECK_ARG(t.device() == device, name + " device", device.str(), t.device().str());
}

// One quantized weight tensor [E, rows, cols] against infer_quant_shapes().
void check_quantized(const QuantizedTensor& q, const std::string& name, const QuantConfig& quant,
                     std::int64_t e, std::int64_t rows, std::int64_t cols, Device device) {
  MOEKIT_CHECK_ARG(q.config == quant, name + ".config", quant.str(), q.config.str());
  const QuantShapes s = infer_quant_shapes(Shape{e, rows, cols}, quant);
  check_tensor(q.values, name + ".values", s.value_dtype, s.values, device);
  if (s.scales.rank() > 0) {
    check_tensor(q.scales, name + ".scales", s.scale_dtype, s.scales, device);
  } else {
    MOEKIT_CHECK_ARG(!q.scales.defined(), name + ".scales", "absent for " + quant.str(),
                     q.scales.view().str());
  }
  if (s.has_global_scale) {
    check_tensor(q.global_scale, name + ".global_scale", DType::kF32, s.global_scale, device);
  } else {
    MOEKIT_CHECK_ARG(!q.global_scale.defined(), name + ".global_scale", "absent for " + quant.str(),
                     q.global_scale.view().str());
  }
}

}  // namespace

void MoeWeights::validate() const {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  MOEKIT_CHECK_ARG(hidden_size >= 1, "hidden_size", ">= 1", hidden_size);
  MOEKIT_CHECK_ARG(intermediate_size >= 1, "intermediate_size", ">= 1", intermediate_size);
  MOEKIT_CHECK_ARG(supported_weight_scheme(quant.scheme), "quant.scheme",
                   "one of bf16|fp8_tensor|fp8_block|nvfp4|mxfp4", scheme_name(quant.scheme));
  const Device dev = w13.values.device();
  const std::int64_t e = num_experts, h = hidden_size, i = intermediate_size;
  check_quantized(w13, "w13", quant, e, w13_rows(), h, dev);
  check_quantized(w2, "w2", quant, e, h, i, dev);
  if (w13_bias.defined())
    check_tensor(w13_bias, "w13_bias", DType::kF32, Shape{e, w13_rows()}, dev);
  if (w2_bias.defined()) check_tensor(w2_bias, "w2_bias", DType::kF32, Shape{e, h}, dev);
  if (a13_scale.defined()) check_tensor(a13_scale, "a13_scale", DType::kF32, Shape{e}, dev);
  if (a2_scale.defined()) check_tensor(a2_scale, "a2_scale", DType::kF32, Shape{e}, dev);
}

}  // namespace moekit
