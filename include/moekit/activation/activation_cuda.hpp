// CUDA activations, plain and fused with the quantization of GEMM2's input. Asynchronous on
// `stream`, no allocation, no host synchronization (CUDA-graph capture safe).
//
// Exactness. Each element is activation_scalar() of activation.hpp evaluated in float64 with the
// same operations in the same order (no contraction), rounded once to fp32. exp / erf / tanh are
// CUDA's float64 functions (max error 1-2 ulp of float64) where the reference uses the host libm's,
// so an fp32 result can differ from the reference by one ulp, only when the float64 value lies
// within a few float64 ulp of an fp32 rounding boundary (expected ~1e-8 of elements; bound: 1 fp32
// ulp). The quantization that follows is the shared codecs, bit-identical to the reference
// quantizer on identical pre-quantization values.
#pragma once

#include "moekit/activation/activation.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {

// in: [T, 2I] (gated) or [T, I], f32 or bf16 (bf16 widened exactly); out: [T, I] f32 or bf16.
void activation_cuda(const TensorView& in, const ActivationConfig& config, const TensorView& out,
                     StreamHandle stream = nullptr);

// Fused activation + quantize: out = quantize(activation(in), quant) without the [T, I]
// intermediate. quant.scheme: bf16, fp8_tensor, fp8_1x128, mxfp8, mxfp4 or nvfp4 (others throw).
// `out` is shaped as infer_quant_shapes({T, I}, quant). static_scale: optional fp32 [1] on the
// device (NVFP4 encode gs / FP8 per-tensor decode s); without it the per-tensor scale is computed
// by an amax pre-pass that evaluates the activation twice.
void activation_quantize_cuda(const TensorView& in, const ActivationConfig& config,
                              const QuantConfig& quant, const QuantizedView& out,
                              const TensorView& static_scale = {}, StreamHandle stream = nullptr);

}  // namespace moekit
