#include "cpu/experts/standard_core.hpp"

#include <cstring>

#include "cpu/experts/expert_pipeline.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute.hpp"

namespace moekit::cpu {

TensorView expert_map_view(const MoeProblem& p) {
  if (p.parallel.expert_map.empty()) return {};
  return TensorView(const_cast<std::int32_t*>(p.parallel.expert_map.data()), DType::kI32,
                    Shape{static_cast<std::int64_t>(p.parallel.expert_map.size())});
}

void run_standard_core(const MoeProblem& problem, const MoeWeights* weights, std::int64_t m,
                       const QuantizedView& a1q, const TensorView& topk_ids,
                       const TensorView& topk_weights, ReducePolicy policy,
                       const TensorView& output, detail::ByteCarver& c, const TensorView& ws2,
                       bool run) {
  const int k = problem.top_k(), e_local = problem.num_local_experts();
  const std::int64_t h = problem.hidden_size(), slots = m * k;
  const TensorView counts = c.take(DType::kI32, Shape{e_local});
  const TensorView offsets = c.take(DType::kI32, Shape{e_local + 1});
  const TensorView sorted = c.take(DType::kI32, Shape{permute_capacity(m, k, e_local, 1)});
  const TensorView permuted_row = c.take(DType::kI32, Shape{m, k});
  const TensorView begin = c.take(DType::kI64, Shape{e_local + 1});
  const TensorView count = c.take(DType::kI64, Shape{e_local});
  const TensorView a1 = c.take(DType::kF32, Shape{m, h});
  const TensorView a_ptrs = c.take(DType::kU8, Shape{slots * 8});
  const TensorView o_ptrs = c.take(DType::kU8, Shape{slots * 8});
  const TensorView out2 = c.take(DType::kF32, Shape{slots, h});
  const PipelineScratch scratch = take_pipeline_scratch(c, slots, problem);
  if (!run) return;

  compute_permutation(topk_ids, expert_map_view(problem), e_local, 1,
                      {counts, offsets, sorted, permuted_row});
  dequantize_activations(a1q, a1.ptr<float>());
  const auto* off = offsets.ptr<const std::int32_t>();
  const auto* sid = sorted.ptr<const std::int32_t>();
  for (int e = 0; e < e_local; ++e) {
    begin.ptr<std::int64_t>()[e] = off[e];
    count.ptr<std::int64_t>()[e] = counts.ptr<const std::int32_t>()[e];
  }
  begin.ptr<std::int64_t>()[e_local] = off[e_local];
  const std::int64_t rows = off[e_local];
  auto** a = reinterpret_cast<const float**>(a_ptrs.data);
  auto** o = reinterpret_cast<float**>(o_ptrs.data);
  const bool contiguous = policy == ReducePolicy::kContiguous;
  if (contiguous && output.nbytes()) std::memset(output.data, 0, output.nbytes());
  for (std::int64_t r = 0; r < rows; ++r) {
    a[r] = a1.ptr<const float>() + (sid[r] / k) * h;
    o[r] = contiguous ? output.ptr<float>() + static_cast<std::int64_t>(sid[r]) * h
                      : out2.ptr<float>() + r * h;
  }
  PipelineRows pr;
  pr.expert_begin = begin.ptr<const std::int64_t>();
  pr.expert_count = count.ptr<const std::int64_t>();
  pr.a_rows = a;
  pr.out_rows = o;
  pr.rows = rows;
  PipelineScratch s = scratch;
  s.weights = ws2.ptr<float>();
  run_expert_pipeline(problem, *weights, pr, s);
  if (!contiguous) {
    const TensorView w = problem.apply_router_weight_on_input() ? TensorView{} : topk_weights;
    unpermute_reduce(out2, permuted_row, w, output);
  }
}

}  // namespace moekit::cpu
