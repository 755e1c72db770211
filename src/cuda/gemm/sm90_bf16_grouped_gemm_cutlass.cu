// SM90 grouped (ptr-array) BF16 GEMM over experts, WIDE config: CUTLASS 4.2 TMA warp-specialized
// cooperative kernel, persistent over all (expert, tile) pairs. Used when experts hold many rows
// (GroupedGemmConfig::kWide; kAuto picks it from 64 rows per expert, see auto_grouped_gemm_config).
//   tile 128x256x64: two consumer warpgroups of 64x256 each; the widest tile that keeps the
//     accumulators in registers (168 regs, 0 spills), so the weights are read once per 128 rows;
//   cluster 1x1x1; stages: as many as fit beside the epilogue (StageCountAutoCarveout) = 4.
#define MOEKIT_GEMM_TILE_SHAPE cute::Shape<_128, _256, _64>
#define MOEKIT_GEMM_KERNEL_SCHEDULE cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative
#define MOEKIT_GEMM_EPILOGUE_SCHEDULE cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative
#define MOEKIT_GEMM_WORKSPACE_FN bf16_wide_grouped_gemm_workspace_bytes
#define MOEKIT_GEMM_RUN_FN bf16_wide_grouped_gemm_run
#include "cuda/gemm/sm90_bf16_grouped_gemm_cutlass.cuh"
