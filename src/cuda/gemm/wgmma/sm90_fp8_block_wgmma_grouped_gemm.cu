// The fp8-block grouped GEMM's wgmma config (GemmKernel::kWgmma): the hand-written
// warp-specialized TMA + wgmma kernel of sm90_bf16_fp8_wgmma_grouped_gemm.cuh (e4m3 x e4m3,
// promotion with the 1x128 activation and 128x128 weight scales every 128 K) for many rows per
// expert, reading the weights and their scales in place. Arguments arrive validated by
// grouped_gemm (grouped_gemm.cpp).
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "cuda/gemm/wgmma/sm90_bf16_fp8_wgmma_grouped_gemm.cuh"

namespace moekit::gemm::sm90::wgmma {
namespace {

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

void run_fp8_block(const GroupedGemmArgs& args, const GemmConfig& config) {
  constexpr const char* kWhere = "grouped_gemm(fp8_block, wgmma)";
  if (config.wgmma_tile == WgmmaTile::k128n)
    return run_wgmma_grouped_gemm<Tile128n>(args, config, kWhere);
  if (config.wgmma_tile == WgmmaTile::k144n)
    return run_wgmma_grouped_gemm<Tile144n>(args, config, kWhere);
  return run_wgmma_grouped_gemm<Tile160>(args, config, kWhere);
}

}  // namespace moekit::gemm::sm90::wgmma
