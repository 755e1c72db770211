// Internal: the CUTLASS grouped GEMM configs, one translation unit each
// (sm90_{bf16,fp8_block}_{wide,narrow,swap_wide}_cutlass.cu, which define NAME_workspace_bytes and
// NAME_run with MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG), and the list the dispatch is built from.
#pragma once

#include <cstddef>

#include "cuda/gemm/grouped_gemm.hpp"

// X(NAME, scheme, kernel) for every config: the one list of what exists.
#define MOEKIT_CUTLASS_CONFIG_LIST(X)                   \
  X(bf16_wide, kBF16, kCutlassWide)                     \
  X(bf16_narrow, kBF16, kCutlassNarrow)                 \
  X(bf16_swap_wide, kBF16, kCutlassSwapWide)            \
  X(fp8_block_wide, kFP8Block, kCutlassWide)            \
  X(fp8_block_narrow, kFP8Block, kCutlassNarrow)        \
  X(fp8_block_swap_wide, kFP8Block, kCutlassSwapWide)

namespace moekit::gemm::sm90::cutlass_grouped {

#define MOEKIT_CUTLASS_DECLARE_CONFIG(name, scheme, kernel) \
  std::size_t name##_workspace_bytes(int num_experts);      \
  void name##_run(const GroupedGemmArgs& args);
MOEKIT_CUTLASS_CONFIG_LIST(MOEKIT_CUTLASS_DECLARE_CONFIG)
#undef MOEKIT_CUTLASS_DECLARE_CONFIG

}  // namespace moekit::gemm::sm90::cutlass_grouped
