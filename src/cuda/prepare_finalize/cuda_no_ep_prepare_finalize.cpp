// CUDA NoEP PrepareFinalize (standard format): quantize the input with the cuda quantize backend
// (LINEAR block scales), pass tokens and routing through; finalize = weight + reduce per the
// experts' policy with unpermute_reduce_cuda. The workspace is laid out by the same ByteCarver
// sequence as the CPU NoEP, and every output is byte-identical to it (see
// include/moekit/prepare_finalize/cuda_prepare_finalize.hpp). With the router weight on the input
// and bf16 activations the f32 rows x * w pass through, as in the CPU NoEP; the bf16-activation
// CUDA experts round them to bf16 themselves. supports() reasons do not name this object (the
// callers prefix the name).
#include <string>

#include "core/device_runtime.hpp"
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "framework/byte_carver.hpp"
#include "framework/prepare_checks.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"
#include "moekit/prepare_finalize/cuda_prepare_finalize.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {
namespace {

bool identity_map(const ParallelConfig& p) {
  for (std::size_t g = 0; g < p.expert_map.size(); ++g)
    if (p.expert_map[g] != static_cast<std::int32_t>(g)) return false;
  return true;
}

class CudaNoEpPrepareFinalize final : public ModularPrepareFinalize {
 public:
  explicit CudaNoEpPrepareFinalize(int device) : device_(device) {}
  std::string name() const override { return "cuda_no_ep"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(device_); }

  Support supports(const MoeProblem& problem) const override {
    if (device_runtime::device_count() <= device_) {
      return Support::no("no CUDA device " + std::to_string(device_));
    }
    if (problem.activation_dtype != DType::kBF16 && problem.activation_dtype != DType::kF32) {
      return Support::no("activation dtype must be bf16 or f32, got " +
                         std::string(dtype_name(problem.activation_dtype)));
    }
    if (!identity_map(problem.parallel) || problem.parallel.ep_size != 1) {
      return Support::no("expert parallel maps are not supported (" +
                         problem.parallel.str() + ")");
    }
    return detail::prepare_input_supports(problem);
  }

  TensorSpec workspace_shape(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    layout(c, problem, problem.num_tokens);
    c.take(DType::kI32, Shape{problem.num_tokens, problem.top_k()});
    return c.spec();
  }

  DispatchedActivations prepare(const MoeProblem& problem, const TensorView& x,
                                const TensorView& topk_ids, const TensorView& topk_weights,
                                const TensorView& a1_static_scale, const TensorView& workspace,
                                StreamHandle stream) override {
    MOEKIT_CHECK_ARG(x.device.is_cuda(), "x device", "cuda", x.device.str());
    MOEKIT_CHECK_ARG(x.rank() == 2 && x.size(1) == problem.hidden_size(), "x shape",
                     "[M, " + std::to_string(problem.hidden_size()) + "]", x.shape.str());
    detail::ByteCarver c(workspace);
    const std::int64_t m = x.size(0);
    const Pieces p = layout(c, problem, m);
    TensorView input = x;
    if (problem.apply_router_weight_on_input()) {
      cuda::scale_rows_by_weight(x, topk_weights, p.scaled, stream);
      input = p.scaled;
    }
    DispatchedActivations d;
    d.format = ActivationFormat::kStandard;
    d.num_tokens = m;
    d.a1q = p.q;
    if (p.q.config.scheme == QuantScheme::kBF16) {
      d.a1q.values = input;
    } else if (m > 0) {
      quantize(input, p.q.config, p.q, QuantBackend::kCuda, a1_static_scale, stream);
    }
    d.topk_ids = topk_ids;
    d.topk_weights = topk_weights;
    return d;
  }

  bool finalize_is_copy(ReducePolicy policy) const override {
    return policy == ReducePolicy::kAlreadyReduced;  // convert_rows of equal dtypes: a copy
  }

  void finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                const DispatchedActivations& d, const TensorView& output,
                const TensorView& workspace, StreamHandle stream) override {
    MOEKIT_CHECK_ARG(policy == ReducePolicy::kAlreadyReduced || policy == ReducePolicy::kContiguous,
                     "reduce policy", "already_reduced or contiguous (standard format)",
                     reduce_policy_name(policy));
    if (policy == ReducePolicy::kAlreadyReduced) {
      cuda::convert_rows(expert_output, output, stream);
      return;
    }
    detail::ByteCarver c(workspace);
    layout(c, problem, d.num_tokens);
    const TensorView rows = c.take(DType::kI32, Shape{d.num_tokens, problem.top_k()});
    cuda::iota_rows(rows, stream);
    const TensorView weights =
        problem.apply_router_weight_on_input() ? TensorView{} : d.topk_weights;
    unpermute_reduce_cuda(expert_output, rows, weights, output, stream);
  }

 private:
  struct Pieces {
    TensorView scaled;  // f32 [M, H] (weight on input only)
    QuantizedView q;    // values / scales / global scale (kBF16: values unset)
  };
  // The CPU NoEP's sequence of pieces (cpu::prepare_gemm1_input), for M rows.
  static Pieces layout(detail::ByteCarver& c, const MoeProblem& problem, std::int64_t m) {
    Pieces p;
    const std::int64_t h = problem.hidden_size();
    if (problem.apply_router_weight_on_input()) p.scaled = c.take(DType::kF32, Shape{m, h});
    p.q.config = problem.activation_quant;
    p.q.config.layout = ScaleLayout::kLinear;
    if (p.q.config.scheme == QuantScheme::kBF16) return p;
    const QuantShapes s = infer_quant_shapes(Shape{m, h}, p.q.config);
    p.q.values = c.take(s.value_dtype, s.values);
    if (s.scales.rank() > 0) p.q.scales = c.take(s.scale_dtype, s.scales);
    if (s.has_global_scale) p.q.global_scale = c.take(DType::kF32, s.global_scale);
    return p;
  }

  int device_;
};

}  // namespace

std::unique_ptr<ModularPrepareFinalize> make_cuda_no_ep_prepare_finalize(int device) {
  return std::make_unique<CudaNoEpPrepareFinalize>(device);
}

}  // namespace moekit
