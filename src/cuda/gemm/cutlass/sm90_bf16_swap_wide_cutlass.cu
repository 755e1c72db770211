// SM90 grouped (ptr-array) BF16 GEMM over experts, SWAP-AB WIDE config (~128 rows per expert:
// DeepSeek-V3 / Kimi-K2 prefill, Mixtral at 512 tokens): CUTLASS 4.2 TMA warp-specialized
// cooperative kernel on D^T = W * A^T (sm90_cutlass_grouped_gemm.cuh).
//   tile 128 weight rows x 160 expert rows x 64: 160 holds 128 +- 11 rows (DeepSeek-V3 at 4096
//     tokens; > 160 in ~0.2% of the experts) in one tile, so every weight tile is read once and
//     the MMA padding is 160/128 = 1.25x instead of ~1.5x for 128-row tiles, where half the
//     experts need a second, nearly empty tile; each consumer warpgroup holds 64x160 fp32
//     accumulators (80 registers); 36 KiB per stage.
// N = 160 is not a multiple of 64: without the extended wgmma shapes (N a multiple of 8) the
// CuTe selector falls back to 64x32 instructions (five per 160 columns; seen in the SASS).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/cutlass/sm90_cutlass_grouped_gemm.cuh"

MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(bf16_swap_wide, false,
                                   cute::Shape<cute::_128, cute::_160, cute::_64>,
                                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                   cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, true)
