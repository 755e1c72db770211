// Launcher of the SM90 W4A16 grouped GEMM (kernel:
// sm90_w4a16_grouped_gemm.cuh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"
#include "moekit/gemm/w4a16.hpp"
#include "sm90_decode_launch.cuh"
#include "sm90_w4a16_grouped_gemm.cuh"
#include "sm90_w4a16_wgmma_gemm.cuh"

namespace moekit::gemm {
namespace {

using namespace sm90_w4a16;
using sm90_decode::DecodeConfig;
using sm90_decode::DecodeLaunch;
using sm90_decode::multiprocessors;

// Tile table, chosen by the 2026-11-29 variant sweeps (docs/kernels/w4a16.md).
// decode8 (sm90_decode_grouped_gemm.cuh; warps splitting K, tiles M/N per warp,
// ring depth, min CTAs per SM): 32 weight rows x 8 tokens, 4 warps split K and
// each streams two 16-row tiles through a 4-deep register ring across units
// (two independent MMA chains per warp; 4 CTAs per SM); used when units are
// scarce, else the 64-row Decode8Wide. decode16: 16 x 16, 2 warps split K (8
// CTAs per SM). mid32 / large (this file's kernel; warps M x N x K, tiles per
// warp, cp.async stages): 128 x 32 and 128 x 64; large reuses each dequantized
// 32-row fragment over 64 tokens (1/8 of decode's dequant per MMA); 64 tokens
// also wastes less of a tile on DeepSeek's ~128 rows per expert than 128.
using Decode8 = DecodeConfig<4, 2, 1, 4, 4>;
// decode8 with enough units: 64 rows x 8 tokens, each warp streams four 16-row
// tiles through a 2-deep ring (four independent MMA / dequant chains; v4 sweep:
// 10-25% faster than two tiles x 4 deep, slower when units are scarce).
using Decode8Wide = DecodeConfig<4, 4, 1, 2, 4>;
// Decode8Wide for a short K without an epilogue (GEMM2 of deepseek-v3 / qwen3: K = 2048 / 1536):
// 2 K-warps per 64-row unit and 8 CTAs per SM (the same 16 warps per SM), so each warp streams
// twice the items of a unit between two split-K reductions.
using Decode8WideShortK = DecodeConfig<2, 4, 1, 2, 8>;
using Decode16 = DecodeConfig<2, 1, 2, 4, 8>;
// decode16 with enough units (v5): 64 rows x 16 tokens, 4 K-warps of four
// 16-row tiles x two 8-token tiles, ring 2, 3 CTAs per SM (up to 168
// registers). Each warp reads as many activation bytes (from L2) as weight
// bytes (from HBM) per chunk (the 16 x 16 config: 4x), and dequantizes each
// weight fragment once for 16 tokens. v5 run: 17-25% faster than 16 x 16
// wherever chosen, still slower than mid32 at 16 rows/expert (Mixtral M = 64
// 481 vs 428 us) and decode8 at <= 8: kAuto does not pick decode16.
using Decode16Wide = DecodeConfig<4, 4, 2, 2, 3>;
// mid32: 128 rows x 32 tokens, 4 warps each 32 rows x 32 tokens, activations
// through shared memory (v4 sweep, Mixtral M = 64: 276 + 154 us vs decode16's
// 526 + 280 and the v3 64 x 32 x 8-warp mid32's 449 + 213).
using Mid32 = TileConfig<4, 1, 1, 2, 4, 4>;
using Large = TileConfig<4, 1, 1, 2, 8, 4>;

DecodeLaunch decode_launch(const W4A16GemmArgs& args) {
  return {"w4a16_grouped_gemm",
          args.num_experts,
          args.m,
          args.n,
          args.k,
          args.k_split,
          args.max_ctas,
          args.overlap_previous,
          static_cast<cudaStream_t>(args.stream),
          args.routing.topk_ids != nullptr};
}

// Decode tiles: sm90_decode_launch.cuh (optional cluster split-K, PDL). mid32 / large (this file's
// kernel) ignore overlap_previous: the v5 sweep measured them 5-7% slower with it (Mixtral M = 64),
// as their early CTAs only gain the launch latency.
template <typename Cfg, bool kNvfp4, int kEpi>
void launch_config(const W4A16GemmArgs& args, const Params& params) {
  if constexpr (!requires { Cfg::kWarpsM; }) {
    // The fused routing (decode sizes: kAuto picks decode8) is built for the decode8 configs only.
    constexpr bool kRoutable = !std::is_same_v<Cfg, Decode16> && !std::is_same_v<Cfg, Decode16Wide>;
    return sm90_decode::launch_decode<Cfg, sm90_decode::W4Codec<kNvfp4>, kEpi, kRoutable>(
        decode_launch(args), params);
  } else {
    auto kernel = w4a16_grouped_gemm_kernel<Cfg, kNvfp4, kEpi>;
    const int smem = Cfg::smem_bytes(args.num_experts);
    MOEKIT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    MOEKIT_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem));
    MOEKIT_CHECK(per_sm > 0, "w4a16_grouped_gemm: tile ", w4_tile_name(args.tile),
                 " does not fit on this device (shared memory ", smem, " bytes)");
    std::int64_t grid = std::min<std::int64_t>(
        grouped_units_bound(args.m, args.num_experts, args.n, Cfg::kTokens, Cfg::kRows),
        static_cast<std::int64_t>(per_sm) * multiprocessors());
    if (args.max_ctas > 0) grid = std::min<std::int64_t>(grid, args.max_ctas);
    kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem,
             static_cast<cudaStream_t>(args.stream)>>>(params);
    MOEKIT_CUDA_CHECK_LAUNCH();
  }
}

