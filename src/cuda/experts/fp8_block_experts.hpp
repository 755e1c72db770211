// The fp8 block experts backend (cuda_fp8_block_grouped): W8A8 e4m3 with DeepSeek-V3 scales,
// weights 128x128 tiles (`weight_scale_inv` [E, ceil(N/128), K/128] f32, dequant = q * s),
// activations 1x128 groups along K ([M, H/128] f32, produced by the prepare). The GEMMs promote
// the fp8 products into fp32 once per 128-wide K block with sA * sB (formats.md section 5); the
// SiLU-and-mul output is re-quantized to 1x128 e4m3 groups for GEMM2. Implementation shared with
// the bf16 backend: GroupedGemmExperts in bf16_experts.hpp.
#pragma once

#include "cuda/experts/bf16_experts.hpp"
