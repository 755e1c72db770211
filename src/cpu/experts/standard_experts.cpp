// CPU standard-format modular experts: permute by expert, per-expert MLP, then either the
// contiguous [M, k, H] output (finalize reduces) or the reduced [M, H] output.
#include <string>

#include "cpu/experts/expert_pipeline.hpp"
#include "cpu/experts/standard_core.hpp"
#include "moekit/core/error.hpp"
#include "moekit/framework/cpu.hpp"

namespace moekit {
namespace {

class CpuStandardExperts final : public ModularExperts {
 public:
  explicit CpuStandardExperts(ReducePolicy reduce) : reduce_(reduce) {
    MOEKIT_CHECK_ARG(reduce != ReducePolicy::kBatchedPerExpert, "reduce",
                     "contiguous, delegate or already_reduced (standard format)",
                     reduce_policy_name(reduce));
  }
  std::string name() const override {
    return std::string("cpu_standard_experts[") + std::string(reduce_policy_name(reduce_)) + "]";
  }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::host(); }
  ReducePolicy reduce_policy() const override { return reduce_; }

  Support supports(const MoeProblem& problem) const override {
    return cpu::cpu_experts_supports(problem);
  }

  WorkspaceShapes workspace_shapes(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    const std::int64_t m = problem.num_tokens;
    cpu::run_standard_core(problem, nullptr, m, {}, {}, {}, policy(), {}, c, {}, false);
    WorkspaceShapes w;
    w.workspace13 = c.spec();
    w.workspace2 = cpu::pipeline_weight_scratch(problem);
    const std::int64_t h = problem.hidden_size();
    w.output = policy() == ReducePolicy::kContiguous
                   ? TensorSpec{DType::kF32, Shape{m, problem.top_k(), h}}
                   : TensorSpec{DType::kF32, Shape{m, h}};
    return w;
  }

  void prepare_weights(const MoeProblem& problem, const MoeWeights& weights,
                       StreamHandle) override {
    cpu::check_cpu_weights(problem, weights);
    weights_ = &weights;  // CPU experts use the caller's weights in place: they must outlive us
    problem_ = problem;
  }

  void apply(const DispatchedActivations& in, const TensorView& output,
             const TensorView& workspace13, const TensorView& workspace2, StreamHandle) override {
    MOEKIT_CHECK(weights_ != nullptr, name(), ": apply() before prepare_weights()");
    MOEKIT_CHECK_ARG(in.format == ActivationFormat::kStandard, "dispatched format", "standard",
                     activation_format_name(in.format));
    detail::ByteCarver c(workspace13);
    cpu::run_standard_core(problem_for(in), weights_, in.num_tokens, in.a1q, in.topk_ids,
                           in.topk_weights, policy(), output, c, workspace2, true);
  }

 private:
  ReducePolicy policy() const {
    return resolve_reduce_policy(reduce_, ActivationFormat::kStandard);
  }
  // The problem the weights were prepared for; the token count comes from the call.
  MoeProblem problem_for(const DispatchedActivations& in) const {
    MoeProblem p = problem_;
    p.num_tokens = in.num_tokens;
    return p;
  }

  ReducePolicy reduce_;
  const MoeWeights* weights_ = nullptr;
  MoeProblem problem_;
};

}  // namespace

std::unique_ptr<ModularExperts> make_cpu_standard_experts(ReducePolicy reduce) {
  return std::make_unique<CpuStandardExperts>(reduce);
}

}  // namespace moekit
