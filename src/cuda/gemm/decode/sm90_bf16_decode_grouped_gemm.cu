// The bf16 grouped GEMM's decode config (GemmKernel::kDecode for bf16): the decode grouped GEMM
// (sm90_decode_grouped_gemm.cuh) with the bf16 codec, which reads the weights in place from the
// checkpoint layout [E, N, K] (the layout the CUTLASS configs read; no second copy). For few rows
// per expert the layer is weight-bandwidth bound: every weight byte is loaded once, by TMA into a
// per-warp shared-memory ring (Bf16TmaCodecT; or with 16-byte no-L1 loads into a register ring,
// Bf16CodecT, for unaligned weights), the few tokens' activations come from L2.
// Arguments arrive validated by grouped_gemm (grouped_gemm.cpp).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/sm90_tensor_map.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "cuda/gemm/decode/sm90_decode_launch.cuh"

namespace moekit::gemm {
namespace {

using sm90::decode::Bf16CodecT;
using sm90::decode::Bf16TmaCodecT;
using sm90::decode::DecodeConfig;
using sm90::decode::DecodeMaps;

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
// The weights travel by TMA into a per-warp shared-memory ring (Bf16TmaCodecT; GemmConfig::
// decode_tma), or with 16-byte loads into a register ring (Bf16CodecT: for weights that are not
// 16-byte aligned); both give the same bits (the rule and its measurement: cuda/tuning/).

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
  const std::uint32_t box[3] = {64, args.epilogue.gated() ? 8u : 16u, 1};
  m.w = cuda::encode_tensor_map("w", CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args.w, 3, dims, strides,
                                box, CU_TENSOR_MAP_SWIZZLE_NONE, promo);
  return m;
}

// One decode launch on the TMA ring or the register ring (kGated: the gate | up row pairs).
template <typename Cfg, int kEpi, bool kGated>
void launch_ring(bool tma, const sm90::decode::DecodeLaunch& l, const sm90::Params& p,
                 const DecodeMaps& maps) {
  using Tma = Bf16TmaCodecT<kGated, Cfg::kWarpsK, Cfg::kStages * Cfg::kTilesM>;
  if (tma)
    sm90::decode::launch_decode<Cfg, Tma, kEpi>(l, p, maps);
  else
    sm90::decode::launch_decode<Cfg, Bf16CodecT<kGated>, kEpi>(l, p);
}

template <typename Cfg>
constexpr DecodeShape shape_of() {
  return {Cfg::kRows, Cfg::kTokens, Cfg::kMinBlocks, Cfg::kWarpsK};
}

}  // namespace

DecodeShape bf16_decode_shape(const GemmConfig& c) {
  return c.decode16 ? shape_of<Decode16>() : shape_of<Decode8>();
}

namespace sm90::decode {

void run_bf16(const GroupedGemmArgs& args, const GemmConfig& config) {
  constexpr const char* kWhere = "grouped_gemm(bf16, decode)";
  sm90::Params p = sm90::grouped_gemm_output_params(args);
  p.a = static_cast<const __nv_bfloat16*>(args.a);
  p.lda = args.lda;
  p.w = static_cast<const std::uint8_t*>(args.w);
  p.row_index = args.row_index;
  set_decode_routing(args.routing, kWhere, args.rows, args.n, args.expert_offsets, args.row_index,
                     !args.epilogue.gated(), args.out, args.ldo, p);
  DecodeLaunch l{kWhere,
                 args.num_experts,
                 args.rows,
                 args.n,
                 args.k,
                 config.k_split,
                 config.max_ctas,
                 args.overlap_previous,
                 static_cast<cudaStream_t>(args.stream),
                 args.routing.topk_ids != nullptr};
  l.tma_ctas = config.decode_tma_ctas;
  const bool tma = config.decode_tma;
  if (tma)
    MOEKIT_CHECK_ARG(args.k % 8 == 0, "config.decode_tma",
                     "false unless K % 8 == 0 (16-byte weight rows for the TMA boxes)", "true");
  const DecodeMaps maps = tma ? weight_maps(args) : DecodeMaps{};
  // kEpi: 0 plain, 1 SiLU-and-mul, 2 SwiGLU-OAI (gated: the gate | up row pairs of the codecs).
  auto run = [&](auto cfg_tag) {
    using Cfg = decltype(cfg_tag);
    if (!args.epilogue.gated())
      launch_ring<Cfg, 0, false>(tma, l, p, maps);
    else if (args.epilogue.kind == EpilogueKind::kSwigluOai)
      launch_ring<Cfg, 2, true>(tma, l, p, maps);
    else
      launch_ring<Cfg, 1, true>(tma, l, p, maps);
  };
  if (config.decode16)
    run(Decode16{});
  else
    run(Decode8{});
}

}  // namespace sm90::decode
}  // namespace moekit::gemm
