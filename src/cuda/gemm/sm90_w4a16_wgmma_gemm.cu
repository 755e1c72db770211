// Instantiation and launch of the SM90 W4A16 wgmma kernel (W4Tile::kWgmma;
// kernel: sm90_w4a16_wgmma_gemm.cuh; called by sm90_w4a16_grouped_gemm.cu
// after validation). Separate translation unit: these instantiations compile
// in parallel with the mma.sync ones.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"
#include "sm90_w4a16_wgmma_gemm.cuh"

namespace moekit::gemm::sm90_w4a16 {
namespace {

// 128 weight rows x 128 tokens, 8-deep weight ring, 4 activation staging
// stages (16-byte cp.async), narrower wgmma for an expert's short last token
// tile (DeepSeek-V3's ~128 rows per expert); 128 x 256 without narrow tails
// (registers) and a 4-deep weight ring (shared memory) when the experts have
// many rows (Mixtral). Sweep and numbers: docs/kernels/w4a16.md, "wgmma".
using Wgmma128 = WgmmaConfig<128, 8, 4>;
using Wgmma256 = WgmmaConfig<256, 4, 3, false>;
// Rows per active expert from which the 256-token tile runs.
constexpr std::int64_t kRowsFor256 = 384;

template <typename Cfg, bool kNvfp4, int kEpi>
void launch(const W4A16GemmArgs& args, const Params& params) {
  MOEKIT_CUDA_CHECK((launch_w4a16_wgmma<Cfg, kNvfp4, kEpi>(
      params, args.m, args.max_ctas, static_cast<cudaStream_t>(args.stream))));
}

template <typename Cfg>
void dispatch(const W4A16GemmArgs& args, const Params& params) {
  const bool nv = args.format == W4Format::kNVFP4;
  switch (args.epilogue) {
    case W4Epilogue::kNone:
      return nv ? launch<Cfg, true, 0>(args, params) : launch<Cfg, false, 0>(args, params);
    case W4Epilogue::kSiluAndMul:
      return nv ? launch<Cfg, true, 1>(args, params) : launch<Cfg, false, 1>(args, params);
    case W4Epilogue::kSwigluOai:
      return nv ? launch<Cfg, true, 2>(args, params) : launch<Cfg, false, 2>(args, params);
  }
  MOEKIT_FAIL("w4a16_grouped_gemm: epilogue: unknown value ", static_cast<int>(args.epilogue));
}

}  // namespace

bool w4a16_wgmma_runs_wide(const W4A16GemmArgs& args) {
  const std::int64_t active =
      std::max<std::int64_t>(1, std::min<std::int64_t>(args.num_experts, args.m));
  // 128 x 256 needs ~227 KB of shared memory (+ 4 bytes per expert): 128 x 128
  // where it does not fit (very many experts).
  const int max_smem = cuda::current_device_max_smem_optin();
  return (args.m + active - 1) / active >= kRowsFor256 &&
         Wgmma256::smem_bytes(args.num_experts) <= max_smem;
}

void w4a16_wgmma_launch(const W4A16GemmArgs& args, const Params& params) {
  if (w4a16_wgmma_runs_wide(args)) return dispatch<Wgmma256>(args, params);
  return dispatch<Wgmma128>(args, params);
}

}  // namespace moekit::gemm::sm90_w4a16
