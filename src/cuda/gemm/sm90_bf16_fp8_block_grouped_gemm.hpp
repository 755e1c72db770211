// Internal: the launchers behind moekit::gemm::grouped_gemm, one TU per type and config: CUTLASS
// (sm90_{bf16,fp8_block}_grouped_gemm_*_cutlass.cu) and the bf16 decode kernel. Arguments arrive
// validated; they only carve the workspace, build the per-expert arguments on the device and
// launch. Compiled only with MOEKIT_WITH_CUTLASS.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "moekit/gemm/grouped_gemm.hpp"

namespace moekit::gemm::detail {

// The activation of GatedActivationArgs (kind silu / swiglu_oai, SwiGLU's alpha finite, limit
// finite and > 0); errors from `where` naming `name`.kind etc. Shared by grouped_gemm's gated
// epilogue and the activation kernels between the GEMMs (sm90_gated_activation.cu).
void check_gated_activation(const GatedActivationArgs& act, const char* where, const char* name);

std::size_t bf16_wide_grouped_gemm_workspace_bytes(int num_experts);
void bf16_wide_grouped_gemm_run(const GroupedGemmArgs& args);
std::size_t bf16_narrow_grouped_gemm_workspace_bytes(int num_experts);
void bf16_narrow_grouped_gemm_run(const GroupedGemmArgs& args);

std::size_t bf16_swap_wide_grouped_gemm_workspace_bytes(int num_experts);
void bf16_swap_wide_grouped_gemm_run(const GroupedGemmArgs& args);
// Not CUTLASS: the decode grouped GEMM (sm90_bf16_decode_grouped_gemm.cu); no workspace.
std::size_t bf16_decode_grouped_gemm_workspace_bytes(int num_experts);
void bf16_decode_grouped_gemm_run(const GroupedGemmArgs& args);

// Not CUTLASS: the wgmma grouped GEMM (sm90_bf16_fp8_wgmma_grouped_gemm.cuh), one TU per type;
// no workspace.
// The wgmma config's token tile without the MOEKIT_WGMMA_GEMM_TILE override: "128n" below 96 rows
// per expert that can hold rows, else "160r256" for bf16 with E >= 256, else "160"
// (sm90_bf16_fp8_wgmma_grouped_gemm.cuh, wgmma_tile_name, has the measurements).
inline const char* wgmma_auto_tile_name(bool fp8, int num_experts, std::int64_t max_rows) {
  const std::int64_t holders =
      std::max<std::int64_t>(1, std::min<std::int64_t>(num_experts, max_rows));
  return max_rows / holders < 96 ? "128n" : !fp8 && num_experts >= 256 ? "160r256" : "160";
}

std::size_t bf16_wgmma_grouped_gemm_workspace_bytes(int num_experts);
void bf16_wgmma_grouped_gemm_run(const GroupedGemmArgs& args);
std::size_t fp8_block_wgmma_grouped_gemm_workspace_bytes(int num_experts);
void fp8_block_wgmma_grouped_gemm_run(const GroupedGemmArgs& args);

std::size_t fp8_block_wide_grouped_gemm_workspace_bytes(int num_experts);
void fp8_block_wide_grouped_gemm_run(const GroupedGemmArgs& args);
std::size_t fp8_block_narrow_grouped_gemm_workspace_bytes(int num_experts);
void fp8_block_narrow_grouped_gemm_run(const GroupedGemmArgs& args);
std::size_t fp8_block_swap_wide_grouped_gemm_workspace_bytes(int num_experts);
void fp8_block_swap_wide_grouped_gemm_run(const GroupedGemmArgs& args);

// Bytes of the per-expert argument arrays, rounded so the CUTLASS scratch that follows is aligned.
constexpr std::size_t kWorkspaceAlign = 256;
constexpr std::size_t align_up(std::size_t x) {
  return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

}  // namespace moekit::gemm::detail
