#include "quant/quantize_checks.hpp"

#include <string>

#include "moekit/core/error.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::quant_detail {

namespace {

// Lazily formatted checks: the message is only built on failure (these run on every call).
#define QUANT_CHECK(cond, argument, expected, actual)                                \
  do {                                                                               \
    if (!(cond)) ::moekit::throw_arg_error(where, (argument), (expected), (actual)); \
  } while (0)

std::string device_expectation(QuantBackend backend) {
  return backend == QuantBackend::kReference ? "a host tensor (backend reference)"
                                             : "a CUDA tensor (backend cuda)";
}

bool on_backend_device(const TensorView& t, QuantBackend backend) {
  return backend == QuantBackend::kReference ? t.device.is_host() : t.device.is_cuda();
}

// dtype, shape, contiguity and device of one tensor argument.
void check_tensor(const char* where, const std::string& name, const TensorView& t, DType dtype,
                  const Shape& shape, QuantBackend backend, const Device& device) {
  QUANT_CHECK(t.data != nullptr || shape.numel() == 0, name, "a tensor of shape " + shape.str(),
              "an absent tensor");
  QUANT_CHECK(t.dtype == dtype, name + ".dtype", dtype_name(dtype), dtype_name(t.dtype));
  QUANT_CHECK(t.shape == shape, name + ".shape", shape.str() + " (see infer_quant_shapes)",
              t.shape.str());
  QUANT_CHECK(t.is_contiguous(), name, "a contiguous tensor", "strides " + t.strides.str());
  QUANT_CHECK(on_backend_device(t, backend), name + ".device", device_expectation(backend),
              t.device.str());
  QUANT_CHECK(t.device == device, name + ".device", "the device of x (" + device.str() + ")",
              t.device.str());
}

}  // namespace

QuantShapes check_quantize_args(const TensorView& x, const QuantConfig& config,
                                const QuantizedView& out, const TensorView& static_scale,
                                QuantBackend backend) {
  const char* where = "quantize";
  QUANT_CHECK(x.data != nullptr || x.numel() == 0, "x", "a tensor", "an absent tensor");
  QUANT_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kF16 || x.dtype == DType::kBF16,
              "x.dtype", "f32, f16 or bf16", dtype_name(x.dtype));
  QUANT_CHECK(x.is_contiguous(), "x", "a contiguous tensor", "strides " + x.strides.str());
  QUANT_CHECK(on_backend_device(x, backend), "x.device", device_expectation(backend),
              x.device.str());
  const MatrixDims d = matrix_dims(x.shape, where, "x.shape");
  const QuantShapes shapes = infer_quant_shapes(x.shape, config);

  check_tensor(where, "out.values", out.values, shapes.value_dtype, shapes.values, backend,
               x.device);
  if (shapes.scales.rank() > 0) {
    check_tensor(where, "out.scales", out.scales, shapes.scale_dtype, shapes.scales, backend,
                 x.device);
  }
  if (shapes.has_global_scale) {
    check_tensor(where, "out.global_scale", out.global_scale, DType::kF32, shapes.global_scale,
                 backend, x.device);
  }

  if (static_scale.defined()) {
    const QuantScheme s = config.scheme;
    QUANT_CHECK(s == QuantScheme::kNVFP4 || s == QuantScheme::kFP8PerTensor, "static_scale",
                "absent (a static scale applies to nvfp4 and fp8_tensor only)",
                "a tensor for " + std::string(scheme_name(s)));
    check_tensor(where, "static_scale", static_scale, DType::kF32, Shape{d.batched ? d.batch : 1},
                 backend, x.device);
    if (static_scale.device.is_host()) {
      const float* v = static_scale.ptr<const float>();
      for (std::int64_t i = 0; i < static_scale.numel(); ++i) {
        QUANT_CHECK(f32_is_finite(v[i]) && v[i] > 0.0f, "static_scale[" + std::to_string(i) + "]",
                    "a finite value > 0", v[i]);
      }
    }
  }
  return shapes;
}

QuantShapes check_dequantize_args(const QuantizedView& q, const TensorView& out,
                                  QuantBackend backend) {
  const char* where = "dequantize";
  QUANT_CHECK(out.data != nullptr || out.numel() == 0, "out", "a tensor", "an absent tensor");
  QUANT_CHECK(out.dtype == DType::kF32, "out.dtype", "f32", dtype_name(out.dtype));
  QUANT_CHECK(out.is_contiguous(), "out", "a contiguous tensor", "strides " + out.strides.str());
  QUANT_CHECK(on_backend_device(out, backend), "out.device", device_expectation(backend),
              out.device.str());
  matrix_dims(out.shape, where, "out.shape");
  QuantShapes shapes;
  try {
    shapes = infer_quant_shapes(out.shape, q.config);
  } catch (const Error& e) {
    throw Error(std::string("dequantize: out.shape / q.config: ") + e.what());
  }
  check_tensor(where, "q.values", q.values, shapes.value_dtype, shapes.values, backend, out.device);
  if (shapes.scales.rank() > 0) {
    check_tensor(where, "q.scales", q.scales, shapes.scale_dtype, shapes.scales, backend,
                 out.device);
  }
  if (shapes.has_global_scale) {
    check_tensor(where, "q.global_scale", q.global_scale, DType::kF32, shapes.global_scale, backend,
                 out.device);
  }
  return shapes;
}

#undef QUANT_CHECK

}  // namespace moekit::quant_detail
