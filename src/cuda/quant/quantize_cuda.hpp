// Internal: the CUDA backend of the quantize op (called by src/quant/ for QuantBackend::kCuda).
// Byte-identical to the CPU reference; asynchronous on `stream`; no allocation, no host sync.
#pragma once

#include "moekit/quant/quantize.hpp"

namespace moekit::cuda {

void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              const TensorView& static_scale, StreamHandle stream);
void dequantize(const QuantizedView& q, const TensorView& out, StreamHandle stream);

}  // namespace moekit::cuda
