#include "cpu/prepare_finalize/cpu_prepare_common.hpp"

#include <cstring>
#include <string>

#include "framework/prepare_checks.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::cpu {

QuantConfig dispatch_quant_config(const MoeProblem& problem) {
  QuantConfig c = problem.activation_quant;
  c.layout = ScaleLayout::kLinear;
  return c;
}

QuantizedView prepare_gemm1_input(detail::ByteCarver& carver, const MoeProblem& problem,
                                  const TensorView& x, const TensorView& topk_weights,
                                  const TensorView& static_scale, bool run) {
  const std::int64_t m = x.size(0), h = problem.hidden_size();
  const bool on_input = problem.apply_router_weight_on_input();
  TensorView input = x;
  if (on_input) {
    // The reference scales the f32 input by the slot's weight (k == 1) before quantizing.
    TensorView scaled = carver.take(DType::kF32, Shape{m, h});
    if (run) {
      const auto* w = topk_weights.ptr<const float>();
      auto* dst = scaled.ptr<float>();
      for (std::int64_t t = 0; t < m; ++t) {
        for (std::int64_t c = 0; c < h; ++c) {
          const float v = x.dtype == DType::kF32
                              ? x.ptr<const float>()[t * h + c]
                              : bf16_to_float(x.ptr<const std::uint16_t>()[t * h + c]);
          dst[t * h + c] = v * w[t];
        }
      }
    }
    input = scaled;
  }
  QuantizedView q;
  q.config = dispatch_quant_config(problem);
  if (q.config.scheme == QuantScheme::kBF16) {
    q.values = input;
    return q;
  }
  const QuantShapes s = infer_quant_shapes(Shape{m, h}, q.config);
  q.values = carver.take(s.value_dtype, s.values);
  if (s.scales.rank() > 0) q.scales = carver.take(s.scale_dtype, s.scales);
  if (s.has_global_scale) q.global_scale = carver.take(DType::kF32, s.global_scale);
  if (run && m > 0) quantize(input, q.config, q, QuantBackend::kReference, static_scale);
  return q;
}

Support cpu_prepare_supports(const MoeProblem& problem) {
  return detail::prepare_input_supports(problem);
}

void contiguous_source_rows(const MoeProblem& problem, const TensorView& topk_ids,
                            const TensorView& source_row) {
  const std::int64_t n = topk_ids.numel();
  const auto* ids = topk_ids.ptr<const std::int32_t>();
  auto* rows = source_row.ptr<std::int32_t>();
  const auto& map = problem.parallel.expert_map;
  for (std::int64_t a = 0; a < n; ++a) {
    const int g = ids[a];
    MOEKIT_CHECK_ARG(g >= 0 && g < problem.num_experts(), "topk_ids",
                     "ids in [0, " + std::to_string(problem.num_experts()) + ")", g);
    const bool local = map.empty() || map[static_cast<std::size_t>(g)] >= 0;
    rows[a] = local ? static_cast<std::int32_t>(a) : -1;
  }
}

void convert_rows(const TensorView& src, const TensorView& output) {
  MOEKIT_CHECK_ARG(src.numel() == output.numel(), "expert_output numel", output.numel(),
                   src.numel());
  const std::int64_t n = src.numel();
  if (src.dtype == output.dtype) {
    if (n) std::memcpy(output.data, src.data, output.nbytes());
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = src.dtype == DType::kF32 ? src.ptr<const float>()[i]
                                             : bf16_to_float(src.ptr<const std::uint16_t>()[i]);
    if (output.dtype == DType::kF32)
      output.ptr<float>()[i] = v;
    else
      output.ptr<std::uint16_t>()[i] = float_to_bf16(v);
  }
}

void cpu_finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                  const DispatchedActivations& dispatched, const TensorView& rows,
                  const TensorView& output) {
  const TensorView weights =
      problem.apply_router_weight_on_input() ? TensorView{} : dispatched.topk_weights;
  switch (policy) {
    case ReducePolicy::kAlreadyReduced:
      convert_rows(expert_output, output);
      return;
    case ReducePolicy::kContiguous:
    case ReducePolicy::kBatchedPerExpert:
      unpermute_reduce(expert_output, rows, weights, output);
      return;
    case ReducePolicy::kDelegate:
      break;
  }
  MOEKIT_FAIL("cpu_finalize: reduce policy '", reduce_policy_name(policy),
              "' must be resolved before finalize");
}

}  // namespace moekit::cpu