template <typename Cfg>
void dispatch_format_epilogue(const W4A16GemmArgs& args, const Params& params) {
  const bool nv = args.format == W4Format::kNVFP4;
  switch (args.epilogue) {
    case W4Epilogue::kNone:
      return nv ? launch_config<Cfg, true, 0>(args, params)
                : launch_config<Cfg, false, 0>(args, params);
    case W4Epilogue::kSiluAndMul:
      return nv ? launch_config<Cfg, true, 1>(args, params)
                : launch_config<Cfg, false, 1>(args, params);
    case W4Epilogue::kSwigluOai:
      return nv ? launch_config<Cfg, true, 2>(args, params)
                : launch_config<Cfg, false, 2>(args, params);
  }
  MOEKIT_FAIL("w4a16_grouped_gemm: epilogue: unknown value ", static_cast<int>(args.epilogue));
}

// Decode8WideShortK instead of Decode8Wide: no epilogue, K <= 2048 (at most 32 chunks, 8 per
// K-warp of Decode8Wide), and units for all of its 8-per-SM CTA slots. Measured 2026-12-01d
// (results/layer_20261201d_decode_short_k_ab.json): deepseek-v3 (K = 2048) and qwen3 (1536)
// GEMM2 1.5-4% faster per layer at M = 8 / 64; gpt-oss (K = 2880) 2% slower at M = 8, hence
// the bound. MOEKIT_DECODE_SHORT_K=0 turns it off (a tuning override for benchmarks).
bool use_short_k(const W4A16GemmArgs& args, const DecodeLaunch& l) {
  static const bool enabled = [] {
    const char* v = std::getenv("MOEKIT_DECODE_SHORT_K");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!enabled || args.epilogue != W4Epilogue::kNone || args.k / 64 > 32 || args.k_split > 1)
    return false;
  return sm90_decode::estimated_units(l, Decode8WideShortK::kTokens, Decode8WideShortK::kRows) >=
         sm90_decode::cta_slots(l, Decode8WideShortK::kMinBlocks);
}

}  // namespace

bool w4a16_available() { return true; }

