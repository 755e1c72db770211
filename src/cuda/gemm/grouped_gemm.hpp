// The grouped expert GEMMs on SM90: one argument struct for every scheme, one kernel config, one
// entry point. Internal (the experts and the dense FP4 linear call it; the public API is the
// framework's Experts).
//
// For every expert e, the rows [expert_offsets[e], expert_offsets[e+1]) of the activations A are
// multiplied by expert e's weight matrix W[e] ([N, K], K-major):
//     acc[r, n] = sum_k A[src(r), k] * W[e, n, k]          (dequantized / scaled per the scheme)
//     v         = acc + bias[e, n]
//     out[r, :] = epilogue(v) * row_scale[r]               (gated: N = 2I -> I columns)
// src(r) = row_index ? row_index[r] : r (the gather fused into the GEMM's A loads). Schemes:
//   kBF16        bf16 x bf16 weights [E, N, K] in place;
//   kFP8Block    e4m3 x e4m3 with DeepSeek-V3 block scales: a_scales f32 [R, K/128] (1x128),
//                w_scales f32 [E, ceil(N/128), K/128] (128x128), promoted every 128 K (formats.md
//                section 5);
//   kW4A16NVFP4  bf16 activations x NVFP4 weights dequantized to bf16 in registers (exact):
//                w / w_scales in the W4A16 layout (w4a16/sm90_w4a16_weight_shuffle.hpp),
//                w_expert_scale f32 [E] the decode global scale 1 / gs;
//   kW4A16MXFP4  the same with MXFP4 weights (e8m0 scales, no global scale);
//   kW4A8MXFP4   e4m3 activations with one decode scale per row (a_scales f32 [R]) x MXFP4 weights
//                converted exactly to e4m3 (w4a8/sm90_w4a8_weight_layout.hpp): w_row_scale f32
//                [E * N].
// Everything is asynchronous on `stream` and CUDA-graph capturable: expert_offsets and the routing
// live on the device and are never read back. Deterministic: every output element is produced by
// one CTA (or one thread-block cluster) in a fixed summation order.
//
// The kernel that runs is the caller's GemmConfig, resolved once by the tuning rules
// (cuda/tuning/sm90_tuning.hpp); grouped_gemm validates that the config has a kernel for the scheme
// and that the arguments fit it, and never re-decides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/gemm/decode_routing.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::gemm {

enum class GemmScheme : std::uint8_t { kBF16, kFP8Block, kW4A16NVFP4, kW4A16MXFP4, kW4A8MXFP4 };
std::string gemm_scheme_name(GemmScheme s);  // "bf16", "fp8_block", "w4a16_nvfp4", ...
bool is_w4a16(GemmScheme s);

// The activation fused into the epilogue. Gated kinds take N = 2I ("halves": gate rows [0, I), up
// rows [I, 2I), bias likewise) and write act(gate, up) as [R, I]:
//   kSiluAndMul  silu(g) * u
//   kSwigluOai   g' = min(g, limit), u' = clamp(u, -limit, limit), g' * sigmoid(alpha g') (u' + 1)
enum class EpilogueKind : std::uint8_t { kNone, kSiluAndMul, kSwigluOai };
struct GemmEpilogue {
  EpilogueKind kind = EpilogueKind::kNone;
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;
  const float* bias = nullptr;       // optional device f32 [E, N]
  const float* row_scale = nullptr;  // optional device f32 [R] (4-bit schemes): e.g. top-k weights
  bool gated() const { return kind != EpilogueKind::kNone; }
};

struct GroupedGemmArgs {
  GemmScheme scheme = GemmScheme::kBF16;
  int num_experts = 0;       // E
  std::int64_t rows = 0;     // R: rows of the A / out buffers (capacity); offsets[E] <= R
  std::int64_t n = 0;        // weight rows (2I for a gated GEMM1, H for GEMM2)
  std::int64_t k = 0;        // reduction
  // device [E + 1], nondecreasing, offsets[0] = 0 (trusted: not read on the host); null with
  // routing.topk_ids, or for the 4-bit schemes with E == 1 (dense: rows [0, R)).
  const std::int32_t* expert_offsets = nullptr;
  const void* a = nullptr;   // device [rows_a, K] (bf16 / e4m3), row stride lda, 16-byte aligned
  std::int64_t lda = 0;      // elements (0 = K)
  const float* a_scales = nullptr;           // kFP8Block [R, K/128]; kW4A8MXFP4 [R]
  const std::int32_t* row_index = nullptr;   // optional device [R]: source row of A per row
  const void* w = nullptr;                   // device, the weights in the scheme's layout
  const void* w_scales = nullptr;            // device, the weights' block scales (scheme layout)
  const float* w_expert_scale = nullptr;     // kW4A16NVFP4: device f32 [E] (1 / gs)
  const float* w_row_scale = nullptr;        // kW4A8MXFP4: device f32 [E * N]
  GemmEpilogue epilogue;
  void* out = nullptr;       // device bf16 [R, N] (gated: [R, N/2]), row stride ldo
  std::int64_t ldo = 0;      // elements (0 = output width)
  // The permutation (and, GEMM2, the weighted top-k reduce) fused into a decode kernel
  // (decode_routing.hpp); with routing.topk_ids, expert_offsets and row_index are null.
  DecodeRouting routing;
  // Launch as a programmatic dependent (PDL) of the previous kernel on `stream` (decode kernels;
  // the others ignore it): the prologue and first weight loads overlap that kernel's tail. The
  // caller guarantees that the previous kernel writes neither expert_offsets nor the weights.
  bool overlap_previous = false;
  void* workspace = nullptr;  // device, grouped_gemm_workspace_bytes(scheme, E) bytes
  std::size_t workspace_bytes = 0;
  StreamHandle stream = nullptr;
};

