// CPU NoEP PrepareFinalize (standard format): quantize the input per the scheme (linear block
// scales), pass tokens and routing through; finalize = weight + reduce per the experts' policy.
// expert_map is honoured in finalize (non-local slots contribute nothing), so the same object
// serves a rank of a naive EP setup whose tokens are already replicated.
#include <string>

#include "cpu/prepare_finalize/cpu_prepare_common.hpp"
#include "moekit/core/error.hpp"
#include "moekit/framework/cpu.hpp"

namespace moekit {
namespace {

class CpuNoEpPrepareFinalize final : public ModularPrepareFinalize {
 public:
  std::string name() const override { return "cpu_no_ep"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::host(); }

  Support supports(const MoeProblem& problem) const override {
    return cpu::cpu_prepare_supports(problem);
  }

  TensorSpec workspace_shape(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    layout(c, problem,
           TensorView(nullptr, problem.activation_dtype,
                      Shape{problem.num_tokens, problem.hidden_size()}),
           {}, {}, false);
    c.take(DType::kI32, Shape{problem.num_tokens, problem.top_k()});
    return c.spec();
  }

  DispatchedActivations prepare(const MoeProblem& problem, const TensorView& x,
                                const TensorView& topk_ids, const TensorView& topk_weights,
                                const TensorView& a1_static_scale, const TensorView& workspace,
                                StreamHandle) override {
    detail::ByteCarver c(workspace);
    DispatchedActivations d;
    d.format = ActivationFormat::kStandard;
    d.num_tokens = x.size(0);
    d.a1q = layout(c, problem, x, topk_weights, a1_static_scale, true);
    d.topk_ids = topk_ids;
    d.topk_weights = topk_weights;
    return d;
  }

  bool finalize_is_copy(ReducePolicy policy) const override {
    return policy == ReducePolicy::kAlreadyReduced;  // cpu_finalize: convert_rows (a copy)
  }

  void finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                const DispatchedActivations& d, const TensorView& output,
                const TensorView& workspace, StreamHandle) override {
    MOEKIT_CHECK_ARG(policy == ReducePolicy::kAlreadyReduced || policy == ReducePolicy::kContiguous,
                     "reduce policy", "already_reduced or contiguous (standard format)",
                     reduce_policy_name(policy));
    detail::ByteCarver c(workspace);
    layout(
        c, problem,
        TensorView(nullptr, problem.activation_dtype, Shape{d.num_tokens, problem.hidden_size()}),
        {}, {}, false);
    const TensorView rows = c.take(DType::kI32, Shape{d.num_tokens, problem.top_k()});
    if (policy == ReducePolicy::kContiguous) cpu::contiguous_source_rows(problem, d.topk_ids, rows);
    cpu::cpu_finalize(problem, expert_output, policy, d, rows, output);
  }

 private:
  // Quantized input, then the source_row map of finalize.
  static QuantizedView layout(detail::ByteCarver& c, const MoeProblem& problem, const TensorView& x,
                              const TensorView& topk_weights, const TensorView& scale, bool run) {
    return cpu::prepare_gemm1_input(c, problem, x, topk_weights, scale, run);
  }
};

}  // namespace

std::unique_ptr<ModularPrepareFinalize> make_cpu_no_ep_prepare_finalize() {
  return std::make_unique<CpuNoEpPrepareFinalize>();
}

}  // namespace moekit
