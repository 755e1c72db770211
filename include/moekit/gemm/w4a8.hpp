// W4A8 grouped GEMM on SM90 (kernel-level API: raw device pointers, row strides, a stream).
//
// MXFP4 weights (e2m1 x e8m0 per 32 along K) times e4m3 activations with one fp32 decode scale
// per activation row, on the fp8 tensor cores (wgmma e4m3 x e4m3). The weights are converted
// EXACTLY: per weight row n a reference exponent ref[n] is chosen offline so that every block's
// e2m1 * 2^(scale - ref[n]) is an e4m3 value (possible when the row's nonzero blocks span at most
// 15 binades of scale, w4a8_prepare_weights checks it), and 2^(ref[n] - 127) becomes a per-row
// fp32 factor of the epilogue. For every expert e, the rows [expert_offsets[e],
// expert_offsets[e+1]) of A are multiplied by expert e's weight [N, K]:
//     acc[r, n] = sum_k e4m3(A[r, k]) * e2m1(W[e, n, k]) * 2^(W_sf[e, n, k / 32] - 127)
//     v         = acc * a_scale[r] + bias[e, n]
//     out[r, .] = epilogue(v) * row_scale[r]
// with the epilogues of W4A16 (moekit/gemm/w4a16.hpp: none, SiLU-and-mul, SwiGLU-OAI over gate/up
// halves). A's rows are read in order by TMA (no gather: a MoE layer gathers its routed rows and
// their scales first). The weights and the e4m3 activations enter the
// MMA exactly; what rounds is the tensor core's reduced-precision accumulation of each 256-deep
// chain (promoted into fp32 after it), the fp32 epilogue and the final bf16 store.
// NVFP4 is not offered: e2m1 x e4m3 block-scale products need up to 5 significant bits (e4m3: 4).
// Nothing is read back to the host: asynchronous on `stream`, CUDA-graph capturable, no workspace.
// Deterministic: every output element is produced by one CTA in a fixed summation order.
#pragma once

#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::gemm {

bool w4a8_available();  // true when the SM90 kernels were compiled in

// ---- Offline weight preparation (host, pure) ----------------------------------------------------
// codes:  [E, N, K/2] e2m1x2 (low nibble = even k), row-major; scales: [E, N, K/32] linear e8m0.
// gated:  N = 2I in "halves" order (gate rows [0, I), up rows [I, 2I)).
// Outputs: out_codes E*N*K/2 bytes, out_scales E*N*K/32 bytes (per-block e4m3 table offsets),
// out_row_scale f32 [E*N] (2^(ref - 127), in the kernel's row order). Requires N % 16 == 0 and
// K % 64 == 0. Returns "" when the conversion is exact; otherwise the reason, naming the first
// expert (numbered from first_expert: for callers that prepare a slice) and row whose nonzero
// blocks' scales cannot share one reference exponent (a span of more than 15 binades), or that
// holds the NaN scale 0xFF; the outputs are then unspecified.
std::string w4a8_prepare_weights(std::int64_t num_experts, std::int64_t n, std::int64_t k,
                                 bool gated, const std::uint8_t* codes, const std::uint8_t* scales,
                                 std::uint8_t* out_codes, std::uint8_t* out_scales,
                                 float* out_row_scale, std::int64_t first_expert = 0);
// The inverse (tests, round trips): codes and the scales of every block that holds a nonzero code
// (an all-zero block gets scale 127, i.e. 2^0: its value is 0 whatever its scale was).
void w4a8_unprepare_weights(std::int64_t num_experts, std::int64_t n, std::int64_t k, bool gated,
                            const std::uint8_t* prepared_codes,
                            const std::uint8_t* prepared_scales, const float* row_scale,
                            std::uint8_t* codes, std::uint8_t* scales);

// ---- The grouped GEMM ---------------------------------------------------------------------------
struct W4A8GemmArgs {
  W4Epilogue epilogue = W4Epilogue::kNone;
  int num_experts = 0;  // E
  std::int64_t m = 0;   // R: rows of out / row_index; offsets[E] <= R (not read on host)
  std::int64_t n = 0;   // N: weight rows (2I for gated GEMM1, H for GEMM2); N % 16 == 0
  std::int64_t k = 0;   // K: reduction; K % 64 == 0
  // device [E + 1], nondecreasing, offsets[0] = 0; null only when E == 1 (dense: rows [0, m)).
  const std::int32_t* expert_offsets = nullptr;
  const void* a = nullptr;                  // device e4m3 [R, K] (lda), 16-byte aligned
  std::int64_t lda = 0;                     // elements = bytes (0 = K); lda % 16 == 0
  const float* a_scale = nullptr;           // device f32 [R]: decode scale of each A row
  const std::int32_t* row_index = nullptr;  // must be null (A's rows in order; see above)
  const std::uint8_t* w = nullptr;          // device, prepared codes (E*N*K/2 B), 16-B aligned
  const std::uint8_t* w_scales = nullptr;   // device, prepared scales (E*N*K/32 B), 16-B aligned
  const float* w_row_scale = nullptr;       // device, f32 [E*N] from w4a8_prepare_weights
  const float* bias = nullptr;              // optional device f32 [E, N]
  const float* row_scale = nullptr;         // optional device f32 [R]: e.g. top-k weights
  float swiglu_alpha = 1.702f;
  float swiglu_limit = 7.0f;
  void* out = nullptr;   // device bf16 [R, N] or [R, N/2] (gated)
  std::int64_t ldo = 0;  // elements (0 = output width)
  int max_ctas = 0;      // cap on the persistent grid; 0 = fill the device
  StreamHandle stream = nullptr;
};

// Validates (throws moekit::Error naming the argument) and launches. Asynchronous. m == 0 is a
// no-op.
void w4a8_grouped_gemm(const W4A8GemmArgs& args);

}  // namespace moekit::gemm
