// Internal: views of one expert's matrix inside batched quantized weights, and its dequantization.
#pragma once

#include <cstdint>

#include "moekit/quant/quantize.hpp"

namespace moekit::cpu {

// The [rows, K] matrix of expert e of a batched [E, rows, K] QuantizedTensor: values, scales and
// global scale sliced along the leading (expert) dimension; per-tensor quantities become [1].
QuantizedView expert_slice(const QuantizedTensor& q, int expert);

// Dequantizes expert e's matrix into out[rows * K] (f32) with the reference dequantize.
void dequantize_expert(const QuantizedTensor& q, int expert, float* out);

}  // namespace moekit::cpu
