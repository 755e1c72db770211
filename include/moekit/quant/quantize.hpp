// The quantize op: quantize(x, config, backend) with shape inference, and its dequantize.
// Inputs are [M, K] or batched [B, M, K] in f32, f16 or bf16 (row-major, contiguous). "Per tensor"
// quantities are per matrix of the batch: shape [B] ([1] for a 2-D input).
#pragma once

#include <cstdint>

#include "moekit/core/tensor.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit {

// Output shapes and dtypes of quantize() without running it (what a graph compiler needs).
struct QuantShapes {
  DType value_dtype = DType::kBF16;
  Shape values;                     // [B?, M, K] (e4m3/bf16) or [B?, M, K/2] (e2m1x2)
  DType scale_dtype = DType::kF32;  // f32, e4m3 or e8m0
  Shape scales;  // rank 0 when the scheme has none (bf16, NVFP4's are block scales)
                 // swizzled block scales: [B?, Mp, Kp]; linear: [B?, M, Kb]
  bool has_global_scale = false;  // NVFP4*: fp32 encode scales
  Shape global_scale;             // [B] / [1] (NVFP4) or [B?, M] (NVFP4PerToken)
};
// x_shape: [M, K] or [B, M, K]. Validates K alignment (NVFP4: K % 16, MX: K % 32) and throws
// moekit::Error naming the argument otherwise.
QuantShapes infer_quant_shapes(const Shape& x_shape, const QuantConfig& config);

// Non-owning outputs of quantize (preallocated by the caller to infer_quant_shapes()).
struct QuantizedView {
  TensorView values;
  TensorView scales;        // absent for kBF16
  TensorView global_scale;  // NVFP4*: encode scales (gs = 2688 / amax); absent otherwise
  QuantConfig config;
};

// Quantizes x into out. `static_scale` (optional, fp32, one per matrix) fixes the per-tensor scale
// instead of computing it from amax: the ENCODE global scale gs for NVFP4 (copied to
// out.global_scale), the DECODE scale s for FP8 per-tensor; other schemes refuse it. Its values
// must be finite and > 0 (checked by the reference backend; the cuda one cannot read them without
// a sync). All tensors must live on the backend's device (host for kReference, CUDA for kCuda).
// The cuda backend is asynchronous on `stream` and never synchronizes or allocates (graph-capture
// safe). out.config is not read (the config argument rules); every output byte is written,
// padding of swizzled scales as 0.
// Computed scales (formats.md; moekit's choices where it is silent): NVFP4 gs = 2688/amax (1 when
// amax == 0); FP8 per-tensor s = amax/448 (1 when that is 0); per-token max(amax/448, 1/(448*512));
// FP8 1x128 / 128x128 s = max(amax, 1e-10)/448. amax ignores NaN. The arithmetic is the MOEKIT_HD
// code of moekit/quant/codecs.hpp, shared with the CUDA kernels.
void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              QuantBackend backend = QuantBackend::kReference, const TensorView& static_scale = {},
              StreamHandle stream = nullptr);

// Dequantizes into out (f32, the original [B?, M, K] shape).
void dequantize(const QuantizedView& q, const TensorView& out,
                QuantBackend backend = QuantBackend::kReference, StreamHandle stream = nullptr);

// Owning result (host), for tests, tools and weight preparation.
struct QuantizedTensor {
  Tensor values, scales, global_scale;
  QuantConfig config;
  QuantizedView view() const;
};
QuantizedTensor quantize(const TensorView& x, const QuantConfig& config,
                         const TensorView& static_scale = {});  // reference backend, host
Tensor dequantize(const QuantizedView& q);                      // reference backend, host f32

}  // namespace moekit
