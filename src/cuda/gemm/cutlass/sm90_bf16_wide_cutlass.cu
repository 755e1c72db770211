// SM90 grouped (ptr-array) BF16 GEMM over experts, WIDE config: CUTLASS 4.2 TMA warp-specialized
// cooperative kernel, persistent over all (expert, tile) pairs. Used when experts hold many rows
// (GemmKernel::kCutlassWide; the rule: cuda/tuning/sm90_tuning.cpp).
//   tile 128x256x64: two consumer warpgroups of 64x256 each; the widest tile that keeps the
//     accumulators in registers (168 regs, 0 spills), so the weights are read once per 128 rows;
//   cluster 1x1x1; stages: as many as fit beside the epilogue (StageCountAutoCarveout) = 4.
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/cutlass/sm90_cutlass_grouped_gemm.cuh"

MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(bf16_wide, false, cute::Shape<cute::_128, cute::_256, cute::_64>,
                                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                   cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, false)
