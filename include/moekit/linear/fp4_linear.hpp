// Dense FP4 linear layer: y = x @ dequant(W)^T * alpha + bias.
// W: NVFP4 (e2m1 codes [N, K/2], e4m3 block scales [N, K/16] linear, alpha = 1/gs the decode global
// scale) or MXFP4 (e8m0 scales [N, K/32], alpha = 1). On SM90 it runs as W4A16: the 4-bit weights
// are dequantized to bf16 in registers (exact) and multiplied on bf16 tensor cores with fp32
// accumulation; activations stay bf16 (no activation quantization).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit::linear {

// Host reference (float64 accumulation, normative): x f32 [M, K] row-major; codes [N, K/2]
// e2m1x2; scales [N, K/sfv] linear; bias optional [N]; out f32 [M, N]. format: kNVFP4 or kMXFP4.
void fp4_linear_reference(QuantScheme format, std::int64_t m, std::int64_t n, std::int64_t k,
                          const float* x, const std::uint8_t* codes, const std::uint8_t* scales,
                          float alpha, const float* bias, float* out);

// Empty when the SM90 path can run (n, k) here; otherwise the reason (alignment, no CUDA build).
std::string fp4_linear_unsupported_reason(QuantScheme format, std::int64_t n, std::int64_t k);

// The weights in the SM90 kernels' layout (host, once): codes [N, K/2] and linear scales
// [N, K/sfv] in, the same byte counts out. Throws where fp4_linear_unsupported_reason says why.
void fp4_linear_prepare_weights(QuantScheme format, std::int64_t n, std::int64_t k,
                                const std::uint8_t* codes, const std::uint8_t* scales,
                                std::uint8_t* out_codes, std::uint8_t* out_scales);

// Bytes of the optional workspace of fp4_linear for m rows of K: with it, large m runs the wgmma
// kernel (x is first reordered into it); without it, the mma.sync kernels.
std::size_t fp4_linear_workspace_bytes(std::int64_t m, std::int64_t k);

struct Fp4LinearArgs {
  QuantScheme format = QuantScheme::kNVFP4;
  std::int64_t m = 0, n = 0, k = 0;  // n % 16 == 0, k % 64 == 0
  const void* x = nullptr;           // device bf16 [M, K], row stride ldx (0 = K)
  std::int64_t ldx = 0;
  const std::uint8_t* w = nullptr;         // device, prepared codes (N*K/2 bytes)
  const std::uint8_t* w_scales = nullptr;  // device, prepared scales (N*K/sfv bytes)
  const float* alpha = nullptr;            // optional device f32 [1] (NVFP4)
  const float* bias = nullptr;             // optional device f32 [N]
  void* out = nullptr;                     // device bf16 [M, N], row stride ldo (0 = N)
  std::int64_t ldo = 0;
  void* workspace = nullptr;  // optional device, fp4_linear_workspace_bytes(m, k) bytes
  std::size_t workspace_bytes = 0;
  StreamHandle stream = nullptr;
};
void fp4_linear(const Fp4LinearArgs& args);  // asynchronous; errors name the argument

}  // namespace moekit::linear
