// The bf16 grouped GEMM's wgmma config (GroupedGemmConfig::kWgmma): the hand-written
// warp-specialized TMA + wgmma kernel of sm90_bf16_fp8_wgmma_grouped_gemm.cuh for many rows per
// expert, reading the weights in place ([E, N, K]); with GroupedGemmArgs::gated it runs GEMM1's
// activation (and bias) in its epilogue. Arguments arrive validated by grouped_gemm
// (sm90_bf16_fp8_block_grouped_gemm.cpp).
#include "sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "sm90_bf16_fp8_wgmma_grouped_gemm.cuh"

namespace moekit::gemm::detail {
namespace {

using sm90_wgmma::WgmmaGemmConfig;
// <fp8, token tile, m64 tiles per warpgroup, 32-wide tails>
using Tile128n = WgmmaGemmConfig<false, 128, 1, true>;
using Tile144n = WgmmaGemmConfig<false, 144, 1, true>;
using Tile160 = WgmmaGemmConfig<false, 160, 1, false>;
using Tile160r256 = WgmmaGemmConfig<false, 160, 2, false>;

}  // namespace

std::size_t bf16_wgmma_grouped_gemm_workspace_bytes(int) { return 0; }

void bf16_wgmma_grouped_gemm_run(const GroupedGemmArgs& args) {
  constexpr const char* kWhere = "grouped_gemm(bf16, wgmma)";
  const std::string tile = sm90_wgmma::wgmma_tile_name(args, false);
  if (tile == "128n") return sm90_wgmma::run_wgmma_grouped_gemm<Tile128n>(args, kWhere);
  if (tile == "144n") return sm90_wgmma::run_wgmma_grouped_gemm<Tile144n>(args, kWhere);
  if (tile == "160r256") return sm90_wgmma::run_wgmma_grouped_gemm<Tile160r256>(args, kWhere);
  return sm90_wgmma::run_wgmma_grouped_gemm<Tile160>(args, kWhere);
}

}  // namespace moekit::gemm::detail
