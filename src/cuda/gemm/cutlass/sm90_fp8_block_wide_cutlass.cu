// SM90 grouped (ptr-array) FP8 e4m3 GEMM over experts with DeepSeek-V3 block scales (activations
// 1x128 along K, weights 128x128): CUTLASS 4.2 KernelPtrArrayTmaWarpSpecializedCooperativeFP8-
// Blockwise (CUTLASS example 68). The wgmma accumulators are promoted into fp32 registers once per
// 128-wide K block, multiplied by sA[m, kb] * sB[n/128, kb] (exact formats.md section 5 math up to
// fp32 summation order). One instantiation (compile time matters: CI builds this TU on 2 cores).
//
// Kernel config (why):
//   tile 128x128x128: K tile = the scale block, so each k-tile needs one scale per row and one per
//     weight tile; N = 128 = one weight-scale tile; the promotion keeps a second accumulator set,
//     so 128x256 would spill;
//   scales K-major (sA [R, K/128], sB [E, N/128, K/128], the checkpoint / quantizer layout), loaded
//     with cp.async beside the TMA loads, so per-expert slices are plain pointer offsets;
//   cluster 1x1x1, stages: as for the bf16 kernel. The wide config; the narrow one is
//   sm90_fp8_block_narrow_cutlass.cu.
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/cutlass/sm90_cutlass_grouped_gemm.cuh"

MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(
    fp8_block_wide, true, cute::Shape<cute::_128, cute::_128, cute::_128>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, false)