W4Tile w4a16_resolve_tile(const W4A16GemmArgs& args) {
  if (args.tile != W4Tile::kAuto) return args.tile;
  // The caller chose the wgmma K order for the wgmma tile (w4a16_prefers_wgmma).
  if (args.a_order == W4KOrder::kWgmma) return W4Tile::kWgmma;
  // Measurement override of the natural-order tile: MOEKIT_W4A16_TILE=decode8 | decode16 | mid32
  // | large (with MOEKIT_W4A16_WGMMA_MIN_ROWS keeping the experts off the wgmma tile).
  static const W4Tile forced = [] {
    const char* v = std::getenv("MOEKIT_W4A16_TILE");
    if (v == nullptr || *v == '\0') return W4Tile::kAuto;
    for (W4Tile t : {W4Tile::kDecode8, W4Tile::kDecode16, W4Tile::kMid32, W4Tile::kLarge})
      if (w4_tile_name(t) == v) return t;
    MOEKIT_CHECK_ARG(false, "MOEKIT_W4A16_TILE", "decode8, decode16, mid32 or large", v);
    return W4Tile::kAuto;
  }();
  if (forced != W4Tile::kAuto) return forced;
  const std::int64_t per_expert = rows_per_active_expert(args.m, args.num_experts);
  // decode16 is not chosen: every warp reads its 16 tokens' activations from
  // L2 (4x the weight bytes), mid32 shares them through shared memory (v4).
  if (per_expert <= 8) return W4Tile::kDecode8;
  if (per_expert <= 48) return W4Tile::kMid32;
  return W4Tile::kLarge;
}

bool w4a16_prefers_wgmma(std::int64_t m, int num_experts) {
  // Measurement override: MOEKIT_W4A16_WGMMA_MIN_ROWS=<rows per expert> (0: always).
  static const std::int64_t min_rows = [] {
    const char* v = std::getenv("MOEKIT_W4A16_WGMMA_MIN_ROWS");
    if (v == nullptr || *v == '\0') return kWgmmaMinRowsPerExpert;
    char* end = nullptr;
    const long long rows = std::strtoll(v, &end, 10);
    MOEKIT_CHECK_ARG(*end == '\0' && rows >= 0, "MOEKIT_W4A16_WGMMA_MIN_ROWS",
                     "a non-negative integer", v);
    return static_cast<std::int64_t>(rows);
  }();
  return rows_per_active_expert(m, num_experts) > min_rows;
}

