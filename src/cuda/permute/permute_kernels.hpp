// Internal: the CUDA permutation and row gather, on raw device pointers. The one implementation of
// each: the experts call these directly (their row counts stay on the device, so a layer is
// graph-capturable), and the public ops of moekit/permute/permute_cuda.hpp validate their tensors
// and call them too. The order is permute.hpp's: rows grouped by local expert, ascending
// assignment index a = t * k + j inside an expert.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/gemm/grouped_gemm.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::cuda {

// Largest E_local the permutation supports (its shared-memory tables).
constexpr int kMaxPermuteExperts = 512;

struct PermuteArgs {
  const std::int32_t* topk_ids = nullptr;  // [n] global expert ids (outside [0, E): dropped)
  std::int64_t num_assignments = 0;        // n = M * k
  int num_experts = 0;                     // E_global
  // Optional [E_global]: global -> local expert, -1 = another rank's (dropped). Null: identity.
  const std::int32_t* expert_map = nullptr;
  int num_local_experts = 0;  // E_local (== E_global without a map)
  int block_size = 1;         // each expert's rows padded to a multiple of it (padding: -1)
  std::int32_t* expert_counts = nullptr;   // optional [E_local]: unpadded counts
  std::int32_t* expert_offsets = nullptr;  // [E_local + 1]: exclusive scan of the padded counts
  // [capacity]: the assignment of each row. Rows below expert_offsets[E_local] that are not padding
  // are always written; with sorted_capacity > 0 the padding and the rows up to the capacity are
  // written -1 too (the public op's whole-buffer contract).
  std::int32_t* sorted_ids = nullptr;
  std::int64_t sorted_capacity = 0;
  std::int32_t* permuted_row = nullptr;  // [n]: the row of each assignment, -1 if dropped
  int top_k = 0;                          // with sorted_tokens
  std::int32_t* sorted_tokens = nullptr;  // optional: the token (a / top_k) of each written row
  // Device scratch of permute_scratch_bytes(n, E_local) bytes (0 for small n): with it, more than
  // 2 chunks of 1024 assignments run on one block per chunk (three launches) instead of one block
  // walking them; the same outputs.
  void* scratch = nullptr;
  // Launch as a programmatic dependent of the previous kernel (it waits for that kernel's writes
  // before reading topk_ids / expert_map): the public op after the router.
  bool overlap_previous = false;
};
void permute_by_expert(const PermuteArgs& args, StreamHandle stream);
std::size_t permute_scratch_bytes(std::int64_t num_assignments, int num_local_experts);

struct GatherArgs {
  const void* src = nullptr;   // [src rows, row_bytes] raw bytes
  std::int64_t row_bytes = 0;
  // The assignment of each output row, or < 0: zeros. Null: row r is assignment r * top_k (the
  // rows in order).
  const std::int32_t* sorted_ids = nullptr;
  int top_k = 1;                             // source row = sorted_ids[r] / top_k
  std::int64_t max_rows = 0;                 // output rows
  const std::int32_t* num_rows = nullptr;    // optional device count: rows < min(*, max_rows)
  void* out = nullptr;                       // [max_rows, row_bytes]
  // kWgmma: bf16 rows (row_bytes % 128 == 0) written in the W4A16 wgmma kernel's K order
  // (gemm::KOrder), 16-byte aligned pointers.
  gemm::KOrder order = gemm::KOrder::kNatural;
};
// out[r, :] = src[sorted_ids[r] / top_k, :] (zeros where sorted_ids[r] < 0). Copies 16-, 4- or
// 1-byte units, the widest the row size and the pointers allow.
void gather_rows(const GatherArgs& args, StreamHandle stream);

}  // namespace moekit::cuda
