// Internal: argument validation of the quantize / dequantize ops, shared by every backend. The
// public dispatch (src/quant/quantize.cpp) calls these before handing over to a backend, so the
// backends can assume shapes, dtypes, contiguity and devices are right.
#pragma once

#include "moekit/quant/quantize.hpp"

namespace moekit::quant_detail {

// Number of matrices of a [M, K] (1) or [B, M, K] (B) shape, and its M / K.
struct MatrixDims {
  std::int64_t batch = 1, rows = 0, cols = 0;
  bool batched = false;
};
MatrixDims matrix_dims(const Shape& shape, const char* where = "infer_quant_shapes",
                       const char* argument = "x.shape");

// Throws moekit::Error (naming the argument) unless the op can run on `device` (host for the
// reference backend, a CUDA device for the cuda one). Returns the expected output shapes.
// check_static_values: also require every static scale to be finite and > 0 (reads the tensor,
// so only for host tensors).
QuantShapes check_quantize_args(const TensorView& x, const QuantConfig& config,
                                const QuantizedView& out, const TensorView& static_scale,
                                QuantBackend backend);
QuantShapes check_dequantize_args(const QuantizedView& q, const TensorView& out,
                                  QuantBackend backend);

}  // namespace moekit::quant_detail
