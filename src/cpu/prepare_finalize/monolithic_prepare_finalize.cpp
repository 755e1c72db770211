// CPU monolithic PrepareFinalize: quantize the input (linear scales) and pass the router logits
// through; finalize copies the experts' reduced [M, H] output (single rank: nothing to combine).
#include <string>

#include "cpu/prepare_finalize/cpu_prepare_common.hpp"
#include "moekit/core/error.hpp"
#include "moekit/framework/cpu.hpp"

namespace moekit {
namespace {

class CpuMonolithicPrepareFinalize final : public MonolithicPrepareFinalize {
 public:
  std::string name() const override { return "cpu_monolithic"; }
  Device device() const override { return Device::host(); }

  Support supports(const MoeProblem& problem) const override {
    if (problem.apply_router_weight_on_input()) {
      return Support::no("routing '" +
                         std::string(routing_method_name(problem.layer.routing.method)) +
                         "' scales the input by the router weight, which is only known after "
                         "routing: the input cannot be quantized up front");
    }
    if (!problem.parallel.is_identity()) {
      return Support::no("expert/data parallel (" + problem.parallel.str() +
                         ") is not supported by the single-rank monolithic path");
    }
    return cpu::cpu_prepare_supports(problem);
  }

  TensorSpec workspace_shape(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    cpu::prepare_gemm1_input(c, problem,
                             TensorView(nullptr, problem.activation_dtype,
                                        Shape{problem.num_tokens, problem.hidden_size()}),
                             {}, {}, false);
    return c.spec();
  }

  MonolithicInputs prepare(const MoeProblem& problem, const TensorView& x,
                           const TensorView& router_logits, const TensorView& correction_bias,
                           const TensorView& a1_static_scale, const TensorView& workspace,
                           StreamHandle) override {
    detail::ByteCarver c(workspace);
    MonolithicInputs in;
    in.num_tokens = x.size(0);
    in.a1q = cpu::prepare_gemm1_input(c, problem, x, {}, a1_static_scale, true);
    in.router_logits = router_logits;
    in.correction_bias = correction_bias;
    return in;
  }

  void finalize(const MoeProblem&, const TensorView& expert_output, const TensorView& output,
                const TensorView&, StreamHandle) override {
    cpu::convert_rows(expert_output, output);
  }
};

}  // namespace

std::unique_ptr<MonolithicPrepareFinalize> make_cpu_monolithic_prepare_finalize() {
  return std::make_unique<CpuMonolithicPrepareFinalize>();
}

}  // namespace moekit
