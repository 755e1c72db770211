// Every rule that picks a kernel, tile or config on SM90 (H100 / H200), in one place. Each rule is
// one function with its reason and the measurement behind it (a file in bench/results/); the
// experts and ops call these once per call and hand the resolved choice to the launchers, which
// never re-decide. docs/tuning.md lists the rules and the override switches.
//
// Rules only use what the host knows before launch (E, the routed rows M * top_k, N, K, the
// device), never the routing itself: a captured CUDA graph stays valid for any routing.
#pragma once

#include <cstdint>
#include <optional>

#include "cuda/gemm/grouped_gemm.hpp"

namespace moekit::tuning::sm90 {

// ---- The grouped GEMMs of an experts call ------------------------------------------------------

// What the two GEMMs of one experts call run, and how the pieces between them are fused.
struct ExpertsPlan {
  gemm::GemmConfig gemm1, gemm2;
  // GEMM1 gathers its A rows itself (row_index) instead of a gather kernel before it.
  bool gemm1_gathers_rows = false;
  // GEMM1 runs the gated activation in its epilogue (else the activation kernel runs between the
  // GEMMs, writing GEMM2's input).
  bool gemm1_fuses_activation = false;
  // Decode sizes: the permutation in both GEMMs and the weighted reduce in GEMM2's epilogue
  // (gemm/decode_routing.hpp): two kernels for the whole experts call.
  bool fused_routing = false;
  // W4A16 wgmma: the routed rows are gathered in the wgmma K order (GEMM1 writes GEMM2's rows in
  // it too).
  bool wgmma_k_order = false;
};

// The plan of an experts call of `scheme` over E experts with `rows` routed rows (M * top_k), H,
// I, and whether the layer's GEMM1 has a bias (the fused routing does not add GEMM1 biases
// itself). weights_aligned16: the weights (and K) allow 16-byte TMA boxes (the bf16 decode ring).
ExpertsPlan experts_plan(gemm::GemmScheme scheme, int num_experts, std::int64_t rows,
                         std::int64_t hidden, std::int64_t intermediate, bool weights_aligned16);

// The kernel config one grouped GEMM of `scheme` would run for E experts and `rows` rows of N x K
// (the rules of experts_plan for a single GEMM; the kernel tests and the benchmark use it).
// gated: the GEMM runs a gated epilogue.
gemm::GemmConfig gemm_config(gemm::GemmScheme scheme, int num_experts, std::int64_t rows,
                             std::int64_t n, std::int64_t k, bool gated, bool weights_aligned16);

// The config of a given kernel for that GEMM: the rules' choices of its tile / variant (the
// kernel tests and the GEMM benchmark force each kernel through it; MOEKIT_GEMM_KERNEL likewise).
// Throws when the kernel does not run the scheme.
gemm::GemmConfig gemm_config_for(gemm::GemmScheme scheme, gemm::GemmKernel kernel,
                                 int num_experts, std::int64_t rows, std::int64_t n,
                                 std::int64_t k, bool gated, bool weights_aligned16);

// The W4A16 kernel for activations in their natural K order (the mma.sync kernels; the wgmma
// kernel needs them in its K order): the dense FP4 linear without a workspace.
gemm::GemmConfig w4a16_mma_config(int num_experts, std::int64_t rows, std::int64_t n,
                                  std::int64_t k, bool gated);

// Rows per expert that can hold rows, r = rows / min(E, rows) (uniform routing's expectation):
// what the bf16 / fp8 rules key on.
std::int64_t rows_per_holding_expert(int num_experts, std::int64_t rows);
// Rows per active expert, ceil(rows / min(E, rows)): what the 4-bit rules key on.
std::int64_t rows_per_active_expert(int num_experts, std::int64_t rows);

// Most routed rows for which the experts fuse the permutation and the reduce into the decode GEMMs
// (gemm::kDecodeRoutingMaxRows; MOEKIT_DECODE_ROUTING=<0..64> overrides it, 0: never).
int decode_routing_max_rows();

// The decode kernel's cluster split-K when the config leaves it at 0: 2 when the units leave at
// least half of the CTA slots empty and K has >= 4 chunks per K-warp, else 1. Evaluated by the
// launcher with the kernel's occupancy (cta_slots).
int decode_k_split(double units, int cta_slots, std::int64_t k, int warps_k);

// Expected units (`rows_per_unit` weight rows x `tokens` tokens x all of K) of a decode launch under
// uniform routing: m rows over E experts touch E (1 - (1 - 1/E)^m) of them.
double decode_units(int num_experts, std::int64_t rows, std::int64_t n, int tokens,
                    int rows_per_unit);

// ---- The glue kernels ----------------------------------------------------------------------------

// The permutation by expert on one block per 1024 assignments (three launches) instead of one
// block walking them all: from 3 chunks of 1024.
bool permute_multi_block(std::int64_t num_assignments);
// Threads of the single-block permutation: 128 for one chunk of <= 128 assignments, else 1024.
int permute_block_threads(std::int64_t num_assignments);
// Rows of fewer than this many vectors are gathered as a flat (row, vector) range over the grid
// rather than one CTA per row (the fp8 1x128 scales, W4A8's per-row scales).
inline constexpr std::int64_t kGatherShortRowVectors = 64;

// ---- Quantize ------------------------------------------------------------------------------------

// The FP4 quantize op on the persistent row-group kernel (else the chunk kernel) for `rows` rows.
bool fp4_quantize_rows_kernel(bool nvfp4, bool static_global_scale, std::int64_t rows, int sms,
                              int row_groups_per_cta);
// The row-group kernel's 224-thread groups (else 256) for Kb = K / 16 scale blocks.
bool fp4_quantize_rows_224(std::int64_t kb);

}  // namespace moekit::tuning::sm90
