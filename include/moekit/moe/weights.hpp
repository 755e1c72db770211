// One MoE layer's expert weights as moekit holds them (before backend-specific preparation).
// Convention: w13 = [w1 (gate); w3 (up)] stacked along rows, i.e. [E, 2I, H], gate rows first
// (gate/up "halves"); w2 = [E, H, I]. Loaders convert checkpoint conventions into this one
// (weights/ has the reorders). Global scales are ENCODE scales (NVFP4: gs = 2688 / amax_w);
// ModelOpt's weight_scale_2 is their reciprocal.
#pragma once

#include <cstdint>
#include <vector>

#include "moekit/core/tensor.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {

struct MoeWeights {
  int num_experts = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  // Scheme of w13 and w2: kBF16, kFP8PerTensor, kFP8Block128x128, kNVFP4, kMXFP4.
  QuantConfig quant;
  // true: w13 = [gate; up] with 2I rows (gated activations). false: w13 is w1 alone with I rows
  // (non-gated activations such as ReLU^2); everything written "2I" below is then I.
  bool gated = true;

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
  std::int64_t w13_rows() const { return gated ? 2 * intermediate_size : intermediate_size; }
  // Shapes, dtypes, devices, scale shapes vs the quant scheme (infer_quant_shapes of [E, rows,
  // K]); throws moekit::Error naming the tensor.
  void validate() const;
};

// The experts `experts` (global ids, in the order given: local expert l = experts[l]) of `w`, as a
// layer of experts.size() experts on the same device: every per-expert tensor (leading dimension
// E) sliced, anything else copied. What one expert-parallel rank holds:
//   select_experts(weights, problem.parallel.local_experts(weights.num_experts)).
// Throws moekit::Error naming the bad id.
MoeWeights select_experts(const MoeWeights& w, const std::vector<int>& experts);

// Router parameters when the layer computes its own logits: logits = x @ weight^T (+ bias).
struct RouterWeights {
  Tensor weight;           // [E, H] f32 or bf16
  Tensor bias;             // [E] f32, optional (gpt-oss)
  Tensor correction_bias;  // [E] f32, optional (DeepSeekV3 e_score_correction_bias)
};

}  // namespace moekit
