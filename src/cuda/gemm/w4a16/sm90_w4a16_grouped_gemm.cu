// The SM90 W4A16 mma.sync kernels of grouped_gemm: the decode kernel (decode/, with the W4 codec)
// and the mid32 / large tiles (sm90_w4a16_grouped_gemm.cuh). The wgmma kernel is
// sm90_w4a16_wgmma_gemm.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "cuda/gemm/decode/sm90_decode_launch.cuh"
#include "cuda/gemm/w4a16/sm90_w4a16_grouped_gemm.cuh"

namespace moekit::gemm {
namespace {

using namespace sm90;
using namespace sm90::w4a16;
using sm90::decode::DecodeConfig;
using sm90::decode::DecodeLaunch;
using sm90::decode::multiprocessors;

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
// 481 vs 428 us) and decode8 at <= 8: the tuning rules never pick decode16.
using Decode16Wide = DecodeConfig<4, 4, 2, 2, 3>;
// mid32: 128 rows x 32 tokens, 4 warps each 32 rows x 32 tokens, activations
// through shared memory (v4 sweep, Mixtral M = 64: 276 + 154 us vs decode16's
// 526 + 280 and the v3 64 x 32 x 8-warp mid32's 449 + 213).
using Mid32 = TileConfig<4, 1, 1, 2, 4, 4>;
using Large = TileConfig<4, 1, 1, 2, 8, 4>;

// Shapes of the decode variants for the tuning rules (grouped_gemm_launchers.hpp).
template <typename Cfg>
constexpr DecodeShape shape_of() {
  return {Cfg::kRows, Cfg::kTokens, Cfg::kMinBlocks, Cfg::kWarpsK};
}

DecodeLaunch decode_launch(const GroupedGemmArgs& args, const GemmConfig& config) {
  return {"grouped_gemm(w4a16, decode)",
          args.num_experts,
          args.rows,
          args.n,
          args.k,
          config.k_split,
          config.max_ctas,
          args.overlap_previous,
          static_cast<cudaStream_t>(args.stream),
          args.routing.topk_ids != nullptr};
}

// Decode tiles: sm90_decode_launch.cuh (optional cluster split-K, PDL). mid32 / large (this file's
// kernel) ignore overlap_previous: the v5 sweep measured them 5-7% slower with it (Mixtral M = 64),
// as their early CTAs only gain the launch latency.
template <typename Cfg, bool kNvfp4, int kEpi>
void launch_config(const GroupedGemmArgs& args, const GemmConfig& config, const Params& params) {
  if constexpr (!requires { Cfg::kWarpsM; }) {
    // The fused routing (8 tokens per unit) is built for the decode8 configs only.
    constexpr bool kRoutable = !std::is_same_v<Cfg, Decode16> && !std::is_same_v<Cfg, Decode16Wide>;
    return sm90::decode::launch_decode<Cfg, sm90::decode::W4Codec<kNvfp4>, kEpi, kRoutable>(
        decode_launch(args, config), params);
  } else {
    auto kernel = w4a16_grouped_gemm_kernel<Cfg, kNvfp4, kEpi>;
    const int smem = Cfg::smem_bytes(args.num_experts);
    MOEKIT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int per_sm = 0;
    MOEKIT_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem));
    MOEKIT_CHECK(per_sm > 0, "grouped_gemm(w4a16): kernel ", config.str(),
                 " does not fit on this device (shared memory ", smem, " bytes)");
    std::int64_t grid = std::min<std::int64_t>(
        grouped_units_bound(args.rows, args.num_experts, args.n, Cfg::kTokens, Cfg::kRows),
        static_cast<std::int64_t>(per_sm) * multiprocessors());
    if (config.max_ctas > 0) grid = std::min<std::int64_t>(grid, config.max_ctas);
    kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem,
             static_cast<cudaStream_t>(args.stream)>>>(params);
    MOEKIT_CUDA_CHECK_LAUNCH();
  }
}

template <typename Cfg>
void dispatch_format_epilogue(const GroupedGemmArgs& args, const GemmConfig& config,
                              const Params& params) {
  const bool nv = args.scheme == GemmScheme::kW4A16NVFP4;
  switch (args.epilogue.kind) {
    case EpilogueKind::kNone:
      return nv ? launch_config<Cfg, true, 0>(args, config, params)
                : launch_config<Cfg, false, 0>(args, config, params);
    case EpilogueKind::kSiluAndMul:
      return nv ? launch_config<Cfg, true, 1>(args, config, params)
                : launch_config<Cfg, false, 1>(args, config, params);
    case EpilogueKind::kSwigluOai:
      return nv ? launch_config<Cfg, true, 2>(args, config, params)
                : launch_config<Cfg, false, 2>(args, config, params);
  }
  MOEKIT_FAIL("grouped_gemm(w4a16): epilogue: unknown value ",
              static_cast<int>(args.epilogue.kind));
}

}  // namespace

DecodeShape w4a16_decode_shape(const GemmConfig& c) {
  if (c.decode16) return c.decode_wide ? shape_of<Decode16Wide>() : shape_of<Decode16>();
  if (!c.decode_wide) return shape_of<Decode8>();
  return c.decode_short_k ? shape_of<Decode8WideShortK>() : shape_of<Decode8Wide>();
}

namespace sm90::w4a16 {

void run(const GroupedGemmArgs& args, const GemmConfig& config) {
  Params params = grouped_gemm_params(args, config);
  sm90::decode::set_decode_routing(args.routing, "grouped_gemm(w4a16)", args.rows, args.n,
                                   args.expert_offsets, args.row_index, !args.epilogue.gated(),
                                   args.out, args.ldo, params);
  switch (config.kernel) {
    case GemmKernel::kDecode:
      if (config.decode16)
        return config.decode_wide ? dispatch_format_epilogue<Decode16Wide>(args, config, params)
                                  : dispatch_format_epilogue<Decode16>(args, config, params);
      if (config.decode_short_k) {
        MOEKIT_CHECK_ARG(config.decode_wide && !args.epilogue.gated() && args.k / 64 <= 32,
                         "config.decode_short_k",
                         "only with decode_wide, no epilogue and K <= 2048", "true");
        return args.scheme == GemmScheme::kW4A16NVFP4
                   ? launch_config<Decode8WideShortK, true, 0>(args, config, params)
                   : launch_config<Decode8WideShortK, false, 0>(args, config, params);
      }
      return config.decode_wide ? dispatch_format_epilogue<Decode8Wide>(args, config, params)
                                : dispatch_format_epilogue<Decode8>(args, config, params);
    case GemmKernel::kW4Mid32:
      return dispatch_format_epilogue<Mid32>(args, config, params);
    case GemmKernel::kW4Large:
      return dispatch_format_epilogue<Large>(args, config, params);
    default:
      break;
  }
  MOEKIT_FAIL("grouped_gemm(w4a16): kernel ", config.str(), " is not an mma.sync kernel");
}

}  // namespace sm90::w4a16
}  // namespace moekit::gemm
