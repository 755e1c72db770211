// The Experts contract (architecture.md "Experts contract"). One lifecycle for every backend:
//   supports(problem) -> workspace_shapes(problem) -> prepare_weights(problem, weights) -> apply.
// Tensors are TensorViews whose device is the implementation's device(): host pointers for the CPU
// backend, raw CUDA device pointers for CUDA backends (asynchronous on `stream`; no allocation and
// no host synchronization inside apply, so a whole layer can be graph-captured).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moekit/core/tensor.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {

// Who applies the top-k weights and sums the k slots, and what the experts' output holds.
enum class ReducePolicy : std::uint8_t {
  kAlreadyReduced,    // output [M, H]: weighted and summed by the experts; finalize only combines
  kContiguous,        // output [M, k, H] unweighted, slot order; finalize weights + sums
  kBatchedPerExpert,  // output [E_local, T_max, H] unweighted; finalize gathers, weights + sums
  kDelegate,          // the format's default: kContiguous (standard) / kBatchedPerExpert (batched)
};
std::string_view reduce_policy_name(ReducePolicy p);
// kDelegate resolved for a format; other policies are returned unchanged.
ReducePolicy resolve_reduce_policy(ReducePolicy p, ActivationFormat format);

// What a modular PrepareFinalize hands to modular Experts.
//   standard: a1q.values [M, H] (bf16 / e4m3) or [M, H/2] (e2m1x2); a1q.scales per the scheme with
//             LINEAR block scales ([M, H/sfv]); a1q.global_scale [1] (NVFP4) / [M] (per token).
//   batched:  a1q.values [E_local, T_max, H(/2)], per-row scales [E_local, T_max, ...], per-tensor
//             scales / global scales [E_local] (one per expert matrix); expert_num_tokens
//             [E_local].
// Block scales are always LINEAR here: experts swizzle after their own permutation if their MMA
// needs it (swizzling interleaves rows and cannot be row-gathered).
struct DispatchedActivations {
  ActivationFormat format = ActivationFormat::kStandard;
  std::int64_t num_tokens = 0;   // M: tokens of this chunk on this rank
  QuantizedView a1q;             // activation_quant kBF16: values are the bf16/f32 hidden states
  TensorView topk_ids;           // [M, k] i32 GLOBAL expert ids
  TensorView topk_weights;       // [M, k] f32 (already folded into a1q when applied on input)
  TensorView expert_num_tokens;  // batched: [E_local] i32; absent for standard
};

// Inputs of monolithic experts (routing + experts (+ finalize) in one piece).
struct MonolithicInputs {
  std::int64_t num_tokens = 0;  // M
  QuantizedView a1q;            // [M, H] activations (as a standard modular prepare produces)
  TensorView router_logits;     // [M, E] f32 or bf16
  TensorView correction_bias;   // [E] f32 when routing_uses_bias(method); else absent
};

class Experts {
 public:
  virtual ~Experts() = default;
  virtual std::string name() const = 0;
  virtual bool is_monolithic() const = 0;
  virtual ActivationFormat activation_format() const = 0;
  virtual Device device() const = 0;
  // Batched implementations are built for max_tokens_per_rank x num_dispatchers (T_max); standard
  // ones return 0 for both.
  virtual std::int64_t max_tokens_per_rank() const { return 0; }
  virtual int num_dispatchers() const { return 0; }
  // Everything the implementation checks: device capability, quant scheme, activation, routing
  // method, shapes/alignment, parallel config. Never throws for an unsupported problem.
  virtual Support supports(const MoeProblem& problem) const = 0;
  // Two scratch buffers (phase 1/3 and phase 2, reusable across chunks) and the exact shape and
  // dtype of the expert output for problem.num_tokens tokens (per reduce_policy()).
  struct WorkspaceShapes {
    TensorSpec workspace13;
    TensorSpec workspace2;
    TensorSpec output;
  };
  virtual WorkspaceShapes workspace_shapes(const MoeProblem& problem) const = 0;
  // Converts moekit-convention weights (moe/weights.hpp; local experts only: [E_local, ...]) into
  // the backend's layout and keeps them. Called once, after supports() accepted `problem`.
  virtual void prepare_weights(const MoeProblem& problem, const MoeWeights& weights,
                               StreamHandle stream = nullptr) = 0;
  virtual ReducePolicy reduce_policy() const = 0;
};

class ModularExperts : public Experts {
 public:
  bool is_monolithic() const final { return false; }
  // in.num_tokens <= the prepared problem's num_tokens. output / workspaces are views of the
  // specs from workspace_shapes (output shape with M = in.num_tokens rows where M-shaped).
  virtual void apply(const DispatchedActivations& in, const TensorView& output,
                     const TensorView& workspace13, const TensorView& workspace2,
                     StreamHandle stream = nullptr) = 0;
};

class MonolithicExperts : public Experts {
 public:
  bool is_monolithic() const final { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }
  // output: [M, H] in the problem's activation_dtype, weighted and reduced.
  virtual void apply(const MonolithicInputs& in, const TensorView& output,
                     const TensorView& workspace13, const TensorView& workspace2,
                     StreamHandle stream = nullptr) = 0;
};

}  // namespace moekit
