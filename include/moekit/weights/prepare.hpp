// Weight preparation: pure functions that reorder / pad / fold checkpoint tensors into the layouts
// kernels want, each with its inverse (tests check round trips). Host tensors; outputs are freshly
// allocated. Row-stacked tensors are [E, R, C] (or [R, C], or [E, R] for biases); "rows" is the
// second-to-last dim for rank >= 2 ([E, R] for rank 2 biases means rows = last dim: see each fn).
//
// moekit's convention (moe/weights.hpp): w13 = [w1 (gate); w3 (up)] "halves", gate rows first.
#pragma once

#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit {

// [w1; w3] <-> [w3; w1]: swaps the two row halves (self-inverse). t: [E, 2I, C] or [E, 2I]
// (biases, rows along the last dim) of any dtype (scales included: their rows follow weights).
Tensor swap_gate_up(const TensorView& t);

// gpt-oss even/odd row interleave (gate at even rows, up at odd) -> halves [gate; up], and back.
// t: [E, 2I, C] (weights, linear block scales) or [E, 2I] (biases).
Tensor deinterleave_gate_up(const TensorView& t);
Tensor interleave_gate_up(const TensorView& t);

// "Interleave linear and gate" in 64-row groups: halves [gate; up] -> [up 0-63, gate 0-63,
// up 64-127, gate 64-127, ...] (I % group == 0). The same call applies to weights and to their
// LINEAR block scales (one scale row per weight row). Inverse: deinterleave_linear_gate.
Tensor interleave_linear_gate(const TensorView& t, std::int64_t group = 64);
Tensor deinterleave_linear_gate(const TensorView& t, std::int64_t group = 64);

// Block-scale swizzle of a batch of LINEAR scale matrices [E, rows, Kb] (u8/e4m3/e8m0) into
// [E, Mp, Kp] in `layout` (zero padding), via quant/layout.hpp; and back.
Tensor swizzle_block_scales(const TensorView& linear,
                            ScaleLayout layout = ScaleLayout::kSwizzled128x4);
Tensor unswizzle_block_scales(const TensorView& swizzled, std::int64_t rows,
                              std::int64_t scale_cols,
                              ScaleLayout layout = ScaleLayout::kSwizzled128x4);

// Zero padding of the last two dims up to (rows_to, cols_to) (>= current) and its inverse crop.
// Use with element counts for bf16/e4m3 values, bytes for e2m1x2 (cols = K/2), scale columns
// for linear block scales: pad_rows_cols(scales, I_pad, H_pad / sfv), consistent with the values.
Tensor pad_rows_cols(const TensorView& t, std::int64_t rows_to, std::int64_t cols_to);
Tensor crop_rows_cols(const TensorView& t, std::int64_t rows, std::int64_t cols);
// Round-up helper: the smallest multiple of `alignment` >= n.
std::int64_t align_up(std::int64_t n, std::int64_t alignment);

// Pads the gate and the up half of w13 [E, 2I, C] (or biases [E, 2I]) separately to I_to rows
// each (result [E, 2*I_to, C]) so that the halves stay aligned; inverse crops back to I rows.
Tensor pad_gate_up_rows(const TensorView& t, std::int64_t i_to);
Tensor crop_gate_up_rows(const TensorView& t, std::int64_t i);

// Scale folding (NVFP4 W4A4; ModelOpt DECODE scales): with w13_scale_2 [E] (or [E, 2] gate/up),
// a13_scale [E] (or [E, 2]) input scales that must be equal across gate/up and experts:
//   g1_alpha[e] = w13_scale_2[e] * a13_scale,  a1_gscale = 1 / a13_scale.
// The same for GEMM2 with w2_scale_2 / a2_scale. Throws moekit::Error naming the tensor and the
// experts (and gate/up index) whose input scale differs, or when a weight scale differs between
// gate and up.
struct FoldedScales {
  Tensor g1_alpha;   // [E] f32
  Tensor a1_gscale;  // [1] f32
  Tensor g2_alpha;   // [E] f32 (when w2 scales given)
  Tensor a2_gscale;  // [1] f32
};
FoldedScales fold_scales(const TensorView& w13_scale_2, const TensorView& a13_scale,
                         const TensorView& w2_scale_2 = {}, const TensorView& a2_scale = {});
// The inverse direction (for round trips): a13_scale = 1 / a1_gscale (broadcast to [E]),
// w13_scale_2 = g1_alpha / a13_scale. Exact only where the division is (tests state the bound).
struct UnfoldedScales {
  Tensor w13_scale_2, a13_scale, w2_scale_2, a2_scale;
};
UnfoldedScales unfold_scales(const FoldedScales& folded);

}  // namespace moekit
