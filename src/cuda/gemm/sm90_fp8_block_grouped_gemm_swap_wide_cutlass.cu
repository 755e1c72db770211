// SM90 grouped (ptr-array) FP8 block-scaled GEMM over experts, SWAP-AB WIDE config (~128 rows
// per expert: DeepSeek-V3 / Kimi-K2 prefill): CUTLASS 4.2
// KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise on D^T = W * A^T
// (sm90_fp8_block_grouped_gemm_cutlass.cuh: the weights' 128x128 scales are the kernel's SFA
// with granularity 128 along its M, the activations' 1x128 scales its SFB, granularity 1).
//   tile 128 weight rows x 160 expert rows x 128 (K tile = the scale block): one tile holds an
//     expert's 128 +- 11 rows, each weight tile is read once; the weight scale is one value per
//     k-tile (the 128-row weight tile is one scale tile); each consumer warpgroup keeps 64x160
//     accumulators twice (MMA + promoted), 160 registers.
// N = 160 is not a multiple of 64: without the extended wgmma shapes (N a multiple of 8) the
// CuTe selector falls back to 64x32 instructions (five per 160 columns; seen in the SASS).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#define MOEKIT_GEMM_SWAP_AB 1
#define MOEKIT_GEMM_TILE_SHAPE cute::Shape<_128, _160, _128>
#define MOEKIT_GEMM_KERNEL_SCHEDULE cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise
#define MOEKIT_GEMM_EPILOGUE_SCHEDULE cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative
#define MOEKIT_GEMM_WORKSPACE_FN fp8_block_swap_wide_grouped_gemm_workspace_bytes
#define MOEKIT_GEMM_RUN_FN fp8_block_swap_wide_grouped_gemm_run
#include "cuda/gemm/sm90_fp8_block_grouped_gemm_cutlass.cuh"
