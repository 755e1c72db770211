// The SM90 W4A8 kernel of grouped_gemm (GemmScheme::kW4A8MXFP4; kernel sm90_w4a8_wgmma_gemm.cuh):
// its tiles, tensor maps and launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/runtime/sm90_tensor_map.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/w4a8/sm90_w4a8_wgmma_gemm.cuh"

namespace moekit::gemm {
namespace {

using sm90::w4a8::W4A8Config;
using sm90::w4a8::W4A8Maps;
using sm90::w4a8::W4A8Params;

// 128 weight rows x 128 tokens with a narrow (32-token) wgmma for an expert's short last token
// tile. No 256-token tile: the promotion keeps a second accumulator set (2 x 128 registers would
// not fit).
using Tile128 = W4A8Config<128, 8, true>;
// 160 tokens when the experts average 96 rows or more (DeepSeek-V3 / gpt-oss at 4096 tokens: 128 +-
// 11 rows, one token tile per expert instead of 128 + a short tail tile that streams the weights
// again; no narrow variant: its registers would spill). Also faster with several tiles per expert
// despite a full-width tail (H200, layer, 2026-12-01g, us, 128 / 160 tokens: Qwen3-235B 4096 tokens
// = 256 rows per expert 3491 / 3299, Mixtral 2048 = 512 rows 2921 / 2802, Mixtral 4096 = 1024 rows
// 5756 / 5437; below 96, Qwen3-235B 512 = 32 rows, 1048 / 1256).
using Tile160 = W4A8Config<160, 7, false>;

// The activations' TMA descriptors: e4m3 rows in order, boxes of 128 K x the token tile.
template <typename Cfg>
W4A8Maps w4a8_maps(const GroupedGemmArgs& args, std::int64_t lda) {
  W4A8Maps m;
  m.a = cuda::encode_tensor_map_2d("a", CU_TENSOR_MAP_DATA_TYPE_UINT8, args.a, args.k, args.rows, lda,
                                   128, Cfg::kTokens, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.a_narrow = cuda::encode_tensor_map_2d(
      "a", CU_TENSOR_MAP_DATA_TYPE_UINT8, args.a, args.k, args.rows, lda, 128, Cfg::kNarrow,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  // Items: E * N / 16 row tiles x K / 64 chunks, 512 code bytes and 32 scale bytes each.
  const std::uint64_t items =
      static_cast<std::uint64_t>(args.num_experts) * (args.n / 16) * (args.k / 64);
  MOEKIT_CHECK_ARG(items < (std::uint64_t{1} << 31), "num_experts * n * k",
                   "below 2^31 x 1024 (the weight items' TMA coordinates)", items);
  m.codes = cuda::encode_tensor_map_2d("w", CU_TENSOR_MAP_DATA_TYPE_UINT64, args.w, 64, items, 512,
                                       64, 16, CU_TENSOR_MAP_SWIZZLE_NONE,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.scales = cuda::encode_tensor_map_2d("w_scales", CU_TENSOR_MAP_DATA_TYPE_UINT8, args.w_scales,
                                        32, items, 32, 32, 16, CU_TENSOR_MAP_SWIZZLE_NONE,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  return m;
}

template <typename Cfg, int kEpi>
void launch(const GroupedGemmArgs& args, const GemmConfig& config, const W4A8Params& wp) {
  MOEKIT_CUDA_CHECK((sm90::w4a8::launch_w4a8_wgmma<Cfg, kEpi>(
      wp, w4a8_maps<Cfg>(args, wp.p.lda), args.rows, config.max_ctas,
      static_cast<cudaStream_t>(args.stream))));
}

template <typename Cfg>
void dispatch(const GroupedGemmArgs& args, const GemmConfig& config, const W4A8Params& wp) {
  switch (args.epilogue.kind) {
    case EpilogueKind::kNone:
      return launch<Cfg, 0>(args, config, wp);
    case EpilogueKind::kSiluAndMul:
      return launch<Cfg, 1>(args, config, wp);
    case EpilogueKind::kSwigluOai:
      return launch<Cfg, 2>(args, config, wp);
  }
  MOEKIT_FAIL("grouped_gemm(w4a8): epilogue: unknown value ",
              static_cast<int>(args.epilogue.kind));
}

}  // namespace

namespace sm90::w4a8 {

void run(const GroupedGemmArgs& args, const GemmConfig& config) {
  W4A8Params wp{};
  // p.a: the e4m3 bytes (the kernel reads them as such); no alpha.
  wp.p = sm90::grouped_gemm_params(args, config);
  wp.a_scale = args.a_scales;
  wp.w_row_scale = args.w_row_scale;
  const bool wide = config.tokens == 160;
  // The expert prefix lives in shared memory (4 bytes per expert): very many experts do not fit.
  const int max_smem = cuda::current_device_max_smem_optin();
  const int smem =
      wide ? Tile160::smem_bytes(args.num_experts) : Tile128::smem_bytes(args.num_experts);
  MOEKIT_CHECK_ARG(smem <= max_smem, "num_experts",
                   ::moekit::detail::concat("at most what fits in ", max_smem,
                                            " bytes of shared memory (this tile needs ", smem,
                                            ")"),
                   args.num_experts);
  if (wide) return dispatch<Tile160>(args, config, wp);
  return dispatch<Tile128>(args, config, wp);
}

}  // namespace sm90::w4a8
}  // namespace moekit::gemm
