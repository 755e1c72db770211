// The bf16 grouped GEMM's decode config (GroupedGemmConfig::kDecode): the decode grouped GEMM
// (sm90_decode_grouped_gemm.cuh) with the bf16 codec, which reads the weights in place from the
// checkpoint layout [E, N, K] (the layout the CUTLASS configs read; no second copy). For few rows
// per expert the layer is weight-bandwidth bound: every weight byte is loaded once, by TMA into a
// per-warp shared-memory ring (Bf16TmaCodecT; or with 16-byte no-L1 loads into a register ring,
// Bf16CodecT, for unaligned weights), the few tokens' activations come from L2.
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

using sm90_decode::Bf16CodecT;
using sm90_decode::Bf16TmaCodecT;
using sm90_decode::DecodeConfig;
using sm90_decode::DecodeMaps;

// DecodeConfig<K-warps, 16-row tiles per warp, 8-token tiles, ring depth (items), min CTAs per
// SM, L2 256-byte prefetch>. One 16-row tile per warp: an item is already 2 KB of weights (16 rows
// x 128 bytes: one TMA box, or four 16-byte loads per lane), so a 4-deep ring keeps 8 KB per warp
// in flight, 128 KB per SM at 4 CTAs, several times what the HBM latency needs; more tiles per
// warp would halve the units, which are scarce at M = 1. No L2 prefetch hint: a chunk's rows are
// whole 128-byte lines already. The min CTAs per SM is also the TMA ring's cap (launch_decode).
using Decode8 = DecodeConfig<4, 1, 1, 4, 4, false>;
// 16 tokens per unit (9..16 rows per expert, e.g. Mixtral at 64 tokens): each weight fragment
// feeds two token tiles; 3 CTAs per SM leave room for the second activation ring.
using Decode16 = DecodeConfig<4, 1, 2, 4, 3, false>;
// The weights travel by TMA into a per-warp shared-memory ring (Bf16TmaCodecT) by default; the
// register ring (Bf16CodecT: 16-byte loads straight into registers) remains for weights that are
// not 16-byte aligned. H200, 2026-12-05 (docs/kernels/bf16_fp8.md "2026-12-05"), layer at 1 / 2 /
// 4 tokens, two interleaved rounds: mixtral-8x7b 176.6 / 176.4 vs 185.3 / 187.3 us, 260 vs 281,
// 491 vs 519; llama4-scout -8..-11% at 1..8 tokens; qwen3-235b-a22b and gpt-oss-120b at 1 token
// -3..-4%. Both rings give the same bits. MOEKIT_BF16_DECODE_TMA=0 / 1 forces the choice
// (measurements and tests; 1 still needs the alignment).
bool use_tma(const GroupedGemmArgs& args) {
  const bool fits = reinterpret_cast<std::uintptr_t>(args.b) % 16 == 0 && args.k % 8 == 0;
  const char* env = std::getenv("MOEKIT_BF16_DECODE_TMA");
  if (env == nullptr || *env == 0) return fits;
  const std::string v = env;
  MOEKIT_CHECK_ARG(v == "0" || v == "1", "MOEKIT_BF16_DECODE_TMA", "0 or 1", v);
  return v == "1" && fits;
}

// The weights' tensor map for Bf16TmaCodecT: [E, N, K] in boxes of 16 rows x 64 (plain) or of 8
// rows x 64 (gated).
DecodeMaps weight_maps(const GroupedGemmArgs& args) {
  // No L2 promotion: each box row is one whole 128-byte line already (measured: with the 256-byte
  // promotion the TMA ring was no faster than the register ring).
  const CUtensorMapL2promotion promo = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  const auto k = static_cast<std::uint64_t>(args.k), n = static_cast<std::uint64_t>(args.n);
  const auto e = static_cast<std::uint64_t>(args.num_experts);
  const std::uint64_t row = k * 2;
  DecodeMaps m{};
  // Gated (N = 2I): boxes of 8 rows, one of the gate half and one of the up half per item (the
  // slot layout of 389c9a0's single 5-D box, from a plain 3-D map).
  const std::uint64_t dims[3] = {k, n, e};
  const std::uint64_t strides[2] = {row, n * row};
  const std::uint32_t box[3] = {64, args.gated != nullptr ? 8u : 16u, 1};
  m.w = cuda::encode_tensor_map("b", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.b, 3, dims, strides,
                                box, CU_TENSOR_MAP_SWIZZLE_NONE, promo);
  return m;
}

// One decode launch on the TMA ring or the register ring (kGated: the gate | up row pairs).
template <typename Cfg, int kEpi, bool kGated>
void launch_ring(bool tma, const sm90_decode::DecodeLaunch& l, const sm90_w4a16::Params& p,
                 const DecodeMaps& maps) {
  using Tma = Bf16TmaCodecT<kGated, Cfg::kWarpsK, Cfg::kStages * Cfg::kTilesM>;
  if (tma)
    sm90_decode::launch_decode<Cfg, Tma, kEpi>(l, p, maps);
  else
    sm90_decode::launch_decode<Cfg, Bf16CodecT<kGated>, kEpi>(l, p);
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
    if (args.gated == nullptr)
      launch_ring<Cfg, 0, false>(tma, l, p, maps);
    else if (args.gated->kind == Activation::kSwigluOai)
      launch_ring<Cfg, 2, true>(tma, l, p, maps);
    else
      launch_ring<Cfg, 1, true>(tma, l, p, maps);
  };
  if (args.max_rows / holders <= 8)
    run(Decode8{});
  else
    run(Decode16{});
}

}  // namespace moekit::gemm::detail
