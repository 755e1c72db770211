// CUDA Experts backends built on the SM90 grouped GEMMs (moekit/gemm/grouped_gemm.hpp):
//   cuda_bf16_grouped       W16A16: bf16 weights and activations
//   cuda_fp8_block_grouped  W8A8 e4m3, DeepSeek-V3 scales (weights 128x128, activations 1x128)
// Standard activation format, modular, ReducePolicy::kAlreadyReduced. apply() runs, all on the
// stream and graph-capturable (no host sync, no allocation):
//   permute (expert_offsets, sorted_ids, permuted_row from topk_ids; the order of permute.hpp)
//   -> (bf16 with the router weight on the input: round the prepare's f32 rows x * w to bf16)
//   -> gather rows (+ their 1x128 scales) -> GEMM1 [R, 2I] -> SiLU-and-mul (+ fp8 quantize)
//   -> GEMM2 [R, H] -> weighted top-k sum into [M, H] bf16 (unpermute_reduce's exact arithmetic).
// bf16 on the decode config: GEMM1 gathers its rows and runs the activation itself; at decode sizes
// (tokens * top_k <= decode_routing_max_rows()) both GEMMs also sort the rows by expert
// themselves and GEMM2 runs the weighted sum (gemm::DecodeRouting): two kernels, the same bits.
// The permute helpers are exposed for the benchmark and tests.
#pragma once

#include <cstdint>
#include <memory>

#include "moekit/framework/experts.hpp"
#include "moekit/gemm/grouped_gemm.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::cuda {

std::unique_ptr<ModularExperts> make_bf16_grouped_experts(const MoeProblem& problem);
std::unique_ptr<ModularExperts> make_fp8_block_grouped_experts(const MoeProblem& problem);

// Implementation shared by both backends (they differ in dtypes, scales and the act kernel).
class GroupedGemmExperts : public ModularExperts {
 public:
  GroupedGemmExperts(const MoeProblem& problem, gemm::GroupedGemmType type);
  ~GroupedGemmExperts() override;
  std::string name() const override;
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(0); }
  Support supports(const MoeProblem& problem) const override;
  WorkspaceShapes workspace_shapes(const MoeProblem& problem) const override;
  void prepare_weights(const MoeProblem& problem, const MoeWeights& weights,
                       StreamHandle stream = nullptr) override;
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }
  void apply(const DispatchedActivations& in, const TensorView& output,
             const TensorView& workspace13, const TensorView& workspace2,
             StreamHandle stream = nullptr) override;

 private:
  struct State;
  gemm::GroupedGemmType type_;
  std::unique_ptr<State> state_;
};

// Tuning override of the GEMM kernel config (benchmarks): MOEKIT_GROUPED_GEMM_CONFIG=<config> for
// both types, or per type: "bf16:<config>,fp8_block:<config>" (a type left out keeps kAuto);
// config names: grouped_gemm_config_name. kAuto when unset.
gemm::GroupedGemmConfig grouped_gemm_config_from_env(gemm::GroupedGemmType t);
// Whether the wgmma config's GEMM1 gathers its rows itself (GroupedGemmArgs::row_index, cp.async
// by two producer warps) instead of the row-gather kernel before it: by default only on the bf16
// 160r256 tile (E >= 256, >= 96 rows per expert: 256 weight rows per CTA carry the copies; H100,
// 2026-12-06, deepseek-v3 4096 tokens -5.1%; the 128 / 160-row tiles were 17-35% slower, fp8
// and bf16, docs/kernels/bf16_fp8.md "2026-12-06b"). MOEKIT_WGMMA_ROW_GATHER=0 / 1 forces either
// (A/B measurements; the bits are the same); any other value is an error naming the variable.
// from_env: wgmma_row_gather_from_env() (-1 when unset).
int wgmma_row_gather_from_env();
bool wgmma_gathers_rows(int from_env, bool fp8, int num_experts, std::int64_t rows);

