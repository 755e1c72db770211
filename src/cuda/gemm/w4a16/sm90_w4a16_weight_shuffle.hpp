// Offline weight preparation of the SM90 W4A16 kernels (host, pure, invertible): the layout the
// decode / mma.sync / wgmma W4A16 kernels read (sm90_w4a16_weight_shuffle.cpp says how and why).
#pragma once

#include <cstdint>

#include "moekit/quant/scheme.hpp"

namespace moekit::gemm {

// format: QuantScheme::kNVFP4 (e4m3 scales per 16) or kMXFP4 (e8m0 per 32).
// codes:  [E, N, K/2] e2m1x2 (moekit convention: low nibble = even k), row-major.
// scales: [E, N, K/sfv] linear block scales.
// gated:  N = 2I in "halves" order; the kernel needs gate row i and up row i in one 16-row tile.
// Outputs have the same byte counts (E*N*K/2 and E*N*K/sfv). Requires N % 16 == 0, K % 64 == 0.
void w4a16_shuffle_weights(QuantScheme format, std::int64_t num_experts, std::int64_t n,
                           std::int64_t k, bool gated, const std::uint8_t* codes,
                           const std::uint8_t* scales, std::uint8_t* out_codes,
                           std::uint8_t* out_scales);
// The inverse (for tests and round trips).
void w4a16_unshuffle_weights(QuantScheme format, std::int64_t num_experts, std::int64_t n,
                             std::int64_t k, bool gated, const std::uint8_t* shuffled_codes,
                             const std::uint8_t* shuffled_scales, std::uint8_t* codes,
                             std::uint8_t* scales);

}  // namespace moekit::gemm
