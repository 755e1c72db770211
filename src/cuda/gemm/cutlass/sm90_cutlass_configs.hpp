// Internal: the CUTLASS grouped GEMM configs, one translation unit each
// (sm90_{bf16,fp8_block}_{wide,narrow,swap_wide}_cutlass.cu), and their dispatch.
#pragma once

#include <cstddef>

#include "cuda/gemm/grouped_gemm.hpp"

namespace moekit::gemm::sm90::cutlass_grouped {

std::size_t bf16_wide_workspace_bytes(int num_experts);
void bf16_wide_run(const GroupedGemmArgs& args);
std::size_t bf16_narrow_workspace_bytes(int num_experts);
void bf16_narrow_run(const GroupedGemmArgs& args);
std::size_t bf16_swap_wide_workspace_bytes(int num_experts);
void bf16_swap_wide_run(const GroupedGemmArgs& args);
std::size_t fp8_block_wide_workspace_bytes(int num_experts);
void fp8_block_wide_run(const GroupedGemmArgs& args);
std::size_t fp8_block_narrow_workspace_bytes(int num_experts);
void fp8_block_narrow_run(const GroupedGemmArgs& args);
std::size_t fp8_block_swap_wide_workspace_bytes(int num_experts);
void fp8_block_swap_wide_run(const GroupedGemmArgs& args);

}  // namespace moekit::gemm::sm90::cutlass_grouped
