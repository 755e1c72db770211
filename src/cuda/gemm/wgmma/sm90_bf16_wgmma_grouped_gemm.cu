// The bf16 grouped GEMM's wgmma config (GemmKernel::kWgmma): the hand-written
// warp-specialized TMA + wgmma kernel of sm90_bf16_fp8_wgmma_grouped_gemm.cuh for many rows per
// expert, reading the weights in place ([E, N, K]); with a gated epilogue it runs GEMM1's
// activation (and bias) itself. Arguments arrive validated by grouped_gemm
// (grouped_gemm.cpp).
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "cuda/gemm/wgmma/sm90_bf16_fp8_wgmma_grouped_gemm.cuh"

namespace moekit::gemm::sm90::wgmma {
namespace {

// <fp8, token tile, m64 tiles per warpgroup, 32-wide tails>
using Tile128n = WgmmaGemmConfig<false, 128, 1, true>;
using Tile144n = WgmmaGemmConfig<false, 144, 1, true>;
using Tile160 = WgmmaGemmConfig<false, 160, 1, false>;
using Tile160r256 = WgmmaGemmConfig<false, 160, 2, false>;

}  // namespace

void run_bf16(const GroupedGemmArgs& args, const GemmConfig& config) {
  constexpr const char* kWhere = "grouped_gemm(bf16, wgmma)";
  if (config.wgmma_tile == WgmmaTile::k128n)
    return run_wgmma_grouped_gemm<Tile128n>(args, config, kWhere);
  if (config.wgmma_tile == WgmmaTile::k144n)
    return run_wgmma_grouped_gemm<Tile144n>(args, config, kWhere);
  if (config.wgmma_tile == WgmmaTile::k160r256)
    return run_wgmma_grouped_gemm<Tile160r256>(args, config, kWhere);
  return run_wgmma_grouped_gemm<Tile160>(args, config, kWhere);
}

}  // namespace moekit::gemm::sm90::wgmma
