// SM90 grouped (ptr-array) FP8 block-scaled GEMM over experts, SWAP-AB WIDE config (~128 rows
// per expert: DeepSeek-V3 / Kimi-K2 prefill): CUTLASS 4.2
// KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise on D^T = W * A^T
// (sm90_cutlass_grouped_gemm.cuh: the weights' 128x128 scales are the kernel's SFA
// with granularity 128 along its M, the activations' 1x128 scales its SFB, granularity 1).
//   tile 128 weight rows x 160 expert rows x 128 (K tile = the scale block): one tile holds an
//     expert's 128 +- 11 rows, each weight tile is read once; the weight scale is one value per
//     k-tile (the 128-row weight tile is one scale tile); each consumer warpgroup keeps 64x160
//     accumulators twice (MMA + promoted), 160 registers.
// N = 160 is not a multiple of 64: without the extended wgmma shapes (N a multiple of 8) the
// CuTe selector falls back to 64x32 instructions (five per 160 columns; seen in the SASS).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/cutlass/sm90_cutlass_grouped_gemm.cuh"

MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(
    fp8_block_swap_wide, true, cute::Shape<cute::_128, cute::_160, cute::_128>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, true)