void w4a16_grouped_gemm(const W4A16GemmArgs& args) {
  MOEKIT_CHECK_ARG(args.num_experts > 0, "num_experts", "> 0", args.num_experts);
  MOEKIT_CHECK_ARG(args.m >= 0 && args.m < (std::int64_t{1} << 31), "m", "in [0, 2^31)", args.m);
  MOEKIT_CHECK_ARG(args.n > 0 && args.n % 16 == 0 && args.n < (std::int64_t{1} << 30), "n",
                   "a positive multiple of 16", args.n);
  MOEKIT_CHECK_ARG(args.k > 0 && args.k % 64 == 0 && args.k < (std::int64_t{1} << 30), "k",
                   "a positive multiple of 64", args.k);
  const std::int64_t lda = args.lda == 0 ? args.k : args.lda;
  MOEKIT_CHECK_ARG(lda >= args.k && lda % 8 == 0, "lda", ">= k and a multiple of 8", lda);
  const bool is_gated = args.epilogue != W4Epilogue::kNone;
  const std::int64_t out_width = is_gated ? args.n / 2 : args.n;
  const std::int64_t ldo = args.ldo == 0 ? out_width : args.ldo;
  MOEKIT_CHECK_ARG(ldo >= out_width, "ldo", ">= output width " + std::to_string(out_width), ldo);
  MOEKIT_CHECK_ARG(args.k_split >= 0 && args.k_split <= 8, "k_split", "in [0, 8]", args.k_split);
  if (args.m == 0) return;
  const bool routed = args.routing.topk_ids != nullptr;
  MOEKIT_CHECK_ARG(args.expert_offsets != nullptr || args.num_experts == 1 || routed,
                   "expert_offsets",
                   "a device pointer (null only for num_experts == 1: dense, or with "
                   "routing.topk_ids)",
                   "null");
  MOEKIT_CHECK_ARG(args.a != nullptr, "a", "a device pointer", "null");
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.a) % 16 == 0, "a", "16-byte aligned",
                   args.a);
  MOEKIT_CHECK_ARG(args.w != nullptr, "w", "a device pointer", "null");
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.w) % 16 == 0, "w", "16-byte aligned",
                   static_cast<const void*>(args.w));
  MOEKIT_CHECK_ARG(args.w_scales != nullptr, "w_scales", "a device pointer", "null");
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.w_scales) % 2 == 0, "w_scales",
                   "2-byte aligned", static_cast<const void*>(args.w_scales));
  MOEKIT_CHECK_ARG(args.out != nullptr, "out", "a device pointer", "null");
  MOEKIT_CHECK_ARG(args.max_ctas >= 0, "max_ctas", ">= 0", args.max_ctas);
  MOEKIT_CHECK_ARG(args.wgmma_tokens == 0 || sm90_w4a16::is_wgmma_token_tile(args.wgmma_tokens),
                   "wgmma_tokens", "0, 32, 128, 160 or 256", args.wgmma_tokens);

  Params params = grouped_gemm_params(args, lda, ldo);
  sm90_decode::set_decode_routing(args.routing, "w4a16_grouped_gemm", args.m, args.n,
                                  args.expert_offsets, args.row_index, !is_gated, args.out, ldo,
                                  params);

  W4A16GemmArgs resolved = args;
  resolved.tile = w4a16_resolve_tile(args);
  const bool wgmma = resolved.tile == W4Tile::kWgmma;
  MOEKIT_CHECK_ARG((args.a_order == W4KOrder::kWgmma) == wgmma, "a_order",
                   wgmma ? "wgmma (w4a16_to_wgmma_k_order) for tile wgmma"
                         : "natural for tile " + w4_tile_name(resolved.tile),
                   args.a_order == W4KOrder::kWgmma ? "wgmma" : "natural");
  MOEKIT_CHECK_ARG(args.out_order == W4KOrder::kNatural || (wgmma && out_width % 64 == 0),
                   "out_order",
                   "natural unless the tile is wgmma and the output width a multiple of 64",
                   "wgmma (tile " + w4_tile_name(resolved.tile) + ", output width " +
                       std::to_string(out_width) + ")");
  MOEKIT_CHECK_ARG(!routed || resolved.tile == W4Tile::kDecode8, "routing.topk_ids",
                   "null unless the tile is decode8", w4_tile_name(resolved.tile));
  switch (resolved.tile) {
    case W4Tile::kDecode8: {
      // Wide when its units fill at least half of the CTA slots (4 per SM).
      const DecodeLaunch l = decode_launch(resolved);
      const bool wide =
          sm90_decode::estimated_units(l, Decode8Wide::kTokens, Decode8Wide::kRows) * 2 >=
          sm90_decode::cta_slots(l, Decode8Wide::kMinBlocks);
      if (wide && use_short_k(resolved, l)) {
        return resolved.format == W4Format::kNVFP4
                   ? launch_config<Decode8WideShortK, true, 0>(resolved, params)
                   : launch_config<Decode8WideShortK, false, 0>(resolved, params);
      }
      return wide ? dispatch_format_epilogue<Decode8Wide>(resolved, params)
                  : dispatch_format_epilogue<Decode8>(resolved, params);
    }
    case W4Tile::kDecode16: {
      const DecodeLaunch l = decode_launch(resolved);
      const bool wide =
          sm90_decode::estimated_units(l, Decode16Wide::kTokens, Decode16Wide::kRows) * 2 >=
          sm90_decode::cta_slots(l, Decode16Wide::kMinBlocks);
      return wide ? dispatch_format_epilogue<Decode16Wide>(resolved, params)
                  : dispatch_format_epilogue<Decode16>(resolved, params);
    }
    case W4Tile::kMid32:
      return dispatch_format_epilogue<Mid32>(resolved, params);
    case W4Tile::kLarge:
      return dispatch_format_epilogue<Large>(resolved, params);
    case W4Tile::kWgmma:
      MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(args.w_scales) % 16 == 0, "w_scales",
                       "16-byte aligned for tile wgmma", static_cast<const void*>(args.w_scales));
      MOEKIT_CHECK_ARG(args.row_index == nullptr, "row_index",
                       "null for tile wgmma (gather the rows with w4a16_to_wgmma_k_order)",
                       static_cast<const void*>(args.row_index));
      return w4a16_wgmma_launch(resolved, params);
    case W4Tile::kAuto:
      break;
  }
  MOEKIT_FAIL("w4a16_grouped_gemm: tile: unresolved value ", static_cast<int>(resolved.tile));
}

}  // namespace moekit::gemm
