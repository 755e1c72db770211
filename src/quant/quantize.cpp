// The public quantize / dequantize ops: validation, then the backend (CPU reference or CUDA).
#include "moekit/quant/quantize.hpp"

#include "cpu/quant/quantize_cpu.hpp"
#include "moekit/core/error.hpp"
#include "quant/quantize_checks.hpp"

#if MOEKIT_WITH_CUDA
#include "cuda/quant/quantize_cuda.hpp"
#endif

namespace moekit {

void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              QuantBackend backend, const TensorView& static_scale, StreamHandle stream) {
  quant_detail::check_quantize_args(x, config, out, static_scale, backend);
  if (backend == QuantBackend::kReference) {
    cpu::quantize(x, config, out, static_scale);
    return;
  }
#if MOEKIT_WITH_CUDA
  cuda::quantize(x, config, out, static_scale, stream);
#else
  (void)stream;
  throw_arg_error("quantize", "backend", "reference (moekit was built without CUDA)",
                  backend_name(backend));
#endif
}

void dequantize(const QuantizedView& q, const TensorView& out, QuantBackend backend,
                StreamHandle stream) {
  quant_detail::check_dequantize_args(q, out, backend);
  if (backend == QuantBackend::kReference) {
    cpu::dequantize(q, out);
    return;
  }
#if MOEKIT_WITH_CUDA
  cuda::dequantize(q, out, stream);
#else
  (void)stream;
  throw_arg_error("dequantize", "backend", "reference (moekit was built without CUDA)",
                  backend_name(backend));
#endif
}

QuantizedView QuantizedTensor::view() const {
  QuantizedView v;
  v.values = values.view();
  v.scales = scales.view();
  v.global_scale = global_scale.view();
  v.config = config;
  return v;
}

QuantizedTensor quantize(const TensorView& x, const QuantConfig& config,
                         const TensorView& static_scale) {
  const QuantShapes shapes = infer_quant_shapes(x.shape, config);
  QuantizedTensor q;
  q.config = config;
  q.values = Tensor(shapes.value_dtype, shapes.values);
  if (shapes.scales.rank() > 0) q.scales = Tensor(shapes.scale_dtype, shapes.scales);
  if (shapes.has_global_scale) q.global_scale = Tensor(DType::kF32, shapes.global_scale);
  quantize(x, config, q.view(), QuantBackend::kReference, static_scale);
  return q;
}

Tensor dequantize(const QuantizedView& q) {
  // The original [B?, M, K] shape: the values' shape, with K doubled for packed FP4.
  MOEKIT_CHECK_ARG(q.values.rank() == 2 || q.values.rank() == 3, "q.values.shape",
                   "[M, K'] or [B, M, K']", q.values.shape.str());
  Shape shape = q.values.shape;
  if (is_fp4(q.config.scheme)) shape[shape.rank() - 1] *= 2;
  Tensor out(DType::kF32, shape);
  dequantize(q, out.view(), QuantBackend::kReference);
  return out;
}

}  // namespace moekit
