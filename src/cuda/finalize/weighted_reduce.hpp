// Internal: the weighted top-k reduce back to [M, H] (permute.hpp's unpermute_reduce arithmetic:
// per token, slots in order, RN(w * v) then RN(acc + p), never an FMA), on raw device pointers. The
// one implementation: the experts call it directly, unpermute_reduce_cuda validates its tensors
// and calls it, and the decode GEMM's fused reduce shares its per-8-column sum (topk_reduce.cuh).
#pragma once

#include <cstdint>

#include "moekit/core/dtype.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::cuda {

struct WeightedReduceArgs {
  const void* expert_out = nullptr;  // [R, H] (row stride H), in_dtype bf16 or f32
  DType in_dtype = DType::kBF16;
  const std::int32_t* source_row = nullptr;  // [M, k]: the row of each slot, -1 = dropped
  const float* topk_weights = nullptr;       // [M, k] or null (every weight 1)
  std::int64_t num_tokens = 0;               // M
  int top_k = 0;
  std::int64_t hidden = 0;                   // H
  void* out = nullptr;                       // [M, H], out_dtype bf16 or f32
  DType out_dtype = DType::kBF16;
  // Optional GEMM2 bias f32 [E, H] added to each slot's row before its weight (slot j's expert:
  // topk_ids[t, j]); H % 8 == 0 and 16-byte aligned rows.
  const float* bias = nullptr;
  const std::int32_t* topk_ids = nullptr;
};
void weighted_reduce(const WeightedReduceArgs& args, StreamHandle stream);

}  // namespace moekit::cuda
