// FusedMoEKernel: one PrepareFinalize paired with one Experts, plus the chunked runner.
//
//   auto kernel = FusedMoEKernel(make_no_ep_prepare_finalize(), make_cpu_standard_experts());
//   kernel.prepare(problem, weights);          // supports() or throw; prepare weights; workspace
//   kernel.apply(x, topk_ids, topk_weights, out);   // or kernel.apply_logits(x, router_logits,
//   out)
//
// Construction refuses pairs that disagree on the activation format or on modular vs monolithic
// (and batched pairs built for different T_max), with a message naming both. The workspace is
// owned by the kernel unless the caller passes one of workspace_bytes(problem) bytes on device().
// apply() processes M tokens in chunks of at most chunk_tokens() rows through the same fixed
// workspace; the result is bitwise identical to one unchunked call as long as no quantity depends
// on other tokens (it does for DYNAMIC per-tensor activation scales: pass static scales,
// MoeWeights::a13_scale / a2_scale, for chunk-invariant results).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/framework/experts.hpp"
#include "moekit/framework/prepare_finalize.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

// Router used by the modular path of apply_logits(): logits [M, E] -> topk_ids [M, k] i32,
// topk_weights [M, k] f32, on the kernel's device. Default: route_reference (host).
using RouterFn = std::function<void(const TensorView& logits, const TensorView& correction_bias,
                                    const RoutingConfig& config, const TensorView& topk_ids,
                                    const TensorView& topk_weights, StreamHandle stream)>;

struct FusedMoEOptions {
  // Chunk size of the runner; 0 = problem.num_tokens (one chunk per apply of up to that many).
  std::int64_t max_chunk_tokens = 0;
};

class FusedMoEKernel {
 public:
  FusedMoEKernel(std::unique_ptr<PrepareFinalize> prepare_finalize,
                 std::unique_ptr<Experts> experts, FusedMoEOptions options = {});
  ~FusedMoEKernel();
  FusedMoEKernel(FusedMoEKernel&&) noexcept;
  FusedMoEKernel& operator=(FusedMoEKernel&&) noexcept;

  std::string name() const;  // "<prepare_finalize name> + <experts name>"
  const PrepareFinalize& prepare_finalize() const { return *prepare_finalize_; }
  const Experts& experts() const { return *experts_; }
  Device device() const { return experts_->device(); }

  // Both parts' supports() for the chunk problem; the reason names the part that refused.
  Support supports(const MoeProblem& problem) const;
  // Rows per chunk for `problem`: min(problem.num_tokens, max_chunk_tokens) (>= 1).
  std::int64_t chunk_tokens(const MoeProblem& problem) const;
  // Bytes of one workspace for `problem` (all parts, one chunk, 256-byte aligned pieces).
  std::size_t workspace_bytes(const MoeProblem& problem) const;

  // supports() (throws moekit::Error with the reason) -> experts.prepare_weights -> workspace.
  // `workspace`: optional caller-owned u8 buffer of >= workspace_bytes(problem) on device().
  // Keeps a copy of `problem` and a view of weights.a13_scale (static input scale, optional;
  // equal across experts; use fold_input_scales in weights/ to check a checkpoint).
  void prepare(const MoeProblem& problem, const MoeWeights& weights,
               const TensorView& workspace = {}, StreamHandle stream = nullptr);
  bool prepared() const { return prepared_; }

  // Modular kernels: x [M, H] activation_dtype, topk_ids [M, k] i32 (global ids), topk_weights
  // [M, k] f32, output [M, H] activation_dtype. Any M >= 0 (chunked). Monolithic kernels refuse.
  void apply(const TensorView& x, const TensorView& topk_ids, const TensorView& topk_weights,
             const TensorView& output, StreamHandle stream = nullptr);
  // Any kernel: router_logits [M, E] f32/bf16 (+ correction_bias [E] f32 when the routing method
  // uses it). Modular kernels route with the router (set_router) and then run apply().
  void apply_logits(const TensorView& x, const TensorView& router_logits, const TensorView& output,
                    const TensorView& correction_bias = {}, StreamHandle stream = nullptr);
  void set_router(RouterFn router) { router_ = std::move(router); }

 private:
  struct Pieces;
  Pieces carve(void* base) const;
  void check_collective_rows(std::int64_t m) const;
  void run_modular_chunk(const TensorView& x, const TensorView& topk_ids,
                         const TensorView& topk_weights, const TensorView& output, const Pieces& ws,
                         StreamHandle stream);

  std::unique_ptr<PrepareFinalize> prepare_finalize_;
  std::unique_ptr<Experts> experts_;
  FusedMoEOptions options_;
  RouterFn router_;
  MoeProblem problem_;  // the chunk problem (num_tokens = chunk_tokens)
  TensorView a1_static_scale_;
  Buffer owned_workspace_;
  TensorView workspace_;
  bool prepared_ = false;
};

// Checks a PrepareFinalize / Experts pair without building a kernel: ok, or the reason (naming
// both) why FusedMoEKernel would refuse it.
Support check_compatible(const PrepareFinalize& prepare_finalize, const Experts& experts);

}  // namespace moekit
