// Instantiation and launch of the SM90 W4A16 wgmma kernel (GemmKernel::kWgmma for the W4A16
// schemes; kernel: sm90_w4a16_wgmma_gemm.cuh; called by grouped_gemm after validation). Separate
// translation unit: these instantiations compile in parallel with the mma.sync ones.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/runtime/sm90_tensor_map.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_wgmma_gemm.cuh"

namespace moekit::gemm {
namespace sm90::w4a16 {
namespace {

// The tiles: 128 weight rows x 32 tokens (4 stages at 3 CTAs per SM of 288 threads, 6 at 2, 12
// at 1; units of N = 8 / 16 / 32 by their rows), x 128 tokens (5 stages: 3 ahead), x 160 (4
// stages: 2 ahead), x 256 (3 stages: 1 ahead, ~220 KB). Which one runs: the tuning rule
// (cuda/tuning/sm90_tuning.cpp, with the measurements).
using Wgmma32 = WgmmaConfig<32, 12>;
using Wgmma32x2 = WgmmaConfig<32, 6, 2>;
using Wgmma32x3 = WgmmaConfig<32, 4, 3>;
using Wgmma128 = WgmmaConfig<128, 5>;
using Wgmma160 = WgmmaConfig<160, 4>;
using Wgmma256 = WgmmaConfig<256, 3>;

// The launch's TMA descriptors (WgmmaMaps): A rows in order, the codes as 8-byte elements.
template <typename Cfg>
WgmmaMaps wgmma_maps(const GroupedGemmArgs& args, const Params& params) {
  const std::uint64_t tiles = static_cast<std::uint64_t>(args.num_experts) * (args.n / 16);
  const std::uint64_t chunks = args.k / 64;
  const std::uint64_t record = args.scheme == GemmScheme::kW4A16NVFP4 ? 64 : 32;
  const std::uint64_t lda_bytes = static_cast<std::uint64_t>(params.lda) * 2;
  WgmmaMaps m;
  m.a = cuda::encode_tensor_map_2d("a", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.a, args.k, args.rows,
                                   lda_bytes, 64, Cfg::kTokens, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.a_narrow = cuda::encode_tensor_map_2d("a", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.a, args.k,
                                          args.rows, lda_bytes, 64, 8, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.codes = cuda::encode_tensor_map_2d("w", CU_TENSOR_MAP_DATA_TYPE_UINT64, args.w, chunks * 64,
                                       tiles, chunks * 512, 128, 8, CU_TENSOR_MAP_SWIZZLE_NONE,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.scales = cuda::encode_tensor_map_2d(
      "w_scales", CU_TENSOR_MAP_DATA_TYPE_UINT8, args.w_scales, chunks * record, tiles,
      chunks * record, static_cast<std::uint32_t>(2 * record), 8, CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  return m;
}

template <typename Cfg, bool kNvfp4, int kEpi>
void launch(const GroupedGemmArgs& args, const GemmConfig& config, const Params& params) {
  MOEKIT_CUDA_CHECK((launch_w4a16_wgmma<Cfg, kNvfp4, kEpi>(
      params, wgmma_maps<Cfg>(args, params), args.rows, config.max_ctas,
      cuda::current_device_multiprocessors(), static_cast<cudaStream_t>(args.stream))));
}

template <typename Cfg>
void dispatch(const GroupedGemmArgs& args, const GemmConfig& config, const Params& params) {
  // The expert prefix lives in shared memory (4 bytes per expert): very many experts do not fit.
  const int max_smem = cuda::current_device_max_smem_optin();
  const int smem = Cfg::smem_bytes(args.num_experts);
  MOEKIT_CHECK_ARG(
      smem <= max_smem, "num_experts",
      ::moekit::detail::concat("at most what fits in ", max_smem,
                               " bytes of shared memory (tile wgmma needs ", smem, ")"),
      args.num_experts);
  const bool nv = args.scheme == GemmScheme::kW4A16NVFP4;
  switch (args.epilogue.kind) {
    case EpilogueKind::kNone:
      return nv ? launch<Cfg, true, 0>(args, config, params)
                : launch<Cfg, false, 0>(args, config, params);
    case EpilogueKind::kSiluAndMul:
      return nv ? launch<Cfg, true, 1>(args, config, params)
                : launch<Cfg, false, 1>(args, config, params);
    case EpilogueKind::kSwigluOai:
      return nv ? launch<Cfg, true, 2>(args, config, params)
                : launch<Cfg, false, 2>(args, config, params);
  }
  MOEKIT_FAIL("grouped_gemm(w4a16, wgmma): epilogue: unknown value ",
              static_cast<int>(args.epilogue.kind));
}

}  // namespace

void run_wgmma(const GroupedGemmArgs& args, const GemmConfig& config) {
  const Params params = grouped_gemm_params(args, config);
  switch (config.tokens) {
    case 256: return dispatch<Wgmma256>(args, config, params);
    case 160: return dispatch<Wgmma160>(args, config, params);
    case 128: return dispatch<Wgmma128>(args, config, params);
    case 32:
      if (config.ctas_per_sm == 1) return dispatch<Wgmma32>(args, config, params);
      if (config.ctas_per_sm == 2) return dispatch<Wgmma32x2>(args, config, params);
      return dispatch<Wgmma32x3>(args, config, params);
    default: break;
  }
  MOEKIT_FAIL("grouped_gemm(w4a16, wgmma): config.tokens: unknown value ", config.tokens);
}

}  // namespace sm90::w4a16

int w4a16_wgmma_smem_bytes(const GemmConfig& c, int num_experts) {
  using namespace sm90::w4a16;
  switch (c.tokens) {
    case 256: return Wgmma256::smem_bytes(num_experts);
    case 160: return Wgmma160::smem_bytes(num_experts);
    case 128: return Wgmma128::smem_bytes(num_experts);
    default:
      return c.ctas_per_sm == 2   ? Wgmma32x2::smem_bytes(num_experts)
             : c.ctas_per_sm == 3 ? Wgmma32x3::smem_bytes(num_experts)
                                  : Wgmma32::smem_bytes(num_experts);
  }
}

}  // namespace moekit::gemm
