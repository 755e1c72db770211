// Internal: the CUDA backend of the quantize op (called by src/quant/ for QuantBackend::kCuda).
// Byte-identical to the CPU reference; asynchronous on `stream`; no allocation, no host sync.
#pragma once

#include "moekit/quant/quantize.hpp"

namespace moekit::cuda {

void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              const TensorView& static_scale, StreamHandle stream);
void dequantize(const QuantizedView& q, const TensorView& out, StreamHandle stream);

// Which kernel quantizes NVFP4 / NVFP4 per-token / MXFP4 inputs of bf16 / f16 (K <= 8192): the
// FP4 row-group kernel (quantize_fp4_rows.cuh), the chunk / row kernels (quantize_kernels.cuh), or
// by size (kAuto, the default). Both give the same bytes. Process-wide; the environment variable
// MOEKIT_QUANT_FP4_KERNEL=auto|rows|chunks sets the initial value (benchmarks); tests set it to
// check both kernels. The row-group kernel's group width follows K (tuning/sm90_tuning.hpp).
enum class Fp4QuantizeKernel { kAuto, kRows, kChunks };
void set_fp4_quantize_kernel(Fp4QuantizeKernel kernel);

}  // namespace moekit::cuda