// The kernels. Which schemes each runs: gemm_kernel_runs().
enum class GemmKernel : std::uint8_t {
  kCutlassWide,      // bf16, fp8: CUTLASS cooperative, 128-row tiles of an expert's rows
  kCutlassNarrow,    // bf16, fp8: CUTLASS ping-pong, 64-row tiles
  kCutlassSwapWide,  // bf16, fp8: CUTLASS swap-AB, weights as the MMA's M, 160 rows per tile
  kDecode,           // bf16, W4A16: weight streaming for <= 16 rows per expert tile (mma.sync)
  kWgmma,            // bf16, fp8, W4A16, W4A8: warp-specialized TMA + wgmma (prefill)
  kW4Mid32,          // W4A16: mma.sync, 128 weight rows x 32 tokens through shared memory
  kW4Large,          // W4A16: mma.sync, 128 weight rows x 64 tokens
};
std::string gemm_kernel_name(GemmKernel k);  // "cutlass_wide", ..., "w4_large"
bool gemm_kernel_runs(GemmKernel k, GemmScheme s);

// The bf16 / fp8 wgmma kernel's tiles: 128 or 144 token columns keeping 32-wide tails ("n"), 160,
// and for bf16 160 with 256 weight rows per CTA.
enum class WgmmaTile : std::uint8_t { k128n, k144n, k160, k160r256 };
std::string wgmma_tile_name(WgmmaTile t);  // "128n", "144n", "160", "160r256"

// Column order of an activation matrix inside every 64-wide K chunk. kNatural: column j holds
// k = j. kWgmma: the order of the W4A16 wgmma kernel's B operand, whose MMA-k follows the weight
// shuffle (lane t of a warp holds K [16t, 16t + 16) of a chunk): stored column j of a chunk holds
//     k = 2 (8 (j / 2 % 4) + j / 8) + j % 2          (wgmma_k_source)
// so that the kernel copies A into shared memory without a permutation. The permute module's
// gather writes it (cuda/permute/permute_kernels.hpp), and a W4A16 wgmma GEMM1 writes GEMM2's rows in it.
enum class KOrder : std::uint8_t { kNatural, kWgmma };
int wgmma_k_source(int j);  // the natural k (0..63) at column j (0..63) of a kWgmma chunk

// A resolved kernel configuration: everything that picks what runs. Fields a kernel does not use
// must stay at their defaults (grouped_gemm refuses others, naming them).
struct GemmConfig {
  GemmKernel kernel = GemmKernel::kCutlassWide;
  // kWgmma, bf16 / fp8: the tile; fp8: the consumer warpgroups issue their stages in turn (else
  // in step; the same bits); every unit runs on its token class (else on the whole tile).
  WgmmaTile wgmma_tile = WgmmaTile::k160;
  bool fp8_in_turn = true;
  bool token_classes = true;
  // kWgmma, 4-bit: the token tile (W4A16 32 / 128 / 160 / 256; W4A8 128 / 160); W4A16 32: CTAs
  // per SM (1, 2 or 3).
  int tokens = 0;
  int ctas_per_sm = 0;
  // kWgmma, W4A16: A is in the wgmma K order (required); out_order: the order of the output (kWgmma
  // writes the next W4A16 wgmma GEMM's A; output width % 64 == 0).
  KOrder out_order = KOrder::kNatural;
  // kDecode: 16 tokens per unit (else 8); the wide variant (64 weight rows per unit: when units
  // fill the device); W4A16 wide without epilogue: 2 K-warps at 8 CTAs per SM for K <= 2048;
  // bf16: the weights through a TMA ring in shared memory (else 16-byte loads into registers; the
  // same bits), the ring's CTAs per SM (0: the configuration's occupancy target); split K over a
  // thread-block cluster of k_split CTAs (1..8; 0: by the units, sm90_tuning.hpp).
  bool decode16 = false;
  bool decode_wide = false;
  bool decode_short_k = false;
  bool decode_tma = true;
  int decode_tma_ctas = 0;
  int k_split = 0;
  // Cap on the persistent grid (0: fill the device); e.g. to give each CTA many units in tests.
  int max_ctas = 0;
  std::string str() const;  // "wgmma tile 160", "decode wide k_split 2", ...
};

// Bytes of workspace a launch with num_experts groups needs (enough for every kernel of the scheme).
std::size_t grouped_gemm_workspace_bytes(GemmScheme scheme, int num_experts);

// True when the build has the scheme's kernels (the CUTLASS configs need the CUTLASS headers).
bool grouped_gemm_available(GemmScheme scheme, GemmKernel kernel);

// Validates (throws moekit::Error naming the argument: alignment, strides, null pointers, the
// workspace, a config that has no kernel for the scheme) and launches. rows == 0 is a no-op.
void grouped_gemm(const GroupedGemmArgs& args, const GemmConfig& config);

}  // namespace moekit::gemm
