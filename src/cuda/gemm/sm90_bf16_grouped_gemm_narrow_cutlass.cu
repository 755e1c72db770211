// SM90 grouped (ptr-array) BF16 GEMM over experts, NARROW config: CUTLASS 4.2 TMA warp-specialized
// ping-pong kernel with 64x128x64 tiles. Used for few rows per expert (decode; kAuto: below 64
// rows per expert): 64-row tiles halve the padding, 128-wide N tiles give 2x the CTAs of the wide
// config when the weight stream is the cost, and the two consumer warpgroups alternate MMA and
// epilogue on separate tiles. (At DeepSeek-V3 prefill, ~128 rows per expert, it is 1.35x slower
// than wide although it halves the padding: run 2.)
#define MOEKIT_GEMM_TILE_SHAPE cute::Shape<_64, _128, _64>
#define MOEKIT_GEMM_KERNEL_SCHEDULE cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong
#define MOEKIT_GEMM_EPILOGUE_SCHEDULE cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong
#define MOEKIT_GEMM_WORKSPACE_FN bf16_narrow_grouped_gemm_workspace_bytes
#define MOEKIT_GEMM_RUN_FN bf16_narrow_grouped_gemm_run
#include "cuda/gemm/sm90_bf16_grouped_gemm_cutlass.cuh"
