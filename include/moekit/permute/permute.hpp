// Token permutation: the normative CPU reference of grouping (token, slot) assignments by expert,
// gathering activations into that order, scattering them into the batched per-expert format, and
// the weighted top-k reduction back to [M, H]. The CUDA kernels (src/cuda/permute/,
// src/cuda/finalize/) reproduce every output here bit for bit, including padding and the -1
// fill, so that tests can compare whole buffers.
//
// Vocabulary. M tokens, k = top-k, E_global experts, E_local experts on this rank.
//   assignment a = t * k + j      (token t, slot j; the flat index into topk_ids [M, k])
//   expert_map [E_global] i32     global -> local expert id, -1 = not on this rank; absent =
//                                 identity (E_local == E_global). Assignments whose expert maps to
//                                 -1 are DROPPED: they are not counted, not gathered, and
//                                 contribute nothing to the reduction.
//
// Order (the contract every kernel must reproduce):
//   sorted_ids lists, for local expert e = 0, 1, ..., E_local-1 in turn, the assignments a routed
//   to e in ASCENDING a (hence tokens ascending, then slots ascending); stable and deterministic.
//   With block_size > 1 each expert's segment is padded up to a multiple of block_size with -1.
//   Entries past expert_offsets[E_local] (up to the buffer's capacity) are also -1.
#pragma once

#include <cstdint>

#include "moekit/core/tensor.hpp"

namespace moekit {

// Rows of the sorted_ids / gathered buffers that any routing can need: M*k unpadded, or
// M*k + E_local*(block_size-1) when every expert segment is padded to block_size (block_size >= 1).
std::int64_t permute_capacity(std::int64_t num_tokens, int top_k, int num_local_experts,
                              int block_size = 1);

// Outputs of compute_permutation (caller-allocated, host, i32, contiguous).
struct PermutationView {
  TensorView expert_counts;   // [E_local] i32: assignments per local expert (unpadded)
  TensorView expert_offsets;  // [E_local + 1] i32: exclusive prefix sum of the PADDED counts
                              //   (round_up(count, block_size)); offsets[E_local] = rows used
  TensorView sorted_ids;      // [capacity] i32: assignment a = t*k + j, or -1 (padding / unused)
  TensorView permuted_row;    // [M, k] i32: the row of assignment (t, j) in sorted_ids (its
                              //   position in the gathered buffer), -1 if dropped (expert_map)
};

// topk_ids: [M, k] i32 global expert ids in [0, E_global). expert_map: [E_global] i32 or absent.
// num_local_experts: E_local (== E_global when expert_map is absent; every expert_map entry must be
// -1 or in [0, E_local), local ids used at most once). block_size >= 1.
// capacity = out.sorted_ids.size(0) must be >= permute_capacity(M, k, E_local, block_size).
// Throws moekit::Error naming the argument on a bad shape/dtype or an out-of-range id.
void compute_permutation(const TensorView& topk_ids, const TensorView& expert_map,
                         int num_local_experts, int block_size, const PermutationView& out);

// Standard format gather: out[r, :] = src[sorted_ids[r] / k, :] for sorted_ids[r] >= 0, and all
// zero bytes for r with sorted_ids[r] == -1. Rows are copied as raw bytes, so any dtype works
// (values bf16 / e4m3 / packed e2m1x2, or per-row scales such as LINEAR block scales [M, Kb],
// per-token scales [M] / [M, 1]). Block scales must be gathered LINEAR and swizzled afterwards
// (swizzling interleaves rows). src: [M, ...] contiguous; out: [R, ...] contiguous with the same
// trailing dims and dtype, R <= sorted_ids.size(0) (rows r < R are written).
void permute_gather(const TensorView& src, const TensorView& sorted_ids, int top_k,
                    const TensorView& out);

// Row of each assignment in the batched format [E_local, T_max, ...]:
//   batched_row[t, j] = e * T_max + (permuted_row[t, j] - expert_offsets[e]),
// e = local expert of (t, j); -1 where dropped. The permutation must be unpadded (block_size 1).
// Throws if an expert holds more than T_max assignments (naming the expert, count and T_max).
// topk_ids [M, k] i32, expert_map [E_global] i32 or absent, expert_offsets [E_local+1] i32,
// permuted_row [M, k] i32; out batched_row [M, k] i32.
void batched_rows(const TensorView& topk_ids, const TensorView& expert_map,
                  const TensorView& permuted_row, const TensorView& expert_offsets,
                  std::int64_t max_tokens_per_expert, const TensorView& batched_row);

// Batched format scatter: out[e, i, :] = src[token of the i-th assignment of expert e, :] for
// i < expert_num_tokens[e]; rows i >= expert_num_tokens[e] are zero bytes. Raw-byte rows as in
// permute_gather. src [M, ...]; out [E_local, T_max, ...]; expert_num_tokens out [E_local] i32.
// Throws if an expert receives more than T_max assignments.
void scatter_batched(const TensorView& src, const TensorView& topk_ids,
                     const TensorView& expert_map, int num_local_experts, const TensorView& out,
                     const TensorView& expert_num_tokens);

// Weighted top-k reduction (unpermute + combine), the exact arithmetic:
//   for each token t (independently), for each column h:
//     float acc = 0.0f;
//     for j = 0 .. k-1 (slot order):
//       r = source_row[t, j]; if (r < 0) continue;          // dropped: contributes nothing
//       float v = float(expert_out[r, h]);                  // bf16 -> f32 is exact
//       float w = weights.defined() ? topk_weights[t, j] : 1.0f;
//       float p = RN(w * v);                                // separate multiply (NOT fused)
//       acc = RN(acc + p);                                  // separate add
//     out[t, h] = (out dtype f32) ? acc : bf16_RN(acc);     // round-to-nearest-even
// CUDA: __fmul_rn / __fadd_rn (never contracted into an FMA) and __float2bfloat16_rn.
// A token with no local slot gets +0.0. source_row [M, k] i32: permuted_row (standard format),
// batched_row (batched format) or t*k + j (contiguous [M, k, H]). expert_out: [R, H] (or
// [E_local, T_max, H], or [M, k, H]: leading dims are flattened) f32 or bf16, contiguous.
// topk_weights: [M, k] f32 or absent (weights already applied, e.g. on the input for Llama4).
// out: [M, H] f32 or bf16.
void unpermute_reduce(const TensorView& expert_out, const TensorView& source_row,
                      const TensorView& topk_weights, const TensorView& out);

}  // namespace moekit
