// Instantiation and launch of the SM90 W4A16 wgmma kernel (W4Tile::kWgmma; kernel:
// sm90_w4a16_wgmma_gemm.cuh; called by sm90_w4a16_grouped_gemm.cu after validation), and the
// wgmma K order conversion of activations (w4a16_to_wgmma_k_order). Separate translation unit:
// these instantiations compile in parallel with the mma.sync ones.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/runtime/sm90_tensor_map.hpp"
#include "moekit/core/error.hpp"
#include "sm90_w4a16_wgmma_gemm.cuh"

namespace moekit::gemm {
namespace sm90_w4a16 {
namespace {

// 128 weight rows x 32 tokens up to 32 rows per expert (4 stages, 3 CTAs per SM of 288 threads,
// or 6 stages at 2 CTAs with at most 8 experts and 24 rows per expert; units of N = 8 / 16 / 32
// by their rows), x 128 tokens (5 stages: 3 ahead) below 96, x 160 tokens
// (4 stages: 2 ahead) from 96 (DeepSeek-V3 / gpt-oss at 4096 tokens: 128 +- 11 rows fit one token
// tile), x 256 tokens (3 stages: 1 ahead, ~220 KB) from 384 (Mixtral at 4096 tokens: 1024). One
// CTA per SM. Measured with v3 on the H200, layer, NVFP4, 2026-12-01g (us, 128 / 160 / 256):
// DeepSeek-V3 2048 tokens (64 rows per expert) 5849 / 6598 / 9364, 4096 (128) 9467 / 7625 /
// 10537; Qwen3-235B 2048 (128) 2145 / 1649 / 2251, 4096 (256) 3497 / 3360 / 3631; Mixtral 4096
// (1024) 6997 / - / 5907. The 32-token tile (2026-12-01i, layer, NVFP4, us, 1 / 2 / 3 CTAs per
// SM against the previous mid32 mma.sync tile): Mixtral 64 tokens (16 rows per expert) 382 /
// 331 / 334 against 433, 128 (32) 442 / 454 / 437 against 522; Qwen3-235B 384 (24) 666 / 636 /
// 617 against 714; DeepSeek-V3 512 (16) 2878 / 2529 / 2452 against 3016. From 33 rows the
// 128-token tile (Mixtral 192 tokens = 48 rows 554 against 704 for the 32-token one).
using Wgmma32 = WgmmaConfig<32, 12>;
using Wgmma32x2 = WgmmaConfig<32, 6, 2>;
using Wgmma32x3 = WgmmaConfig<32, 4, 3>;
using Wgmma128 = WgmmaConfig<128, 5>;
using Wgmma160 = WgmmaConfig<160, 4>;
using Wgmma256 = WgmmaConfig<256, 3>;
constexpr std::int64_t kRowsFor256 = 384;
constexpr std::int64_t kRowsFor32 = 32;
// The 32-token tile at 2 CTAs per SM: at most kFewExperts experts and kFewExpertsMaxRows rows per
// expert (w4a16_wgmma_launch).
constexpr int kFewExperts = 8;
constexpr std::int64_t kFewExpertsMaxRows = 24;

// The launch's TMA descriptors (WgmmaMaps): A rows in order, the codes as 8-byte elements.
template <typename Cfg>
WgmmaMaps wgmma_maps(const W4A16GemmArgs& args, const Params& params) {
  const std::uint64_t tiles = static_cast<std::uint64_t>(args.num_experts) * (args.n / 16);
  const std::uint64_t chunks = args.k / 64;
  const std::uint64_t record = args.format == W4Format::kNVFP4 ? 64 : 32;
  const std::uint64_t lda_bytes = static_cast<std::uint64_t>(params.lda) * 2;
  WgmmaMaps m;
  m.a = cuda::encode_tensor_map_2d("a", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.a, args.k, args.m,
                                   lda_bytes, 64, Cfg::kTokens, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.a_narrow = cuda::encode_tensor_map_2d("a", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.a, args.k,
                                          args.m, lda_bytes, 64, 8, CU_TENSOR_MAP_SWIZZLE_128B,
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
void launch(const W4A16GemmArgs& args, const Params& params) {
  MOEKIT_CUDA_CHECK((launch_w4a16_wgmma<Cfg, kNvfp4, kEpi>(
      params, wgmma_maps<Cfg>(args, params), args.m, args.max_ctas,
      cuda::current_device_multiprocessors(), static_cast<cudaStream_t>(args.stream))));
}

template <typename Cfg>
void dispatch(const W4A16GemmArgs& args, const Params& params) {
  // The expert prefix lives in shared memory (4 bytes per expert): very many experts do not fit.
  const int max_smem = cuda::current_device_max_smem_optin();
  const int smem = Cfg::smem_bytes(args.num_experts);
  MOEKIT_CHECK_ARG(
      smem <= max_smem, "num_experts",
      ::moekit::detail::concat("at most what fits in ", max_smem,
                               " bytes of shared memory (tile wgmma needs ", smem, ")"),
      args.num_experts);
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

// Output piece p (16 bytes) of a 64-wide chunk = natural words p, p + 8, p + 16, p + 24 of source
// row row_index[r] (r without row_index); zeros for a source row outside [0, src_rows).
__global__ void to_wgmma_k_order_kernel(const std::uint32_t* __restrict__ src, std::int64_t lds,
                                        uint4* __restrict__ dst, std::int64_t ldd,
                                        std::int64_t rows, int chunks,
                                        const std::int32_t* __restrict__ row_index,
                                        std::int64_t src_rows) {
  const std::int64_t pieces = static_cast<std::int64_t>(chunks) * 8;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * pieces) return;
  const std::int64_t r = i / pieces;
  const int c = static_cast<int>(i % pieces) / 8, q = static_cast<int>(i % 8);
  const std::int64_t sr = row_index ? row_index[r] : r;
  if (sr < 0 || sr >= src_rows) {
    dst[r * ldd + c * 8 + q] = make_uint4(0, 0, 0, 0);
    return;
  }
  const std::uint32_t* s = src + sr * lds + c * 32 + q;
  dst[r * ldd + c * 8 + q] = make_uint4(s[0], s[8], s[16], s[24]);
}

}  // namespace

void w4a16_wgmma_launch(const W4A16GemmArgs& args, const Params& params) {
  const std::int64_t rows_per_expert = rows_per_active_expert(args.m, args.num_experts);
  int tokens = rows_per_expert >= kRowsFor256  ? 256
               : rows_per_expert >= 96         ? 160
               : rows_per_expert <= kRowsFor32 ? 32
                                               : 128;
  if (args.wgmma_tokens != 0) tokens = args.wgmma_tokens;
  // The 256-token tile's shared memory grows with the experts (4 bytes each): 128 where it does
  // not fit.
  if (tokens == 256 &&
      Wgmma256::smem_bytes(args.num_experts) > cuda::current_device_max_smem_optin())
    tokens = 128;
  // Measurement override: MOEKIT_W4A16_WGMMA_TILE=32 | 128 | 160 | 256 (the token tile).
  if (const char* env = std::getenv("MOEKIT_W4A16_WGMMA_TILE"); env && *env) {
    const std::string v(env);
    // Exactly the decimal spelling of a token tile (no sign, no leading zero).
    const bool digits =
        v.size() <= 3 && v[0] != '0' && v.find_first_not_of("0123456789") == std::string::npos;
    MOEKIT_CHECK_ARG(digits && is_wgmma_token_tile(std::stoi(v)), "MOEKIT_W4A16_WGMMA_TILE",
                     "32, 128, 160 or 256", v);
    tokens = std::stoi(v);
  }
  if (tokens == 256) return dispatch<Wgmma256>(args, params);
  if (tokens == 160) return dispatch<Wgmma160>(args, params);
  if (tokens == 32) {
    // CTAs per SM: 2 (6 stages each) with few experts and at most 24 rows per expert, else 3.
    // Measured (H200, 2026-12-03, bench/results/layer_20261203_w4a16_wgmma32_ctas_ab.json): 2
    // CTAs on mixtral (E 8) at 10..24 rows per expert 1-14% faster, at 32 rows 1-4% slower; on
    // E 128 / 256 (qwen3, gpt-oss, deepseek-v3) 0-6% slower at every row count. E 9..127 and
    // 25..31 rows were not measured: they keep 3.
    // Measurement override: MOEKIT_W4A16_WGMMA_CTAS=1 | 2 | 3.
    static const int forced_ctas = [] {
      const char* v = std::getenv("MOEKIT_W4A16_WGMMA_CTAS");
      if (v == nullptr || *v == '\0') return 0;
      const std::string s(v);
      MOEKIT_CHECK_ARG(s == "1" || s == "2" || s == "3", "MOEKIT_W4A16_WGMMA_CTAS", "1, 2 or 3", s);
      return std::stoi(s);
    }();
    const bool few = args.num_experts <= kFewExperts && rows_per_expert <= kFewExpertsMaxRows;
    const int ctas = forced_ctas != 0 ? forced_ctas : few ? 2 : 3;
    if (ctas == 1) return dispatch<Wgmma32>(args, params);
    if (ctas == 2) return dispatch<Wgmma32x2>(args, params);
    return dispatch<Wgmma32x3>(args, params);
  }
  return dispatch<Wgmma128>(args, params);
}

}  // namespace sm90_w4a16

void w4a16_to_wgmma_k_order(const void* src, std::int64_t lds, void* dst, std::int64_t ldd,
                            std::int64_t rows, std::int64_t k, StreamHandle stream,
                            const std::int32_t* row_index, std::int64_t src_rows) {
  MOEKIT_CHECK_ARG(rows >= 0 && rows < (std::int64_t{1} << 31), "rows", "in [0, 2^31)", rows);
  MOEKIT_CHECK_ARG(k > 0 && k % 64 == 0 && k < (std::int64_t{1} << 30), "k",
                   "a positive multiple of 64", k);
  lds = lds == 0 ? k : lds;
  ldd = ldd == 0 ? k : ldd;
  MOEKIT_CHECK_ARG(lds >= k && lds % 8 == 0, "lds", ">= k and a multiple of 8", lds);
  MOEKIT_CHECK_ARG(ldd >= k && ldd % 8 == 0, "ldd", ">= k and a multiple of 8", ldd);
  if (rows == 0) return;
  MOEKIT_CHECK_ARG(src != nullptr && reinterpret_cast<std::uintptr_t>(src) % 16 == 0, "src",
                   "a 16-byte aligned device pointer", src);
  MOEKIT_CHECK_ARG(dst != nullptr && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0, "dst",
                   "a 16-byte aligned device pointer", dst);
  if (row_index != nullptr)
    MOEKIT_CHECK_ARG(src_rows > 0 && src_rows < (std::int64_t{1} << 31), "src_rows",
                     "the rows of src (> 0) with row_index", src_rows);
  const std::int64_t n_src = row_index ? src_rows : rows;
  const auto* s = static_cast<const char*>(src);
  const auto* d = static_cast<const char*>(dst);
  const std::int64_t src_end = ((n_src - 1) * lds + k) * 2, dst_end = ((rows - 1) * ldd + k) * 2;
  MOEKIT_CHECK_ARG(s + src_end <= d || d + dst_end <= s, "dst", "not overlapping src", dst);
  const int chunks = static_cast<int>(k / 64);
  const std::int64_t threads = rows * chunks * 8;
  constexpr int kBlock = 256;
  sm90_w4a16::to_wgmma_k_order_kernel<<<static_cast<unsigned>((threads + kBlock - 1) / kBlock),
                                        kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const std::uint32_t*>(src), lds / 2, static_cast<uint4*>(dst), ldd / 8, rows,
      chunks, row_index, n_src);
  MOEKIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moekit::gemm
