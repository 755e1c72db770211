// CUDA versions of the token permutation ops of permute.hpp, on device tensors. Each is
// asynchronous on `stream` with no allocation and no host synchronization (CUDA-graph capture
// safe), and reproduces the CPU reference's outputs bit for bit (same order, same -1 / zero fill,
// same fp32 arithmetic order in the reduction).
//
// Device code cannot throw on data: shapes, dtypes and devices are validated on the host (errors
// name the argument), but an out-of-range expert id in topk_ids is treated as dropped (counted
// nowhere, permuted_row -1) and an expert that receives more than T_max assignments in the batched
// format keeps only its first T_max (expert_num_tokens = min(count, T_max)), where the reference
// throws. Callers that need those checks run the reference on a sample.
#pragma once

#include <cstdint>

#include "moekit/core/tensor.hpp"
#include "moekit/permute/permute.hpp"

namespace moekit {

// Largest E_local the CUDA permutation supports (shared-memory histograms).
constexpr int kPermuteCudaMaxLocalExperts = 512;

// compute_permutation on the device: counting, an exclusive scan, then a stable rank per expert
// (ascending assignment a = t*k + j). One CTA; every output of PermutationView is written
// (sorted_ids up to its full capacity, -1 where unused).
void compute_permutation_cuda(const TensorView& topk_ids, const TensorView& expert_map,
                              int num_local_experts, int block_size, const PermutationView& out,
                              StreamHandle stream = nullptr);

// permute_gather on the device: out[r, :] = src[sorted_ids[r] / top_k, :], zero bytes where
// sorted_ids[r] < 0. Raw-byte rows (any dtype), 16-byte copies where rows allow.
void permute_gather_cuda(const TensorView& src, const TensorView& sorted_ids, int top_k,
                         const TensorView& out, StreamHandle stream = nullptr);

// batched_rows on the device (see permute.hpp); -1 where dropped or beyond T_max.
void batched_rows_cuda(const TensorView& topk_ids, const TensorView& expert_map,
                       const TensorView& permuted_row, const TensorView& expert_offsets,
                       std::int64_t max_tokens_per_expert, const TensorView& batched_row,
                       StreamHandle stream = nullptr);

// Batched format from a permutation (any block_size): out[e, i, :] = src[token of the i-th
// assignment of expert e, :] for i < min(expert_counts[e], T_max), zero bytes otherwise;
// expert_num_tokens[e] = min(expert_counts[e], T_max). Equals scatter_batched of the reference.
// out: [E_local, T_max, ...] with src's trailing dims; expert_num_tokens [E_local] i32.
void scatter_batched_cuda(const TensorView& src, const PermutationView& permutation, int top_k,
                          const TensorView& out, const TensorView& expert_num_tokens,
                          StreamHandle stream = nullptr);

// unpermute_reduce on the device: the reference's exact fp32 arithmetic (RN multiply, RN add, in
// slot order; __fmul_rn / __fadd_rn). expert_out [R, H] (leading dims flattened) f32 or bf16;
// source_row [M, k] i32; topk_weights [M, k] f32 or absent; out [M, H] f32 or bf16.
void unpermute_reduce_cuda(const TensorView& expert_out, const TensorView& source_row,
                           const TensorView& topk_weights, const TensorView& out,
                           StreamHandle stream = nullptr);

}  // namespace moekit
