// The problem descriptor every framework part (PrepareFinalize, Experts, the oracle) sees: token
// count, layer shape, quantization of weights and activations, parallel layout. Separate from
// kernel configs (tiles, stages), which stay with each backend. Printable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moekit/core/tensor.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit {

// How dispatched activations are laid out for the experts (architecture.md "Activation formats").
//   kStandard: activations [M, K] (+ scales [M, ...]), topk_ids [M, k]; experts permute internally.
//   kBatched:  activations [E_local, T_max, K] (+ scales [E_local, T_max, ...]) and
//              expert_num_tokens i32 [E_local]; T_max = max_tokens_per_rank * num_dispatchers.
enum class ActivationFormat : std::uint8_t { kStandard, kBatched };
std::string_view activation_format_name(ActivationFormat f);  // "standard", "batched"

// Expert / data parallel layout of one rank.
struct ParallelConfig {
  int ep_size = 1;  // ranks the experts are split over
  int ep_rank = 0;
  int dp_size = 1;  // data-parallel ranks whose tokens are dispatched to the experts
  // [E_global] i32 values: global expert -> local expert on this rank, -1 = not here. Empty means
  // the identity (every expert local). With ep_size > 1 it must be given (see expert_parallel()).
  std::vector<std::int32_t> expert_map;
  // Low-latency expert-parallel dispatch (DeepEP-LL style): forces the batched format.
  bool low_latency_dispatch = false;

  // Contiguous split: rank r owns experts [r*E/ep, (r+1)*E/ep) (E % ep_size == 0).
  static ParallelConfig expert_parallel(int num_experts, int ep_size, int ep_rank, int dp_size = 1);
  int num_local_experts(int num_experts) const;  // E when expert_map is empty
  // The global id of each local expert, in local order (0..E-1 when expert_map is empty).
  std::vector<int> local_experts(int num_experts) const;
  ActivationFormat activation_format() const;    // kBatched iff low_latency_dispatch
  bool is_identity() const;                      // single rank, all experts local
  void validate(int num_experts) const;          // throws moekit::Error naming the field
  std::string str() const;
};

// One MoE layer invocation. num_tokens is the most tokens one apply() (one chunk) handles;
// workspace sizes are derived from it.
struct MoeProblem {
  std::int64_t num_tokens = 0;   // M on this rank (per chunk)
  MoeLayerConfig layer;          // E, H, I, routing (incl. top-k), activation, biases
  QuantConfig weight_quant;      // kBF16, kFP8PerTensor, kFP8Block128x128, kNVFP4, kMXFP4
  QuantConfig activation_quant;  // GEMM inputs: kBF16 (= W*A16), FP8 variants, MXFP8, NVFP4
  DType activation_dtype = DType::kBF16;  // hidden states x and the output [M, H]: bf16 or f32
  ParallelConfig parallel;

  int num_experts() const { return layer.num_experts; }
  int num_local_experts() const { return parallel.num_local_experts(layer.num_experts); }
  int top_k() const { return layer.routing.top_k; }
  std::int64_t hidden_size() const { return layer.hidden_size; }
  std::int64_t intermediate_size() const { return layer.intermediate_size; }
  // Llama4 routing scales the input by the (top-1) router weight instead of the output.
  bool apply_router_weight_on_input() const;
  // "w4a16_nvfp4", "w8a8_fp8_block", "w16a16_bf16", ... (oracle tables, messages).
  std::string quant_name() const;
  void validate() const;  // layer, quant pairs, parallel config; throws moekit::Error
  std::string str() const;
};

// Whether an implementation accepts a problem; `reason` says why not (empty when ok).
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// A buffer an implementation needs, by dtype and shape (exact; callers may own the memory).
struct TensorSpec {
  DType dtype = DType::kU8;
  Shape shape;  // rank 0 with numel 1 would be a scalar: use Shape{0} for "nothing"
  std::size_t nbytes() const { return static_cast<std::size_t>(shape.numel()) * dtype_size(dtype); }
  std::string str() const;
  // A view over `base` with this spec (contiguous).
  TensorView view(void* base, Device device) const { return {base, dtype, shape, device}; }
};

}  // namespace moekit
