// W4A8 grouped GEMM (moekit/gemm/w4a8.hpp): argument validation, configuration choice and launch
// of the SM90 kernel (sm90_w4a8_wgmma_gemm.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/runtime/sm90_tensor_map.hpp"
#include "moekit/core/error.hpp"
#include "sm90_w4a8_wgmma_gemm.cuh"

namespace moekit::gemm {
namespace {

using sm90_w4a8::W4A8Config;
using sm90_w4a8::W4A8Maps;
using sm90_w4a8::W4A8Params;

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
W4A8Maps w4a8_maps(const W4A8GemmArgs& args, std::int64_t lda) {
  W4A8Maps m;
  m.a = cuda::encode_tensor_map_2d("a", CU_TENSOR_MAP_DATA_TYPE_UINT8, args.a, args.k, args.m, lda,
                                   128, Cfg::kTokens, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.a_narrow = cuda::encode_tensor_map_2d(
      "a", CU_TENSOR_MAP_DATA_TYPE_UINT8, args.a, args.k, args.m, lda, 128, Cfg::kNarrow,
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
void launch(const W4A8GemmArgs& args, const W4A8Params& wp) {
  MOEKIT_CUDA_CHECK((sm90_w4a8::launch_w4a8_wgmma<Cfg, kEpi>(
      wp, w4a8_maps<Cfg>(args, wp.p.lda), args.m, args.max_ctas,
      static_cast<cudaStream_t>(args.stream))));
}

template <typename Cfg>
void dispatch(const W4A8GemmArgs& args, const W4A8Params& wp) {
  switch (args.epilogue) {
    case W4Epilogue::kNone:
      return launch<Cfg, 0>(args, wp);
    case W4Epilogue::kSiluAndMul:
      return launch<Cfg, 1>(args, wp);
    case W4Epilogue::kSwigluOai:
      return launch<Cfg, 2>(args, wp);
  }
  MOEKIT_FAIL("w4a8_grouped_gemm: epilogue: unknown value ", static_cast<int>(args.epilogue));
}

}  // namespace

bool w4a8_available() { return true; }

void w4a8_grouped_gemm(const W4A8GemmArgs& args) {
  MOEKIT_CHECK_ARG(args.num_experts > 0, "num_experts", "> 0", args.num_experts);
  MOEKIT_CHECK_ARG(args.m >= 0 && args.m < (std::int64_t{1} << 31), "m", "in [0, 2^31)", args.m);
  MOEKIT_CHECK_ARG(args.n > 0 && args.n % 16 == 0 && args.n < (std::int64_t{1} << 30), "n",
                   "a positive multiple of 16 below 2^30", args.n);
  MOEKIT_CHECK_ARG(args.k > 0 && args.k % 64 == 0 && args.k < (std::int64_t{1} << 30), "k",
                   "a positive multiple of 64 below 2^30", args.k);
  MOEKIT_CHECK_ARG(args.epilogue == W4Epilogue::kNone ||
                       args.epilogue == W4Epilogue::kSiluAndMul ||
                       args.epilogue == W4Epilogue::kSwigluOai,
                   "epilogue", "none, silu_and_mul or swiglu_oai", static_cast<int>(args.epilogue));
  const std::int64_t lda = args.lda == 0 ? args.k : args.lda;
  MOEKIT_CHECK_ARG(lda >= args.k && lda % 16 == 0, "lda", ">= k and a multiple of 16", lda);
  const bool is_gated = args.epilogue != W4Epilogue::kNone;
  const std::int64_t out_width = is_gated ? args.n / 2 : args.n;
  const std::int64_t ldo = args.ldo == 0 ? out_width : args.ldo;
  MOEKIT_CHECK_ARG(ldo >= out_width, "ldo", ">= output width " + std::to_string(out_width), ldo);
  if (args.m == 0) return;
  MOEKIT_CHECK_ARG(args.expert_offsets != nullptr || args.num_experts == 1, "expert_offsets",
                   "a device pointer (null only for num_experts == 1: dense)", "null");
  MOEKIT_CHECK_ARG(args.a != nullptr, "a", "a device pointer", "null");
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.a) % 16 == 0, "a", "16-byte aligned",
                   args.a);
  MOEKIT_CHECK_ARG(args.a_scale != nullptr, "a_scale", "a device pointer", "null");
  MOEKIT_CHECK_ARG(args.row_index == nullptr, "row_index",
                   "null (the kernel reads A's rows in order through TMA: gather them first)",
                   static_cast<const void*>(args.row_index));
  MOEKIT_CHECK_ARG(args.w != nullptr, "w", "a device pointer", "null");
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.w) % 16 == 0, "w", "16-byte aligned",
                   static_cast<const void*>(args.w));
  MOEKIT_CHECK_ARG(args.w_scales != nullptr, "w_scales", "a device pointer", "null");
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.w_scales) % 16 == 0, "w_scales",
                   "16-byte aligned", static_cast<const void*>(args.w_scales));
  MOEKIT_CHECK_ARG(args.w_row_scale != nullptr, "w_row_scale", "a device pointer", "null");
  MOEKIT_CHECK_ARG(args.out != nullptr, "out", "a device pointer", "null");
  MOEKIT_CHECK_ARG(args.max_ctas >= 0, "max_ctas", ">= 0", args.max_ctas);
  if (args.epilogue == W4Epilogue::kSwigluOai) {
    MOEKIT_CHECK_ARG(std::isfinite(args.swiglu_alpha), "swiglu_alpha", "finite", args.swiglu_alpha);
    MOEKIT_CHECK_ARG(std::isfinite(args.swiglu_limit) && args.swiglu_limit > 0.0f, "swiglu_limit",
                     "finite and > 0", args.swiglu_limit);
  }

  W4A8Params wp{};
  // p.a: the e4m3 bytes (the kernel reads them as such); no alpha.
  wp.p = sm90_w4a16::grouped_gemm_params(args, lda, ldo);
  wp.a_scale = args.a_scale;
  wp.w_row_scale = args.w_row_scale;
  const std::int64_t rows_per_expert = sm90_w4a16::rows_per_active_expert(args.m, args.num_experts);
  bool wide = rows_per_expert >= 96;
  // Measurement override: MOEKIT_W4A8_TILE=128 | 160 (the token tile).
  if (const char* env = std::getenv("MOEKIT_W4A8_TILE"); env && *env) {
    const std::string v(env);
    MOEKIT_CHECK_ARG(v == "128" || v == "160", "MOEKIT_W4A8_TILE", "128 or 160", v);
    wide = v == "160";
  }
  // The expert prefix lives in shared memory (4 bytes per expert): very many experts do not fit.
  const int max_smem = cuda::current_device_max_smem_optin();
  const int smem =
      wide ? Tile160::smem_bytes(args.num_experts) : Tile128::smem_bytes(args.num_experts);
  MOEKIT_CHECK_ARG(smem <= max_smem, "num_experts",
                   ::moekit::detail::concat("at most what fits in ", max_smem,
                                            " bytes of shared memory (this tile needs ", smem,
                                            ")"),
                   args.num_experts);
  if (wide) return dispatch<Tile160>(args, wp);
  return dispatch<Tile128>(args, wp);
}

}  // namespace moekit::gemm
