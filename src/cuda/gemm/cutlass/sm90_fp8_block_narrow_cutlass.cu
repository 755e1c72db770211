// SM90 grouped (ptr-array) FP8 block-scaled GEMM over experts, NARROW config: CUTLASS 4.2
// KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise with 64x128x128 tiles (K tile = the scale
// block). Used for few rows per expert (decode, kimi-k2-style prefill of < 128 rows per expert;
// the rule: cuda/tuning/sm90_tuning.cpp): 64-row tiles halve the padding and give more CTAs when
// the weight stream is the cost.
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/cutlass/sm90_cutlass_grouped_gemm.cuh"

MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(
    fp8_block_narrow, true, cute::Shape<cute::_64, cute::_128, cute::_128>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong, false)
