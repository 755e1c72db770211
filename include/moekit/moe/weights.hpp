// One MoE layer's expert weights as moekit holds them (before backend-specific preparation).
// Convention: w13 = [w1 (gate); w3 (up)] stacked along rows, i.e. [E, 2I, H], gate rows first
// (gate/up "halves"); w2 = [E, H, I]. Loaders convert checkpoint conventions into this one
// (weights/ has the reorders). Global scales are ENCODE scales (NVFP4: gs = 2688 / amax_w);
// ModelOpt's weight_scale_2 is their reciprocal.
#pragma once

#include <cstdint>

#include "moekit/core/tensor.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {

struct MoeWeights {
  int num_experts = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  QuantConfig quant;  // scheme of w13 and w2: kBF16, kFP8PerTensor, kFP8Block128x128, kNVFP4, kMXFP4

  QuantizedTensor w13;  // values [E, 2I, H] (bf16/e4m3) or [E, 2I, H/2] (e2m1x2), scales per scheme
  QuantizedTensor w2;   // values [E, H, I] or [E, H, I/2]
  Tensor w13_bias;      // [E, 2I] f32, optional
  Tensor w2_bias;       // [E, H] f32, optional

  // Calibrated activation scales (optional; used by W4A4 / W8A8 emulation and static FP8):
  // NVFP4: ENCODE global scales for the GEMM inputs (1 / ModelOpt input_scale); FP8 per-tensor:
  // DECODE scales. f32 [E] (one per expert; moekit requires them equal across experts).
  Tensor a13_scale;
  Tensor a2_scale;

  Device device() const { return w13.values.device(); }
  void validate() const;  // shapes, dtypes, scale shapes vs quant scheme; throws moekit::Error
};

// Router parameters when the layer computes its own logits: logits = x @ weight^T (+ bias).
struct RouterWeights {
  Tensor weight;           // [E, H] f32 or bf16
  Tensor bias;             // [E] f32, optional (gpt-oss)
  Tensor correction_bias;  // [E] f32, optional (DeepSeekV3 e_score_correction_bias)
};

}  // namespace moekit
