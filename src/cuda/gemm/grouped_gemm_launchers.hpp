// Internal: the kernel families behind gemm::grouped_gemm (grouped_gemm.cpp validates the arguments
// and the config, then calls one of these), and the facts about them that the tuning rules weigh
// (cuda/tuning/sm90_tuning.hpp).
#pragma once

#include <cstddef>

#include "cuda/gemm/grouped_gemm.hpp"

namespace moekit::gemm {

// The geometry of a decode kernel variant (config kDecode with its decode16 / decode_wide /
// decode_short_k flags): weight rows and tokens per unit, its occupancy target (CTAs per SM) and
// its K-warps.
struct DecodeShape {
  int rows = 0, tokens = 0, min_blocks = 0, warps_k = 0;
};
DecodeShape w4a16_decode_shape(const GemmConfig& config);  // w4a16/sm90_w4a16_grouped_gemm.cu
DecodeShape bf16_decode_shape(const GemmConfig& config);   // decode/sm90_bf16_decode_grouped_gemm.cu
inline DecodeShape decode_shape(GemmScheme scheme, const GemmConfig& config) {
  return scheme == GemmScheme::kBF16 ? bf16_decode_shape(config) : w4a16_decode_shape(config);
}

// Shared memory of the W4A16 wgmma kernel with config.tokens / ctas_per_sm for E experts.
int w4a16_wgmma_smem_bytes(const GemmConfig& config, int num_experts);

namespace sm90 {

// CUTLASS grouped GEMMs, bf16 and fp8 block (cutlass/): kernel kCutlassWide / Narrow / SwapWide.
namespace cutlass_grouped {
std::size_t workspace_bytes(GemmScheme scheme, GemmKernel kernel, int num_experts);
void run(const GroupedGemmArgs& args, GemmKernel kernel);
}  // namespace cutlass_grouped

// The bf16 decode kernel (decode/sm90_bf16_decode_grouped_gemm.cu).
namespace decode {
void run_bf16(const GroupedGemmArgs& args, const GemmConfig& config);
}  // namespace decode

// The bf16 / fp8 block wgmma kernel (wgmma/).
namespace wgmma {
void run_bf16(const GroupedGemmArgs& args, const GemmConfig& config);
void run_fp8_block(const GroupedGemmArgs& args, const GemmConfig& config);
}  // namespace wgmma

// The W4A16 kernels (w4a16/): decode, mid32, large, wgmma.
namespace w4a16 {
void run(const GroupedGemmArgs& args, const GemmConfig& config);
void run_wgmma(const GroupedGemmArgs& args, const GemmConfig& config);
}  // namespace w4a16

// The W4A8 wgmma kernel (w4a8/).
namespace w4a8 {
void run(const GroupedGemmArgs& args, const GemmConfig& config);
}  // namespace w4a8

}  // namespace sm90
}  // namespace moekit::gemm
