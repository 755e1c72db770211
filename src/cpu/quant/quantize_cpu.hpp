// Internal: the CPU reference backend of the quantize op (normative, formats.md). Arguments are
// validated by the caller (src/quant/quantize_checks.hpp); all tensors are host, contiguous.
#pragma once

#include "moekit/quant/quantize.hpp"

namespace moekit::cpu {

void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              const TensorView& static_scale);
void dequantize(const QuantizedView& q, const TensorView& out);

// Scheme families (one file each).
void quantize_block_scaled(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                           const TensorView& static_scale);
void dequantize_block_scaled(const QuantizedView& q, const TensorView& out);
void quantize_fp8(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                  const TensorView& static_scale);
void dequantize_fp8(const QuantizedView& q, const TensorView& out);

}  // namespace moekit::cpu
