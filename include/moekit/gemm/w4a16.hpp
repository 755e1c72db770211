// W4A16 grouped GEMM on SM90 (kernel-level API: raw device pointers, row strides, a stream).
//
// 4-bit weights (NVFP4: e2m1 x e4m3 per 16 along K x fp32 per-expert alpha; MXFP4: e2m1 x e8m0 per
// 32) are dequantized to bf16 in registers (e2m1 x e4m3 and e2m1 x 2^k are exact in bf16) and
// multiplied on bf16 tensor cores with fp32 accumulation. For every expert e, the rows
// [expert_offsets[e], expert_offsets[e+1]) of A are multiplied by expert e's weight [N, K]:
//     acc[r, n] = sum_k A[src(r), k] * e2m1(W[e, n, k]) * scale(W_sf[e, n, k / sfv])
//     v         = acc * alpha[e] + bias[e, n]
//     out[r, .] = epilogue(v) * row_scale[r]
// src(r) = row_index ? row_index[r] : r (a fused gather: A may be the unpermuted hidden states).
// Epilogues: kNone writes [R, N]; gated ones (N = 2I, "halves": gate rows [0, I), up rows [I, 2I)
// in the moekit convention, bias likewise) write act(gate, up) as [R, I]:
//     kSiluAndMul: silu(g) * u
//     kSwigluOai:  g' = min(g, limit), u' = clamp(u, -limit, limit),
//                  out = g' * sigmoid(alpha * g') * (u' + 1)
// Weights must first be put in the kernel's layout by w4a16_shuffle_weights (offline, host).
// Nothing is read back to the host: asynchronous on `stream`, CUDA-graph capturable, no workspace.
// Deterministic: every output element is produced by one CTA in a fixed summation order.
// Exactness limit: MXFP4 block scales outside [2^-61, 2^65] are not representable in the kernel's
// bf16 scale multiplier (real checkpoints use ~2^-10 .. 2^2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/gemm/decode_routing.hpp"

