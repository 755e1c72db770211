// MoeWeights::validate(): shapes, dtypes and scale shapes against the weight quant scheme;
// select_experts.
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

namespace {

// The rows experts[i] of t's leading dimension when it has num_experts of them, else a copy.
Tensor select_rows(const Tensor& t, int num_experts, const std::vector<int>& experts) {
  if (!t.defined()) return Tensor();
  const TensorView v = t.view();
  MOEKIT_CHECK_ARG(v.is_contiguous(), "weights", "contiguous tensors", v.str());
  if (v.rank() == 0 || v.size(0) != num_experts) {
    Tensor out(t.dtype(), t.shape(), t.device());
    copy(out.view(), v);
    return out;
  }
  Shape shape = t.shape();
  shape[0] = static_cast<std::int64_t>(experts.size());
  Tensor out(t.dtype(), shape, t.device());
  const std::size_t per = v.nbytes() / static_cast<std::size_t>(num_experts);
  Shape one = t.shape();
  one[0] = 1;
  for (std::size_t i = 0; i < experts.size(); ++i)
    copy(TensorView(static_cast<char*>(out.data()) + i * per, t.dtype(), one, t.device()),
         TensorView(static_cast<char*>(t.data()) + static_cast<std::size_t>(experts[i]) * per,
                    t.dtype(), one, t.device()));
  return out;
}

}  // namespace

MoeWeights select_experts(const MoeWeights& w, const std::vector<int>& experts) {
  MOEKIT_CHECK_ARG(!experts.empty(), "experts", "at least one expert id", "none");
  for (std::size_t i = 0; i < experts.size(); ++i)
    MOEKIT_CHECK_ARG(experts[i] >= 0 && experts[i] < w.num_experts,
                     "experts[" + std::to_string(i) + "]",
                     "an expert id in [0, " + std::to_string(w.num_experts) + ")", experts[i]);
  const int e = w.num_experts;
  MoeWeights out;
  out.num_experts = static_cast<int>(experts.size());
  out.hidden_size = w.hidden_size;
  out.intermediate_size = w.intermediate_size;
  out.quant = w.quant;
  out.gated = w.gated;
  auto select_q = [&](const QuantizedTensor& q) {
    QuantizedTensor r;
    r.config = q.config;
    r.values = select_rows(q.values, e, experts);
    r.scales = select_rows(q.scales, e, experts);
    r.global_scale = select_rows(q.global_scale, e, experts);
    return r;
  };
  out.w13 = select_q(w.w13);
  out.w2 = select_q(w.w2);
  out.w13_bias = select_rows(w.w13_bias, e, experts);
  out.w2_bias = select_rows(w.w2_bias, e, experts);
  out.a13_scale = select_rows(w.a13_scale, e, experts);
  out.a2_scale = select_rows(w.a2_scale, e, experts);
  return out;
}

}  // namespace moekit
