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

#include "sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "sm90_bf16_grouped_params.cuh"
#include "sm90_decode_launch.cuh"

namespace moekit::gemm::detail {
namespace {

using sm90_decode::Bf16Codec;
using sm90_decode::Bf16CodecT;
using sm90_decode::DecodeConfig;

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
  auto run = [&](auto cfg_tag) {
    using Cfg = decltype(cfg_tag);
    if (args.gated == nullptr)
      sm90_decode::launch_decode<Cfg, Bf16Codec, 0>(l, p);
    else if (args.gated->kind == Activation::kSwigluOai)
      sm90_decode::launch_decode<Cfg, Bf16CodecT<true>, 2>(l, p);
    else
      sm90_decode::launch_decode<Cfg, Bf16CodecT<true>, 1>(l, p);
  };
  if (args.max_rows / holders <= 8)
    run(Decode8{});
  else
    run(Decode16{});
}

}  // namespace moekit::gemm::detail
