// Decode-size routing fused into the decode grouped GEMMs (the W4A16 decode8 tile and the bf16
// decode config), so that the whole experts apply() at a few tokens is two kernels instead of four:
//
//   GEMM1 (routing.topk_ids, a_by_token): every CTA sorts the rows by expert itself, from topk_ids,
//     in shared memory, instead of reading expert_offsets / row_index written by a permute kernel;
//     its A rows are the tokens (the unpermuted input).
//   GEMM2 (routing.topk_ids, reduce_out): the same sort; A in sorted order (GEMM1's output); the
//     CTA that counts the last unit of a block of output columns (after its streaming loop) runs
//     the weighted top-k reduce of that block into reduce_out, instead of a reduce kernel.
//
// The sort gives the positions of permute.hpp (rows grouped by expert, ascending assignment index
// inside an expert: what permute_by_expert writes), and the reduce the operations and order of
// cuda::weighted_reduce (finalize/weighted_reduce.hpp), so a fused apply() is bitwise equal to the four-kernel one.
#pragma once

#include <cstdint>

namespace moekit::gemm {

// Most routed rows (tokens * top_k) a fused launch takes: the sort runs in one warp of every CTA
// (two 32-row chunks), and its tables sit in every CTA's shared memory.
constexpr int kDecodeRoutingMaxRows = 64;
// Most experts a fused launch takes (its shared-memory tables have fixed places).
constexpr int kDecodeRoutingMaxExperts = 512;

// Counters a fused reduce over n output columns needs (one per 16 columns; enough for every
// decode configuration).
constexpr std::int64_t decode_routing_counters(std::int64_t n) { return (n + 15) / 16; }

struct DecodeRouting {
  // Device i32 [m] (m = the GEMM's rows = tokens * top_k, at most kDecodeRoutingMaxRows): the
  // expert of each (token, slot), row-major [tokens, top_k]. Ids outside [0, E) are not routed
  // (another rank's experts). Null: fusion off (expert_offsets / row_index as usual). Non-null:
  // expert_offsets and row_index must be null. Read in the prologue: under PDL
  // (overlap_previous) the previous kernel must not write it.
  const std::int32_t* topk_ids = nullptr;
  int top_k = 0;
  // A row of sorted row r: its token (r's assignment / top_k, the unpermuted input: GEMM1) or r
  // (A already in sorted order: GEMM2).
  bool a_by_token = false;
  // Weighted top-k reduce (plain epilogue only): reduce_out[t, c] = bf16(sum_j w[t, j] *
  // (out[row(t, j), c] + reduce_bias[e(t, j), c])) over the routed slots j in slot order, f32,
  // each product and sum rounded as cuda::weighted_reduce does. `out` (sorted rows) is still
  // written. Null: off.
  void* reduce_out = nullptr;           // device bf16 [tokens, n], 16-byte aligned
  const float* topk_weights = nullptr;  // device f32 [tokens, top_k]; null = every weight 1
  const float* reduce_bias = nullptr;   // optional device f32 [E, n] (16-byte aligned)
  // Device, decode_routing_counters(n) ints, zero when the launch starts; the launch leaves them
  // zero. A workspace that may hold anything is cleared by the GEMM before (clear, below).
  int* counters = nullptr;
  // Zeroed by this launch before it finishes (GEMM1 clears GEMM2's counters). Optional.
  int* clear = nullptr;
  int clear_count = 0;
};

// The routing of an experts apply()'s two GEMMs. GEMM1: A rows by token; it clears GEMM2's
// counters (decode_routing_counters(hidden) ints).
inline DecodeRouting decode_routing_gemm1(const std::int32_t* topk_ids, int top_k,
                                          int* gemm2_counters, std::int64_t hidden) {
  DecodeRouting r;
  r.topk_ids = topk_ids;
  r.top_k = top_k;
  r.a_by_token = true;
  r.clear = gemm2_counters;
  r.clear_count = static_cast<int>(decode_routing_counters(hidden));
  return r;
}
// GEMM2: A in sorted order; the weighted reduce into reduce_out.
inline DecodeRouting decode_routing_gemm2(const std::int32_t* topk_ids, int top_k, void* reduce_out,
                                          const float* topk_weights, const float* reduce_bias,
                                          int* counters) {
  DecodeRouting r;
  r.topk_ids = topk_ids;
  r.top_k = top_k;
  r.reduce_out = reduce_out;
  r.topk_weights = topk_weights;
  r.reduce_bias = reduce_bias;
  r.counters = counters;
  return r;
}

}  // namespace moekit::gemm