namespace detail {

// Support::yes() when device 0 is an SM90 GPU; otherwise why not ("no CUDA device", the other
// architecture, or the device query's error). Shared by the SM90 experts' supports().
Support sm90_device_support();

// Workspace pieces of the CUDA experts start at 256-byte boundaries: ws_up(x) rounds a size up to
// one, ws_at(v, off) is the piece at byte offset off of workspace v.
inline std::size_t ws_up(std::size_t x) { return (x + 255) / 256 * 256; }
inline char* ws_at(const TensorView& v, std::size_t off) {
  return static_cast<char*>(v.data) + off;
}

// A host copy of t when it lives on a device; an undefined Tensor when t is already on the host
// (the caller then reads t itself). For the host-side weight preparation.
Tensor host_copy_if_device(const Tensor& t);

// A copy of the host tensor t on device 0 (the prepared weights of the CUDA experts).
Tensor to_device(const Tensor& t);

// The 4-bit expert weights of one matrix as host bytes, checked: values e2m1x2 [E, n, k/2] and
// scales `scale_dtype` [E, n, k/sfv] (linear), named "weights.<what>.values / .scales" in errors.
// codes / scales point into q itself, or into the host copies kept here when q is on a device.
struct Fp4HostWeights {
  Tensor values_copy, scales_copy;
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* scales = nullptr;
};
Fp4HostWeights fp4_host_weights(const QuantizedTensor& q, std::int64_t num_experts, std::int64_t n,
                                std::int64_t k, std::int64_t sfv, DType scale_dtype,
                                const char* what);

// The workspace shapes of the grouped experts: workspace13 ws13_bytes bytes (the backend's own
// pieces), workspace2 bf16 [M*k, ws2_cols] (GEMM1's output), output bf16 [M, H].
Experts::WorkspaceShapes grouped_workspace_shapes(const MoeProblem& p, std::size_t ws13_bytes,
                                                  std::int64_t ws2_cols);

// The apply() checks every grouped experts backend makes besides those of its activations' dtypes
// (each names the argument): the standard format, in.num_tokens in [0, p.num_tokens], topk_ids
// i32 [M, k], output bf16 [M, H], workspace13 >= ws13_bytes, workspace2 >= bf16 [M*k, ws2_cols]
// (ws2_what: its shape in words, e.g. "[M*k, I]").
void check_grouped_apply(const MoeProblem& p, const DispatchedActivations& in,
                         const TensorView& output, const TensorView& workspace13,
                         std::size_t ws13_bytes, const TensorView& workspace2,
                         std::int64_t ws2_cols, const char* ws2_what);

// Most routed rows (tokens * top_k) for which the experts fuse the permutation and the reduce into
// the decode GEMMs (gemm::DecodeRouting: two kernels instead of four, the same results): all
// that the GEMMs take (gemm::kDecodeRoutingMaxRows = 64) by default, measured faster or equal at
// 1..8 tokens on every preset (docs/kernels/w4a16.md "Fused routing"); MOEKIT_DECODE_ROUTING=
// <0..64> overrides it (0: never; a measurement override).
int decode_routing_max_rows();

// Largest expert count the permute kernel's shared-memory tables hold.
constexpr int kMaxPermuteExperts = 512;

// The layer checks every SM90 grouped experts backend (bf16, fp8 block, W4A16, W4A8) makes after
// its quant checks: bf16 input activations, SiLU / SwiGLU-OAI over gate/up halves, single rank,
// 1..kMaxPermuteExperts experts, H and I multiples of `align`, tokens * top_k below 2^31.
Support grouped_experts_layer_support(const MoeProblem& p, std::int64_t align);

// topk_ids [M, k] i32 (device) -> expert_offsets [E+1], sorted_ids [>= M*k] (rows < offsets[E]
// written), permuted_row [M, k] (-1 for ids outside [0, E)). One block, or with scratch one block
// per 1024 assignments (below); deterministic either way (the same outputs).
// sorted_tokens (optional, [>= M*k]): also the token sorted_ids[r] / top_k of each row (a GEMM's
// row_index: the gather fused into its A loads).
// scratch (optional, device, permute_scratch_bytes(num_assignments, E) bytes; 0 for small
// sizes): with it, more than 2048 assignments run on one block per 1024 of them (three launches:
// chunk counts, a scan, the scatter) instead of one block walking them all; same outputs.
void permute_by_expert(const std::int32_t* topk_ids, std::int64_t num_assignments, int num_experts,
                       std::int32_t* expert_offsets, std::int32_t* sorted_ids,
                       std::int32_t* permuted_row, StreamHandle stream, int top_k = 0,
                       std::int32_t* sorted_tokens = nullptr, void* scratch = nullptr);
std::size_t permute_scratch_bytes(std::int64_t num_assignments, int num_experts);

// out[r, :] = src[sorted_ids[r] / top_k, :] for r < min(*num_rows, max_rows) (row_bytes % 4 == 0;
// 16-byte vectors where row_bytes and both pointers allow; rows of fewer than 64 vectors, such
// as the fp8 1x128 scales, spread over the grid as (row, vector) pairs).
void gather_rows(const void* src, std::int64_t row_bytes, const std::int32_t* sorted_ids,
                 int top_k, std::int64_t max_rows, const std::int32_t* num_rows, void* out,
                 StreamHandle stream);

// The GEMM1 input rows as bf16 [M, H]: `values` itself when bf16; f32 values (bf16 activations
// with the router weight on the input: the NoEP prepare hands over x * w in f32, as the CPU one
// does) rounded to bf16 RN-even into `scratch` (bf16 [M, H], device), which is returned. The
// bf16 tensor cores take bf16 A, so this rounding (<= 2^-9 relative per element) is the only
// difference to the CPU reference's f32 GEMM1 input.
const void* round_input_rows(const TensorView& values, std::int64_t m, std::int64_t h,
                             void* scratch, StreamHandle stream);

// An expert bias of the checkpoint (f32 [E, n]) copied to the device for apply(); an empty
// tensor when the layer has no biases. Throws naming `what` unless b is f32 with E * n elements.
Tensor expert_bias_to_device(const MoeProblem& problem, const Tensor& b, std::int64_t n,
                             const char* what);

// out[t, :] (bf16 [M, H]) = sum_j RN(w[t,j] * expert_out[permuted_row[t,j], :]) in slot order.
// With bias (device f32 [E, H], GEMM2's per-expert bias; topk_ids [M, k] names slot j's expert):
// sum_j RN(w[t,j] * RN(expert_out[...] + bias[topk_ids[t,j], :])).
void weighted_reduce_bf16(const void* expert_out, const std::int32_t* permuted_row,
                          const float* topk_weights, std::int64_t num_tokens, int top_k,
                          std::int64_t hidden, void* out, StreamHandle stream,
                          const float* bias = nullptr, const std::int32_t* topk_ids = nullptr);

}  // namespace detail
}  // namespace moekit::cuda
