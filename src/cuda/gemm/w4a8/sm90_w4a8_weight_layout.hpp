// Offline weight preparation of the SM90 W4A8 kernel (host, pure): MXFP4 weights converted
// exactly to e4m3 with a per-row power-of-two factor (sm90_w4a8_weight_layout.cpp says how and why;
// docs/formats.md section 9 the exactness argument).
#pragma once

#include <cstdint>
#include <string>

namespace moekit::gemm {

// codes:  [E, N, K/2] e2m1x2 (low nibble = even k), row-major; scales: [E, N, K/32] linear e8m0.
// gated:  N = 2I in "halves" order (gate rows [0, I), up rows [I, 2I)).
// Outputs: out_codes E*N*K/2 bytes, out_scales E*N*K/32 bytes (per-block e4m3 table offsets),
// out_row_scale f32 [E*N] (2^(ref - 127), in the kernel's row order). Requires N % 16 == 0 and
// K % 64 == 0. Returns "" when the conversion is exact; otherwise the reason, naming the first
// expert (numbered from first_expert: for callers that prepare a slice) and row whose nonzero
// blocks' scales cannot share one reference exponent (a span of more than 15 binades), or that
// holds the NaN scale 0xFF; the outputs are then unspecified.
std::string w4a8_prepare_weights(std::int64_t num_experts, std::int64_t n, std::int64_t k,
                                 bool gated, const std::uint8_t* codes, const std::uint8_t* scales,
                                 std::uint8_t* out_codes, std::uint8_t* out_scales,
                                 float* out_row_scale, std::int64_t first_expert = 0);
// The inverse (tests, round trips): codes and the scales of every block that holds a nonzero code
// (an all-zero block gets scale 127, i.e. 2^0: its value is 0 whatever its scale was).
void w4a8_unprepare_weights(std::int64_t num_experts, std::int64_t n, std::int64_t k, bool gated,
                            const std::uint8_t* prepared_codes,
                            const std::uint8_t* prepared_scales, const float* row_scale,
                            std::uint8_t* codes, std::uint8_t* scales);

}  // namespace moekit::gemm