namespace moekit::gemm {

enum class W4Format : std::uint8_t { kNVFP4, kMXFP4 };
enum class W4Epilogue : std::uint8_t { kNone, kSiluAndMul, kSwigluOai };
// Kernel tile configurations (weight rows x tokens per CTA): decode8 32x8 or 64x8 (by the work
// available), decode16 16x16 or 64x16 (likewise; both warp-independent streaming), mid32 128x32,
// large 128x64 (mma.sync), wgmma 128x32, 128x128, 128x160 or 128x256 by the rows per expert
// (warpgroup MMA, sm_90a; needs w_scales 16-byte aligned, A in the wgmma K order, below, and no
// row_index). kAuto picks decode8, mid32 or large from m and num_experts for natural-order A (never
// decode16), and wgmma for wgmma-order A (the caller's choice: w4a16_prefers_wgmma).
enum class W4Tile : std::uint8_t { kAuto, kDecode8, kDecode16, kMid32, kLarge, kWgmma };

// Column order of an activation matrix inside every 64-wide K chunk. kNatural: column j holds
// k = j. kWgmma: the order of the wgmma tile's B operand, whose MMA-k follows the weight shuffle
// (lane t of a warp holds K [16t, 16t + 16) of a chunk): the 4-byte word w (two bf16) of a chunk
// holds the natural word 8 (w % 4) + w / 4, i.e. stored column j of the chunk holds
//     k = 2 (8 (j / 2 % 4) + j / 8) + j % 2          (w4a16_wgmma_k_source)
// so that the tile copies A into shared memory without a permutation. Produce it with
// w4a16_to_wgmma_k_order, or as the output of a GEMM with out_order = kWgmma.
enum class W4KOrder : std::uint8_t { kNatural, kWgmma };

std::string w4_format_name(W4Format f);  // "nvfp4", "mxfp4"
std::string w4_tile_name(W4Tile t);      // auto, decode8, decode16, mid32, large, wgmma
int w4_scale_block(W4Format f);          // 16 (NVFP4), 32 (MXFP4)
bool w4a16_available();                  // true when the SM90 kernels were compiled in
// The natural k (0..63) at column j (0..63) of a 64-wide chunk in the wgmma K order (host).
int w4a16_wgmma_k_source(int j);
// Writes rows x k bf16 (k % 64 == 0) from src (row stride lds, natural order) to dst (row stride
// ldd, wgmma K order); strides in elements (0 = k), multiples of 8, 16-byte aligned pointers,
// src and dst must not overlap. With row_index (device [rows]), dst row r is source row
// row_index[r] (the gather the wgmma tile does not do: e.g. the routed rows of a MoE layer in
// expert order); an index outside [0, src_rows) gives a zero row (e.g. the unwritten tail of a
// permutation that dropped rows). Asynchronous on stream, graph-capturable; rows == 0 is a no-op.
void w4a16_to_wgmma_k_order(const void* src, std::int64_t lds, void* dst, std::int64_t ldd,
                            std::int64_t rows, std::int64_t k, StreamHandle stream,
                            const std::int32_t* row_index = nullptr, std::int64_t src_rows = 0);

// ---- Offline weight preparation (host, pure, invertible) ----------------------------------------
// codes:  [E, N, K/2] e2m1x2 (moekit convention: low nibble = even k), row-major.
// scales: [E, N, K/sfv] linear block scales (e4m3 bytes for NVFP4, e8m0 bytes for MXFP4).
// gated:  N = 2I in "halves" order; the kernel needs gate row i and up row i in one 16-row tile.
// Outputs have the same byte counts (E*N*K/2 and E*N*K/sfv). Requires N % 16 == 0, K % 64 == 0.
void w4a16_shuffle_weights(W4Format format, std::int64_t num_experts, std::int64_t n,
                           std::int64_t k, bool gated, const std::uint8_t* codes,
                           const std::uint8_t* scales, std::uint8_t* out_codes,
                           std::uint8_t* out_scales);
// The inverse (for tests and round trips).
void w4a16_unshuffle_weights(W4Format format, std::int64_t num_experts, std::int64_t n,
                             std::int64_t k, bool gated, const std::uint8_t* shuffled_codes,
                             const std::uint8_t* shuffled_scales, std::uint8_t* codes,
                             std::uint8_t* scales);

// ---- The grouped GEMM ---------------------------------------------------------------------------
struct W4A16GemmArgs {
  W4Format format = W4Format::kNVFP4;
  W4Epilogue epilogue = W4Epilogue::kNone;
  W4Tile tile = W4Tile::kAuto;
  int num_experts = 0;  // E
  std::int64_t m = 0;   // R: rows of out / row_index; offsets[E] <= R (not read on host)
  std::int64_t n = 0;   // N: weight rows (2I for gated GEMM1, H for GEMM2); N % 16 == 0
  std::int64_t k = 0;   // K: reduction; K % 64 == 0
  // device [E + 1], nondecreasing, offsets[0] = 0; null only when E == 1 (dense: rows [0, m)).
  const std::int32_t* expert_offsets = nullptr;
  const void* a = nullptr;                       // device bf16 [rows_a, K], row stride lda
  // K order of A: kWgmma exactly for tile wgmma (kAuto then resolves to it).
  W4KOrder a_order = W4KOrder::kNatural;
  std::int64_t lda = 0;                          // elements (0 = K); lda % 8 == 0, a 16-B aligned
  // Optional device [R]: source row of A per row (not for tile wgmma, which reads A's rows in
  // order through TMA: gather them with w4a16_to_wgmma_k_order's row_index).
  const std::int32_t* row_index = nullptr;
  const std::uint8_t* w = nullptr;               // device, shuffled codes (E*N*K/2 bytes)
  const std::uint8_t* w_scales = nullptr;        // device, shuffled scales (E*N*K/sfv bytes)
  const float* alpha = nullptr;                  // optional device [E]: NVFP4 1/gs (decode scale)
  const float* bias = nullptr;                   // optional device f32 [E, N]
  const float* row_scale = nullptr;              // optional device f32 [R]: e.g. top-k weights
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
  void* out = nullptr;   // device bf16 [R, N] or [R, N/2] (gated)
  std::int64_t ldo = 0;  // elements (0 = output width)
  // Column order of out: kWgmma (tile wgmma only; output width % 64 == 0) writes it as the next
  // wgmma GEMM's A (e.g. GEMM1's activated rows for GEMM2).
  W4KOrder out_order = W4KOrder::kNatural;
  // Cap on the persistent grid; 0 = fill the device. E.g. to leave SMs to overlapped
  // communication; tests use it to give each CTA many units (the ring crossing unit boundaries).
  int max_ctas = 0;
  // Tile wgmma only: its token tile (32, 128, 160 or 256); 0 = by the rows per active expert (up
  // to 32: 32, below 96: 128, below 384: 160, else 256).
  int wgmma_tokens = 0;
  // Decode tiles only: split K over the CTAs of a thread-block cluster of this size (1..8; the
  // partial sums are added in a fixed order through distributed shared memory: deterministic, no
  // workspace). 0 = auto: split in 2 when the work units would leave at least half of the device's
  // CTA slots empty (few experts / rows, e.g. Mixtral M = 1 GEMM2); 1 = never. Ignored by mid32 /
  // large. With max_ctas, the grid is rounded down to whole clusters (at least one).
  int k_split = 0;
  // Decode tiles only (mid32 / large ignore it): launch as a programmatic dependent (PDL) of the
  // previous kernel on `stream`. The prologue, the first weight loads and an L2 prefetch of the
  // first unit's first K chunks (16 MB in all at most) run while the previous kernel finishes;
  // every read of a, row_index, alpha, bias, row_scale and every write of out waits for it. The
  // caller guarantees that the previous kernel writes neither expert_offsets nor w / w_scales
  // (e.g. GEMM2 right after GEMM1; not GEMM1 after the permute that writes the offsets).
  // Graph-capturable (stream capture records a programmatic edge). Measured (H200, v5, with a
  // GEMM1 that released its dependent at its start; a plain GEMM1 now does so only at its exit):
  // layer 1-3% faster at M = 1 / 8 / 64, 8% on Qwen3 NVFP4 M = 1. false = the v4 launch.
  bool overlap_previous = false;
  // Tile decode8 only (another tile with routing.topk_ids is an error naming it): the permutation
  // by expert (and, GEMM2, the weighted top-k reduce) fused into the launch, for at most
  // kDecodeRoutingMaxRows rows (moekit/gemm/decode_routing.hpp). With it, expert_offsets and
  // row_index are null.
  DecodeRouting routing;
  StreamHandle stream = nullptr;
};

// The tile kAuto resolves to for these arguments.
W4Tile w4a16_resolve_tile(const W4A16GemmArgs& args);
// Whether m rows over num_experts experts should run the wgmma tile (A in the wgmma K order):
// more than kWgmmaMinRowsPerExpert rows per active expert (uniform routing). Measured on the H200
// (layer, NVFP4, 2026-12-01i): from 9 rows per expert its 32-token tile beats mid32 (Mixtral 64
// tokens 334 vs 433 us, Qwen3-235B 384 tokens 617 vs 714) and its 128-token tile beats mid32 /
// large from 33 (Mixtral 192 tokens 560 vs 813, Qwen3-235B 768 1053 vs 1344); at <= 8 rows the
// decode8 tile streams the weights faster (DeepSeek-V3 64 tokens 1698 vs 1879 us for the 32-token
// tile at 2 CTAs per SM).
inline constexpr std::int64_t kWgmmaMinRowsPerExpert = 8;
bool w4a16_prefers_wgmma(std::int64_t m, int num_experts);

// Validates (throws moekit::Error naming the argument) and launches. Asynchronous. m == 0 is a
// no-op.
void w4a16_grouped_gemm(const W4A16GemmArgs& args);

}  // namespace moekit::gemm
