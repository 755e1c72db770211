// Grouped expert GEMMs on SM90 (kernel-level API: raw device pointers, row strides, a stream).
//
// One grouped GEMM multiplies, for every expert e, the rows [expert_offsets[e], expert_offsets[e+1])
// of the activation matrix A by expert e's weight matrix:
//     D[r, n] = sum_k A[r, k] * B[e, n, k]                  (bf16)
//     D[r, n] = sum_kb (sum_{k in kb} qA[r, k] * qB[e, n, k]) * sA[r, kb] * sB[e, n/128, kb]
//                                                           (fp8 e4m3, DeepSeek-V3 block scales)
// A is row-major [R, K] (R = capacity rows), B is [E, N, K] (each expert's weight row-major, i.e.
// K-major: the checkpoint layout of w13 [E, 2I, H] and w2 [E, H, I]), D row-major [R, N] bf16.
// expert_offsets [E + 1] i32 lives on the device (the permutation's output); the launcher turns it
// into per-expert problem sizes and pointers with a small device kernel, so nothing is read back to
// the host: every call is asynchronous on `stream` and CUDA-graph capturable. Rows past
// expert_offsets[E] are not touched. Empty experts are allowed.
//
// Workspace: the caller owns it (grouped_gemm_workspace_bytes); it holds the per-expert argument
// arrays and the kernel's own scratch. It must not be shared by two launches in flight.
//
// Activation kernels between the two GEMMs (gated, "halves" layout: gate in columns [0, I), up in
// [I, 2I)): gated_activation_bf16 writes bf16 [R, I]; gated_activation_quant_fp8_block writes
// e4m3 [R, I] with 1x128 scales f32 [R, I/128] (s = max(amax, 1e-10) / 448, q = e4m3(x / s),
// formats.md 5), the input of the fp8 GEMM2. SiLU-and-mul or SwiGLU-OAI, with GEMM1's per-expert
// bias added to gate and up first (GatedActivationArgs). Both compute in fp32 and touch only rows
// < *num_rows (device). silu_and_mul_* are the SiLU-and-mul, bias-free calls of the two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moekit/activation/activation.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/gemm/decode_routing.hpp"

