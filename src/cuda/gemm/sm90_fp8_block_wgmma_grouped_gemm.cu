// The fp8-block grouped GEMM's wgmma config (GroupedGemmConfig::kWgmma): the hand-written
// warp-specialized TMA + wgmma kernel of sm90_bf16_fp8_wgmma_grouped_gemm.cuh (e4m3 x e4m3,
// promotion with the 1x128 activation and 128x128 weight scales every 128 K) for many rows per
// expert, reading the weights and their scales in place. Arguments arrive validated by
// grouped_gemm (sm90_bf16_fp8_block_grouped_gemm.cpp).
#include "sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "sm90_bf16_fp8_wgmma_grouped_gemm.cuh"

namespace moekit::gemm::detail {
namespace {

using sm90_wgmma::WgmmaGemmConfig;
// <fp8, token tile, m64 tiles per warpgroup, 32-wide tails>
using Tile128n = WgmmaGemmConfig<true, 128, 1, true>;
using Tile144n = WgmmaGemmConfig<true, 144, 1, true>;
using Tile160 = WgmmaGemmConfig<true, 160, 1, false>;
// The ring depths (the scale products live in slots of their own past the ring: with them in the
// stage slot the 160 tile had 5 stages); and every tile fits next to the largest expert prefix.
static_assert(Tile128n::kStages == 6 && Tile144n::kStages == 6 && Tile160::kStages == 6,
              "fp8 wgmma ring depths");
static_assert(Tile160::smem_bytes(512) <= 227 * 1024 && Tile144n::smem_bytes(512) <= 227 * 1024 &&
                  Tile128n::smem_bytes(512) <= 227 * 1024,
              "fp8 wgmma shared memory");

}  // namespace

std::size_t fp8_block_wgmma_grouped_gemm_workspace_bytes(int) { return 0; }

void fp8_block_wgmma_grouped_gemm_run(const GroupedGemmArgs& args) {
  constexpr const char* kWhere = "grouped_gemm(fp8_block, wgmma)";
  const std::string tile = sm90_wgmma::wgmma_tile_name(args, true);
  if (tile == "128n") return sm90_wgmma::run_wgmma_grouped_gemm<Tile128n>(args, kWhere);
  if (tile == "144n") return sm90_wgmma::run_wgmma_grouped_gemm<Tile144n>(args, kWhere);
  return sm90_wgmma::run_wgmma_grouped_gemm<Tile160>(args, kWhere);
}

}  // namespace moekit::gemm::detail
