// SM90 grouped (ptr-array) FP8 block-scaled GEMM over experts, NARROW config: CUTLASS 4.2
// KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise with 64x128x128 tiles (K tile = the scale
// block). Used for few rows per expert (decode, kimi-k2-style prefill of < 128 rows per expert;
// kAuto rule: auto_grouped_gemm_config): 64-row tiles halve the padding and give more CTAs when
// the weight stream is the cost.
#define MOEKIT_GEMM_TILE_SHAPE cute::Shape<_64, _128, _128>
#define MOEKIT_GEMM_KERNEL_SCHEDULE cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise
#define MOEKIT_GEMM_EPILOGUE_SCHEDULE cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong
#define MOEKIT_GEMM_WORKSPACE_FN fp8_block_narrow_grouped_gemm_workspace_bytes
#define MOEKIT_GEMM_RUN_FN fp8_block_narrow_grouped_gemm_run
#include "cuda/gemm/sm90_fp8_block_grouped_gemm_cutlass.cuh"
