// The CUDA router: the same semantics as route_reference (routing.hpp), on device tensors,
// asynchronous on `stream` (no allocation, no host synchronization: CUDA-graph capture safe).
//
// Exactness. Expert selection and every weight formula follow the reference's order of operations.
// topk_ids are identical to the reference for every method that selects on logits. DeepSeekV3 and
// MiniMax2 select on sigmoid_f32(l) + bias, where the reference's sigmoid uses the host libm's
// expf; the device computes expf as RN(exp(double)), which equals glibc's expf on all but ~3.5e-5
// of inputs (one ulp apart there), so an id can differ only if two biased scores are within one
// ulp at a selection boundary. Weights are computed in float64 and rounded once, as the reference
// does; they match bit for bit except for those one-ulp sigmoid cases (bound: 2 ulp).
#pragma once

#include "moekit/core/tensor.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

// logits: [M, E] f32 or bf16 (CUDA, contiguous), 1 <= E <= 512; correction_bias [E] f32 (CUDA)
// iff routing_uses_bias; topk_ids i32 [M, k], topk_weights f32 [M, k] (CUDA, contiguous),
// 1 <= k <= 32; DeepSeekV3 num_expert_groups <= 32. Throws moekit::Error naming the argument.
void route_cuda(const TensorView& logits, const TensorView& correction_bias,
                const RoutingConfig& config, const TensorView& topk_ids,
                const TensorView& topk_weights, StreamHandle stream = nullptr);

}  // namespace moekit
