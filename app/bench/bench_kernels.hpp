// Internal device helpers of `moekit bench`: random data, on-device weight / activation
// quantization (DeepSeek-V3 block FP8), an L2 flush. Asynchronous on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moekit/core/tensor.hpp"

namespace moekit::bench {

// Uniform in [-scale, scale), from a counter hash of (seed, index): reproducible, never zeros.
void fill_random_bf16(void* data, std::size_t count, std::uint64_t seed, float scale,
                      StreamHandle stream);
// Random finite e4m3 bytes of magnitude <= 1.875 (for the cuBLASLt fp8 ceiling).
void fill_random_e4m3(void* data, std::size_t count, std::uint64_t seed, StreamHandle stream);
void fill_random_f32(float* data, std::size_t count, std::uint64_t seed, float lo, float hi,
                     StreamHandle stream);

// bf16 [E, N, K] -> e4m3 [E, N, K] + f32 scales [E, ceil(N/128), K/128] (s = max(amax,1e-10)/448
// per 128x128 tile). K % 128 == 0.
void quantize_weight_fp8_block(const void* w, std::int64_t experts, std::int64_t n,
                               std::int64_t k, void* q, float* scales, StreamHandle stream);

// Reads `bytes` of `buffer` (>= 2x L2) so the next kernel finds weights in HBM, not L2.
void flush_l2(const void* buffer, std::size_t bytes, int* sink, StreamHandle stream);

// ||a - b|| / ||b|| over `count` bf16 values (device reduction; synchronizes the stream).
double rel_l2_bf16(const void* a, const void* b, std::size_t count, StreamHandle stream);

}  // namespace moekit::bench
