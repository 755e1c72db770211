// The PrepareFinalize contract: prepare = quantize (per problem.activation_quant) + dispatch into
// the activation format; finalize = top-k weighting + reduction (per the experts' ReducePolicy) +
// combine across ranks. One object because both halves share the communication handle.
#pragma once

#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/framework/experts.hpp"
#include "moekit/framework/problem.hpp"

namespace moekit {

class PrepareFinalize {
 public:
  virtual ~PrepareFinalize() = default;
  virtual std::string name() const = 0;
  virtual bool is_monolithic() const = 0;
  virtual ActivationFormat activation_format() const = 0;
  virtual Device device() const = 0;
  virtual std::int64_t max_tokens_per_rank() const { return 0; }  // batched: see Experts
  virtual int num_dispatchers() const { return 0; }
  virtual Support supports(const MoeProblem& problem) const = 0;
  // Called once by FusedMoEKernel::prepare, after supports() accepted the (chunk) problem.
  // Expert-parallel implementations are collective here: every rank must call it (they check
  // that all ranks prepared the same problem and agree on who owns which expert).
  virtual void setup(const MoeProblem& problem, StreamHandle stream = nullptr) {}
  // The problem the paired Experts see: tokens after dispatch (an expert-parallel rank computes
  // the tokens of every rank) and the same layer. Default: the chunk problem itself.
  virtual MoeProblem experts_problem(const MoeProblem& chunk) const { return chunk; }
  // True when prepare/finalize are collectives across ranks: every rank must then call apply()
  // once per step with at most problem.num_tokens rows (one chunk), even with no tokens.
  virtual bool collective() const { return false; }
  // Scratch for prepare+finalize of problem.num_tokens tokens (quantized activations, dispatch
  // maps); it must stay untouched between prepare and the matching finalize.
  virtual TensorSpec workspace_shape(const MoeProblem& problem) const = 0;
};

class ModularPrepareFinalize : public PrepareFinalize {
 public:
  bool is_monolithic() const final { return false; }
  // x [M, H] (problem.activation_dtype), topk_ids [M, k] i32, topk_weights [M, k] f32.
  // a1_static_scale: optional [1] f32 static per-tensor activation scale (formats.md: ENCODE global
  // scale for NVFP4, DECODE scale for FP8 per-tensor), else scales are dynamic.
  // The returned views point into `workspace` (or at x / topk when passed through).
  virtual DispatchedActivations prepare(const MoeProblem& problem, const TensorView& x,
                                        const TensorView& topk_ids, const TensorView& topk_weights,
                                        const TensorView& a1_static_scale,
                                        const TensorView& workspace,
                                        StreamHandle stream = nullptr) = 0;
  // expert_output: the experts' output view for `policy` (after resolve_reduce_policy).
  // output: [M, H] problem.activation_dtype.
  virtual void finalize(const MoeProblem& problem, const TensorView& expert_output,
                        ReducePolicy policy, const DispatchedActivations& dispatched,
                        const TensorView& output, const TensorView& workspace,
                        StreamHandle stream = nullptr) = 0;
  // True when finalize under `policy` does nothing but copy an expert output of the output's
  // dtype and shape into `output` (no combine, no reduction). FusedMoEKernel then hands the
  // experts `output` itself as their output and skips finalize (one copy less per layer).
  virtual bool finalize_is_copy(ReducePolicy policy) const { return false; }
};

class MonolithicPrepareFinalize : public PrepareFinalize {
 public:
  bool is_monolithic() const final { return true; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  // Quantizes x and passes router logits through (all-gathered under data parallel).
  virtual MonolithicInputs prepare(const MoeProblem& problem, const TensorView& x,
                                   const TensorView& router_logits,
                                   const TensorView& correction_bias,
                                   const TensorView& a1_static_scale, const TensorView& workspace,
                                   StreamHandle stream = nullptr) = 0;
  // expert_output [M, H] already reduced -> output [M, H] (combine across ranks).
  virtual void finalize(const MoeProblem& problem, const TensorView& expert_output,
                        const TensorView& output, const TensorView& workspace,
                        StreamHandle stream = nullptr) = 0;
};

}  // namespace moekit
