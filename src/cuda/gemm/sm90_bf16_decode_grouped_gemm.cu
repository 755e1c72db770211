// The bf16 grouped GEMM's decode config (GroupedGemmConfig::kDecode): the decode grouped GEMM
// (sm90_decode_grouped_gemm.cuh) with the bf16 codec, which reads the weights in place from the
// checkpoint layout [E, N, K] (the layout the CUTLASS configs read; no second copy). For few rows
// per expert the layer is weight-bandwidth bound: every weight byte is loaded once with 16-byte
// no-L1 loads straight into a register ring, the few tokens' activations come from L2.
// Arguments arrive validated by grouped_gemm (sm90_bf16_fp8_block_grouped_gemm.cpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/runtime/sm90_tensor_map.hpp"
#include "moekit/core/error.hpp"
#include "sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "sm90_bf16_grouped_params.cuh"
#include "sm90_decode_launch.cuh"

namespace moekit::gemm::detail {
namespace {

using sm90_decode::Bf16Codec;
using sm90_decode::Bf16CodecT;
using sm90_decode::Bf16TmaCodecT;
using sm90_decode::DecodeConfig;
using sm90_decode::DecodeMaps;

// DecodeConfig<K-warps, 16-row tiles per warp, 8-token tiles, ring depth (items), min CTAs per
// SM, L2 256-byte prefetch>. One 16-row tile per warp: an item is already 2 KB of weights (16 rows
// x 128 bytes, four 16-byte loads per lane), so a 4-deep ring keeps 8 KB per warp in flight, 128 KB
// per SM at 4 CTAs, several times what the HBM latency needs; more tiles per warp would halve the
// units, which are scarce at M = 1. No L2 prefetch hint: the 4 lanes of a row already read the
// whole 128-byte line of each chunk.
using Decode8 = DecodeConfig<4, 1, 1, 4, 4, false>;
// 16 tokens per unit (9..16 rows per expert, e.g. Mixtral at 64 tokens): each weight fragment
// feeds two token tiles; 3 CTAs per SM leave room for the second activation ring.
using Decode16 = DecodeConfig<4, 1, 2, 4, 3, false>;
// TMA ring, 8 items per warp (16 KB), 3 CTAs per SM.
using Decode8Deep = DecodeConfig<4, 1, 1, 8, 3, false>;
using Decode16Deep = DecodeConfig<4, 1, 2, 8, 3, false>;

// Whether the weights travel by TMA into shared memory (Bf16TmaCodecT) instead of 16-byte loads
// into registers (Bf16CodecT); MOEKIT_BF16_DECODE_TMA=0 / 1 forces it (measurements; both give
// the same bits). TMA needs 16-byte aligned weights and rows (K % 8 == 0, which the decode
// config requires anyway).
bool use_tma(const GroupedGemmArgs& args) {
  const bool fits = reinterpret_cast<std::uintptr_t>(args.b) % 16 == 0 && args.k % 8 == 0;
  const char* env = std::getenv("MOEKIT_BF16_DECODE_TMA");
  if (env == nullptr || *env == 0) return false;
  const std::string v = env;
  MOEKIT_CHECK_ARG(v == "0" || v == "1", "MOEKIT_BF16_DECODE_TMA", "0 or 1", v);
  return v == "1" && fits;
}

// The weights' tensor map for Bf16TmaCodecT: [E, N, K] in boxes of 16 rows x 64 (plain), or
// (gated, N = 2I) rows 8 rt.. of the gate half over the same rows of the up half.
DecodeMaps weight_maps(const GroupedGemmArgs& args) {
  CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  if (const char* v = std::getenv("MOEKIT_BF16_DECODE_TMA_L2"); v && *v)
    promo = std::string(v) == "0"     ? CU_TENSOR_MAP_L2_PROMOTION_NONE
            : std::string(v) == "64"  ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
            : std::string(v) == "128" ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                      : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  const auto k = static_cast<std::uint64_t>(args.k), n = static_cast<std::uint64_t>(args.n);
  const auto e = static_cast<std::uint64_t>(args.num_experts);
  const std::uint64_t row = k * 2;
  DecodeMaps m{};
  if (args.gated != nullptr) {
    const std::uint64_t dims[5] = {k, 8, 2, n / 16, e};
    const std::uint64_t strides[4] = {row, (n / 2) * row, 8 * row, n * row};
    const std::uint32_t box[5] = {64, 8, 2, 1, 1};
    m.w = cuda::encode_tensor_map("b", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.b, 5, dims, strides,
                                  box, CU_TENSOR_MAP_SWIZZLE_NONE, promo);
  } else {
    const std::uint64_t dims[3] = {k, n, e};
    const std::uint64_t strides[2] = {row, n * row};
    const std::uint32_t box[3] = {64, 16, 1};
    m.w = cuda::encode_tensor_map("b", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.b, 3, dims, strides,
                                  box, CU_TENSOR_MAP_SWIZZLE_NONE, promo);
  }
  return m;
}

}  // namespace

std::size_t bf16_decode_grouped_gemm_workspace_bytes(int) { return 0; }

void bf16_decode_grouped_gemm_run(const GroupedGemmArgs& args) {
  sm90_w4a16::Params p = sm90_w4a16::grouped_gemm_output_params(args);
  p.a = static_cast<const __nv_bfloat16*>(args.a);
  p.lda = args.lda;
  p.w = static_cast<const std::uint8_t*>(args.b);
  p.row_index = args.row_index;
  sm90_decode::set_decode_routing(args.routing, "grouped_gemm(bf16, decode)", args.max_rows, args.n,
                                  args.expert_offsets, args.row_index, args.gated == nullptr,
                                  args.d, args.ldd, p);
  const sm90_decode::DecodeLaunch l{"grouped_gemm(bf16, decode)",
                                    args.num_experts,
                                    args.max_rows,
                                    args.n,
                                    args.k,
                                    0,
                                    0,
                                    args.overlap_previous,
                                    static_cast<cudaStream_t>(args.stream),
                                    args.routing.topk_ids != nullptr};
  // Rows per expert that can hold rows (host-known, as for kAuto): 8-token units up to 8.
  const std::int64_t holders =
      std::max<std::int64_t>(1, std::min<std::int64_t>(args.num_experts, args.max_rows));
  // kEpi: 0 plain, 1 SiLU-and-mul, 2 SwiGLU-OAI (gated: the gate | up row pairs of Bf16CodecT).
  const bool tma = use_tma(args);
  const DecodeMaps maps = tma ? weight_maps(args) : DecodeMaps{};
  auto run = [&](auto cfg_tag) {
    using Cfg = decltype(cfg_tag);
    constexpr int kSlots = Cfg::kStages * Cfg::kTilesM;
    using Plain = Bf16TmaCodecT<false, Cfg::kWarpsK, kSlots>;
    using Gated = Bf16TmaCodecT<true, Cfg::kWarpsK, kSlots>;
    if (args.gated == nullptr) {
      if (tma)
        sm90_decode::launch_decode<Cfg, Plain, 0>(l, p, maps);
      else
        sm90_decode::launch_decode<Cfg, Bf16Codec, 0>(l, p);
    } else if (args.gated->kind == Activation::kSwigluOai) {
      if (tma)
        sm90_decode::launch_decode<Cfg, Gated, 2>(l, p, maps);
      else
        sm90_decode::launch_decode<Cfg, Bf16CodecT<true>, 2>(l, p);
    } else {
      if (tma)
        sm90_decode::launch_decode<Cfg, Gated, 1>(l, p, maps);
      else
        sm90_decode::launch_decode<Cfg, Bf16CodecT<true>, 1>(l, p);
    }
  };
  const char* deep_env = std::getenv("MOEKIT_BF16_DECODE_TMA_STAGES");
  const bool deep = tma && deep_env && std::string(deep_env) == "8";
  if (args.max_rows / holders <= 8) {
    if (deep)
      run(Decode8Deep{});
    else
      run(Decode8{});
  } else {
    if (deep)
      run(Decode16Deep{});
    else
      run(Decode16{});
  }
}

}  // namespace moekit::gemm::detail
