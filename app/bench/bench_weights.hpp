// Internal: the expert weights `moekit bench` runs, per weight scheme, all made on the device from
// one set of random bf16 master weights so the baseline and every scheme compute nearly the same
// function:
//   bf16       the masters, uniform in +-sqrt(3/K) (variance 1/K: activations stay O(1))
//   fp8_block  their 128x128 block quantization (e4m3 + f32 tile scales)
//   nvfp4      their NVFP4 quantization with the CUDA quantize op: e2m1x2 values, e4m3 scales per
//              16 (LINEAR layout), one f32 encode (global) scale per expert (batched [E, N, K])
//   mxfp4      their MXFP4 quantization: e2m1x2 values, e8m0 scales per 32 (LINEAR, RCEIL)
// Biases (f32, uniform in +-0.1) are attached to every scheme when the layer has them (gpt-oss);
// the bf16 / fp8 experts refuse biases, the W4A16 experts use them.
#pragma once

#include <cstdint>
#include <vector>

#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/weights.hpp"

namespace moekit::bench {

// The weights of one preset: the bf16 masters and each requested quantization of them.
struct BenchWeights {
  MoeWeights master;  // bf16 [E, 2I, H] / [E, H, I] (+ biases iff the layer has them)
  MoeWeights fp8_block, nvfp4, mxfp4;
  // The weights for `scheme`; num_experts 0 when not made (not requested, or the scheme cannot
  // hold the shapes: fp8_block needs H, I % 128, nvfp4 / mxfp4 their scale block: the experts'
  // supports() then says why).
  const MoeWeights& get(QuantScheme scheme) const;
};

// Makes the masters (seeded) and the quantizations listed in `schemes` (kFP8Block128x128,
// kNVFP4, kMXFP4; kBF16 and others are ignored: the masters serve bf16). Synchronizes `stream`.
BenchWeights make_bench_weights(const MoeLayerConfig& config,
                                const std::vector<QuantScheme>& schemes, std::uint64_t seed,
                                StreamHandle stream);

}  // namespace moekit::bench
