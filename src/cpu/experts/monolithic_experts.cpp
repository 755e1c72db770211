// CPU monolithic experts: route_reference on the logits, then the standard path with the reduce
// done inside (output [M, H] in the activation dtype).
#include <string>

#include "cpu/experts/expert_pipeline.hpp"
#include "cpu/experts/standard_core.hpp"
#include "moekit/core/error.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

class CpuMonolithicExperts final : public MonolithicExperts {
 public:
  std::string name() const override { return "cpu_monolithic_experts"; }
  Device device() const override { return Device::host(); }

  Support supports(const MoeProblem& problem) const override {
    if (!problem.parallel.is_identity())
      return Support::no("monolithic experts run a single rank with every expert local");
    return cpu::cpu_experts_supports(problem);
  }

  WorkspaceShapes workspace_shapes(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    layout(c, problem, problem.num_tokens, {}, {}, false);
    WorkspaceShapes w;
    w.workspace13 = c.spec();
    w.workspace2 = cpu::pipeline_weight_scratch(problem);
    w.output = {problem.activation_dtype, Shape{problem.num_tokens, problem.hidden_size()}};
    return w;
  }

  void prepare_weights(const MoeProblem& problem, const MoeWeights& weights,
                       StreamHandle) override {
    cpu::check_cpu_weights(problem, weights);
    weights_ = &weights;
    problem_ = problem;
  }

  void apply(const MonolithicInputs& in, const TensorView& output, const TensorView& workspace13,
             const TensorView& workspace2, StreamHandle) override {
    MOEKIT_CHECK(weights_ != nullptr, name(), ": apply() before prepare_weights()");
    MoeProblem p = problem_;
    p.num_tokens = in.num_tokens;
    detail::ByteCarver c(workspace13);
    layout(c, p, in.num_tokens, in, output, true, workspace2);
  }

 private:
  void layout(detail::ByteCarver& c, const MoeProblem& p, std::int64_t m,
              const MonolithicInputs& in, const TensorView& output, bool run,
              const TensorView& ws2 = {}) const {
    const TensorView ids = c.take(DType::kI32, Shape{m, p.top_k()});
    const TensorView wts = c.take(DType::kF32, Shape{m, p.top_k()});
    if (run) route_reference(in.router_logits, in.correction_bias, p.layer.routing, ids, wts);
    cpu::run_standard_core(p, weights_, m, in.a1q, ids, wts, ReducePolicy::kAlreadyReduced, output,
                           c, ws2, run);
  }

  const MoeWeights* weights_ = nullptr;
  MoeProblem problem_;
};

}  // namespace

std::unique_ptr<MonolithicExperts> make_cpu_monolithic_experts() {
  return std::make_unique<CpuMonolithicExperts>();
}

}  // namespace moekit