namespace moekit::gemm {

enum class GroupedGemmType : std::uint8_t {
  kBF16,         // bf16 x bf16 -> f32 accumulate -> bf16
  kFP8Block128,  // e4m3 x e4m3 with 1x128 activation / 128x128 weight fp32 scales -> bf16
};
std::string grouped_gemm_type_name(GroupedGemmType t);  // "bf16", "fp8_block"

// Kernel config (tiles) of a launch, one kernel per type each:
//   kWide      128-row tiles of the expert's rows, cooperative (bf16 128x256x64, fp8 128x128x128);
//   kNarrow    64-row tiles, ping-pong (bf16 64x128x64, fp8 64x128x128);
//   kSwapWide  swap-AB: the weights are the MMA's M side (128-row weight tiles), an expert's rows
//              its N side in tiles of 160 (cooperative; K tile bf16 64, fp8 128): all ~128 rows of
//              an expert in one tile, each weight tile read once, no 128-row padding.
//   kDecode    bf16 only, few rows per expert (decode): not CUTLASS; warps split K and stream the
//              weights once from HBM at near copy bandwidth with 16-byte loads into registers
//              (mma.sync, the weights as the MMA's M side, 8 or 16 tokens as N), partial sums added
//              in a fixed order (deterministic); reads B in place (no re-layout, no workspace).
//   kWgmma     not CUTLASS, for many rows per expert (prefill): a hand-written warp-specialized
//              TMA + wgmma swap-AB kernel (128 weight rows x 128 / 144 / 160 rows of the expert per
//              CTA, each unit's MMAs on the narrowest of 32 .. 160 columns that holds its rows,
//              both operands in shared memory, K in stages of 128 bytes, a persistent grid whose
//              stage ring runs across its units); bf16 may take `gated` (GEMM1's activation
//              in its epilogue, D [R, I]); fp8 promotes every 128 K with the block scales.
// kAuto picks from the number of experts E, max_rows and the average rows per expert that can
// hold rows, r = max_rows / min(E, max_rows) (host-known: the choice never depends on the routing,
// so a captured graph stays valid). The rule (auto_grouped_gemm_config) is set from H200
// measurements, see docs/kernels/bf16_fp8.md ("wgmma config", "Run 3", "Decode"):
//   bf16: kDecode for max_rows <= 8 when E <= 128; else kWgmma for r < 64 and 96 <= r < 256;
//         else kWide;
//   fp8:  kWgmma for r < 64; else kSwapWide for 96..255 rows per expert when E <= 16; else kWide
//         from 128 rows per expert, kNarrow below.
enum class GroupedGemmConfig : std::uint8_t { kAuto, kWide, kNarrow, kSwapWide, kDecode, kWgmma };
// "auto", "wide", "narrow", "swap_wide", "decode", "wgmma"
std::string grouped_gemm_config_name(GroupedGemmConfig c);
// The config named `name` (one of the names above); throws moekit::Error naming `what` otherwise.
GroupedGemmConfig parse_grouped_gemm_config(const std::string& name, const std::string& what);
// True when config c (not kAuto) has a kernel for type t.
bool grouped_gemm_config_built(GroupedGemmType t, GroupedGemmConfig c);
// The config kAuto resolves to for E experts and max_rows rows.
GroupedGemmConfig auto_grouped_gemm_config(GroupedGemmType t, int num_experts,
                                           std::int64_t max_rows);
GroupedGemmConfig resolve_grouped_gemm_config(GroupedGemmType t, GroupedGemmConfig c,
                                              int num_experts, std::int64_t max_rows);

// True when the kernels were compiled in (CUDA backend with CUTLASS headers).
bool grouped_gemm_available(GroupedGemmType t);

// What the activation between the GEMMs computes (cuda/activation/gated_math.cuh has the math).
struct GatedActivationArgs {
  Activation kind = Activation::kSiluAndMul;  // kSiluAndMul or kSwigluOai
  float swiglu_alpha = 1.702f, swiglu_limit = 7.0f;  // kSwigluOai
  // Optional GEMM1 bias, device f32 [E, 2I] (gate | up): row r of expert e (expert_offsets[e] <=
  // r < expert_offsets[e + 1], found on the device) gets gate + bias[e, c], up + bias[e, I + c].
  const float* bias = nullptr;
  const std::int32_t* expert_offsets = nullptr;  // device [E + 1] (required with bias)
  int num_experts = 0;                           // E (required with bias)
};

struct GroupedGemmArgs {
  int num_experts = 0;                        // E (groups)
  std::int64_t n = 0;                         // N: output columns (2I for GEMM1, H for GEMM2)
  std::int64_t k = 0;                         // K: reduction (H for GEMM1, I for GEMM2)
  std::int64_t max_rows = 0;                  // R: rows of the A / D buffers (capacity)
  const std::int32_t* expert_offsets = nullptr;  // device [E + 1], offsets[0] = 0, nondecreasing,
                                                 // offsets[E] <= R (trusted: not read on host)
  const void* a = nullptr;                    // device [R, K] bf16 or e4m3, row stride lda
  std::int64_t lda = 0;                       // elements; 0 = K
  const void* b = nullptr;                    // device [E, N, K] bf16 or e4m3, contiguous
  void* d = nullptr;                          // device [R, N] bf16, row stride ldd
  std::int64_t ldd = 0;                       // elements; 0 = N
  const float* a_scales = nullptr;            // fp8: device [R, K/128] f32 (decode scales)
  const float* b_scales = nullptr;            // fp8: device [E, ceil(N/128), K/128] f32
  void* workspace = nullptr;                  // device, grouped_gemm_workspace_bytes() bytes
  std::size_t workspace_bytes = 0;
  StreamHandle stream = nullptr;
  GroupedGemmConfig config = GroupedGemmConfig::kAuto;
  // kDecode only (the others ignore it): launch as a programmatic dependent (PDL) of the previous
  // kernel on `stream`, so that its prologue and first weight loads (plus an L2 prefetch of up to
  // 16 MB of weights) overlap that kernel's tail; every read of a and write of d waits for it. The
  // caller guarantees that the previous kernel writes neither expert_offsets nor b (e.g. GEMM1
  // after the row gather, GEMM2 after the activation; not right after the permute that writes
  // the offsets). Graph-capturable.
  bool overlap_previous = false;
  // kDecode only (a non-null value with another config is an error naming it; row_index also
  // with kWgmma, gated also with kWgmma for bf16):
  //   row_index: device [R] i32: row r of the problem reads A row row_index[r] (the unpermuted
  //     hidden states: GEMM1 gathers its rows itself), and for fp8 its a_scales row
  //     row_index[r]; null = row r. Trusted device data (as expert_offsets): every entry below
  //     the rows of a (kWgmma: and below max_rows, its tensor map's bound).
  //   gated: GEMM1 with its activation in the epilogue: N = 2I (gate | up halves, N % 16 == 0),
  //     D [R, I] (ldd 0 = I) = act(gate + bias, up + bias) per gated->kind, with gated->bias
  //     (f32 [E, 2I], optional) indexed by the row's expert; gated->expert_offsets and
  //     num_experts are not used (the GEMM knows both).
  const std::int32_t* row_index = nullptr;
  const GatedActivationArgs* gated = nullptr;
  //   routing: the permutation by expert (and, GEMM2, the weighted top-k reduce with its optional
  //     per-expert bias) fused into the launch, for at most kDecodeRoutingMaxRows rows
  //     (moekit/gemm/decode_routing.hpp); with routing.topk_ids, expert_offsets and row_index are
  //     null.
  DecodeRouting routing;
};

// Bytes of workspace (enough for every config) a launch with num_experts groups needs on the current device.
std::size_t grouped_gemm_workspace_bytes(GroupedGemmType t, int num_experts);

// Validates (throws moekit::Error naming the argument: alignment K % 8 (bf16) / K % 128 (fp8),
// N % 8, strides, null pointers, workspace size, a config not built for the type) and
// launches. Asynchronous. Every config takes the same shapes (kDecode too: N % 8, K % 8).
void grouped_gemm(GroupedGemmType t, const GroupedGemmArgs& args);

// gate_up: device bf16 [R, 2I] (row stride 2I); out: bf16 [R, I]. num_rows: device i32 scalar
// (e.g. expert_offsets + E). I % 8 == 0.
void gated_activation_bf16(const void* gate_up, void* out, std::int64_t max_rows,
                           std::int64_t intermediate, const std::int32_t* num_rows,
                           const GatedActivationArgs& act, StreamHandle stream);

// gate_up: device bf16 [R, 2I]; out_values: e4m3 [R, I]; out_scales: f32 [R, I/128]. I % 128 == 0.
void gated_activation_quant_fp8_block(const void* gate_up, void* out_values, float* out_scales,
                                      std::int64_t max_rows, std::int64_t intermediate,
                                      const std::int32_t* num_rows,
                                      const GatedActivationArgs& act, StreamHandle stream);

// gate_up: device bf16 [R, 2I] (row stride 2I); out: bf16 [R, I]. num_rows: device i32 scalar
// (e.g. expert_offsets + E). I % 8 == 0.
void silu_and_mul_bf16(const void* gate_up, void* out, std::int64_t max_rows,
                       std::int64_t intermediate, const std::int32_t* num_rows,
                       StreamHandle stream);

// gate_up: device bf16 [R, 2I]; out_values: e4m3 [R, I]; out_scales: f32 [R, I/128]. I % 128 == 0.
void silu_and_mul_quant_fp8_block(const void* gate_up, void* out_values, float* out_scales,
                                  std::int64_t max_rows, std::int64_t intermediate,
                                  const std::int32_t* num_rows, StreamHandle stream);

}  // namespace moekit::gemm
