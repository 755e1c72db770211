// Dense FP4 linear layer (E = 1 of the W4A16 machinery): y = x @ dequant(W)^T * alpha + bias.
// W: NVFP4 (e2m1 codes [N, K/2], e4m3 block scales [N, K/16] linear, alpha = 1/gs the decode global
// scale) or MXFP4 (e8m0 scales [N, K/32], alpha = 1). On SM90 it runs as W4A16: the 4-bit weights
// are dequantized to bf16 in registers (exact) and multiplied on bf16 tensor cores with fp32
// accumulation; activations stay bf16 (no activation quantization).
#pragma once

#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::linear {

using gemm::W4Format;

// Host reference (float64 accumulation, normative): x f32 [M, K] row-major; codes [N, K/2]
// e2m1x2; scales [N, K/sfv] linear; bias optional [N]; out f32 [M, N].
void fp4_linear_reference(W4Format format, std::int64_t m, std::int64_t n, std::int64_t k,
                          const float* x, const std::uint8_t* codes, const std::uint8_t* scales,
                          float alpha, const float* bias, float* out);

// Empty when the SM90 path can run (n, k) here; otherwise the reason (alignment, no CUDA build).
std::string fp4_linear_unsupported_reason(W4Format format, std::int64_t n, std::int64_t k);

// SM90 W4A16. Weights prepared once with gemm::w4a16_shuffle_weights(format, 1, n, k, false, ...).
struct Fp4LinearArgs {
  W4Format format = W4Format::kNVFP4;
  std::int64_t m = 0, n = 0, k = 0;  // n % 16 == 0, k % 64 == 0
  const void* x = nullptr;           // device bf16 [M, K], row stride ldx (0 = K)
  std::int64_t ldx = 0;
  // kWgmma: x in the wgmma K order (gemm::w4a16_to_wgmma_k_order), which runs the wgmma tile
  // (gemm::w4a16_prefers_wgmma(m, 1): m > 48); kNatural runs the mma.sync tiles.
  gemm::W4KOrder x_order = gemm::W4KOrder::kNatural;
  const std::uint8_t* w = nullptr;         // device, shuffled codes (N*K/2 bytes)
  const std::uint8_t* w_scales = nullptr;  // device, shuffled scales (N*K/sfv bytes)
  const float* alpha = nullptr;            // optional device f32 [1]
  const float* bias = nullptr;             // optional device f32 [N]
  void* out = nullptr;                     // device bf16 [M, N], row stride ldo (0 = N)
  std::int64_t ldo = 0;
  StreamHandle stream = nullptr;
};
void fp4_linear(const Fp4LinearArgs& args);  // asynchronous; validates like w4a16_grouped_gemm

}  // namespace moekit::linear
