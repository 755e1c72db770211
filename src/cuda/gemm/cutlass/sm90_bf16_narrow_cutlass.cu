// SM90 grouped (ptr-array) BF16 GEMM over experts, NARROW config: CUTLASS 4.2 TMA warp-specialized
// ping-pong kernel with 64x128x64 tiles. Used for few rows per expert (decode): 64-row tiles halve
// the padding, 128-wide N tiles give 2x the CTAs of the wide config when the weight stream is the
// cost, and the two consumer warpgroups alternate MMA and epilogue on separate tiles. (At
// DeepSeek-V3 prefill, ~128 rows per expert, it is 1.35x slower than wide although it halves the
// padding: run 2.)
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/cutlass/sm90_cutlass_grouped_gemm.cuh"

MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(bf16_narrow, false,
                                   cute::Shape<cute::_64, cute::_128, cute::_64>,
                                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                   cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong, false)
