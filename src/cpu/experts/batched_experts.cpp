// CPU batched-format modular experts: activations [E_local, T_max, H] with expert_num_tokens;
// output [E_local, T_max, H] (padding rows zero) or, reducing inside, [M, H].
#include <cstring>
#include <string>

#include "cpu/experts/expert_pipeline.hpp"
#include "cpu/experts/standard_core.hpp"
#include "moekit/core/error.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/permute/permute.hpp"

namespace moekit {
namespace {

class CpuBatchedExperts final : public ModularExperts {
 public:
  CpuBatchedExperts(std::int64_t max_tokens_per_rank, int num_dispatchers, ReducePolicy reduce)
      : max_tokens_per_rank_(max_tokens_per_rank),
        num_dispatchers_(num_dispatchers),
        reduce_(reduce) {
    MOEKIT_CHECK_ARG(max_tokens_per_rank >= 1, "max_tokens_per_rank", ">= 1", max_tokens_per_rank);
    MOEKIT_CHECK_ARG(num_dispatchers >= 1, "num_dispatchers", ">= 1", num_dispatchers);
    MOEKIT_CHECK_ARG(reduce != ReducePolicy::kContiguous, "reduce",
                     "batched_per_expert, delegate or already_reduced (batched format)",
                     reduce_policy_name(reduce));
  }
  std::string name() const override {
    return std::string("cpu_batched_experts[") + std::string(reduce_policy_name(reduce_)) + "]";
  }
  ActivationFormat activation_format() const override { return ActivationFormat::kBatched; }
  Device device() const override { return Device::host(); }
  ReducePolicy reduce_policy() const override { return reduce_; }
  std::int64_t max_tokens_per_rank() const override { return max_tokens_per_rank_; }
  int num_dispatchers() const override { return num_dispatchers_; }

  Support supports(const MoeProblem& problem) const override {
    if (problem.num_tokens > max_tokens_per_rank_) {
      return Support::no("chunk of " + std::to_string(problem.num_tokens) +
                         " tokens exceeds max_tokens_per_rank " +
                         std::to_string(max_tokens_per_rank_));
    }
    return cpu::cpu_experts_supports(problem);
  }

  WorkspaceShapes workspace_shapes(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    layout(c, problem, {}, {}, {}, false);
    WorkspaceShapes w;
    w.workspace13 = c.spec();
    w.workspace2 = cpu::pipeline_weight_scratch(problem);
    const std::int64_t h = problem.hidden_size();
    w.output = policy() == ReducePolicy::kBatchedPerExpert
                   ? TensorSpec{DType::kF32, Shape{problem.num_local_experts(), t_max(), h}}
                   : TensorSpec{DType::kF32, Shape{problem.num_tokens, h}};
    return w;
  }

  void prepare_weights(const MoeProblem& problem, const MoeWeights& weights,
                       StreamHandle) override {
    cpu::check_cpu_weights(problem, weights);
    weights_ = &weights;
    problem_ = problem;
  }

  void apply(const DispatchedActivations& in, const TensorView& output,
             const TensorView& workspace13, const TensorView& workspace2, StreamHandle) override {
    MOEKIT_CHECK(weights_ != nullptr, name(), ": apply() before prepare_weights()");
    MOEKIT_CHECK_ARG(in.format == ActivationFormat::kBatched, "dispatched format", "batched",
                     activation_format_name(in.format));
    MoeProblem p = problem_;
    p.num_tokens = in.num_tokens;
    detail::ByteCarver c(workspace13);
    layout(c, p, in, output, workspace2, true);
  }

 private:
  std::int64_t t_max() const { return max_tokens_per_rank_ * num_dispatchers_; }
  ReducePolicy policy() const { return resolve_reduce_policy(reduce_, ActivationFormat::kBatched); }

  void layout(detail::ByteCarver& c, const MoeProblem& p, const DispatchedActivations& in,
              const TensorView& output, const TensorView& ws2, bool run) const {
    const int e_local = p.num_local_experts(), k = p.top_k();
    const std::int64_t h = p.hidden_size(), rows = e_local * t_max(), m = p.num_tokens;
    const TensorView a1 = c.take(DType::kF32, Shape{rows, h});
    const TensorView begin = c.take(DType::kI64, Shape{e_local + 1});
    const TensorView count = c.take(DType::kI64, Shape{e_local});
    const TensorView a_ptrs = c.take(DType::kU8, Shape{rows * 8});
    const TensorView o_ptrs = c.take(DType::kU8, Shape{rows * 8});
    cpu::PipelineScratch s = cpu::take_pipeline_scratch(c, rows, p);
    const bool reduce_here = policy() == ReducePolicy::kAlreadyReduced;
    TensorView out2, counts, offsets, sorted, permuted_row, batched_row;
    if (reduce_here) {
      out2 = c.take(DType::kF32, Shape{rows, h});
      counts = c.take(DType::kI32, Shape{e_local});
      offsets = c.take(DType::kI32, Shape{e_local + 1});
      sorted = c.take(DType::kI32, Shape{permute_capacity(m, k, e_local, 1)});
      permuted_row = c.take(DType::kI32, Shape{m, k});
      batched_row = c.take(DType::kI32, Shape{m, k});
    }
    if (!run) return;

    MOEKIT_CHECK_ARG(in.a1q.values.rank() == 3 && in.a1q.values.size(0) == e_local &&
                         in.a1q.values.size(1) == t_max(),
                     "dispatched activations",
                     "[E_local, T_max, ...] = [" + std::to_string(e_local) + ", " +
                         std::to_string(t_max()) + ", ...]",
                     in.a1q.values.str());
    cpu::dequantize_activations(in.a1q, a1.ptr<float>());
    const auto* n = in.expert_num_tokens.ptr<const std::int32_t>();
    auto* b = begin.ptr<std::int64_t>();
    auto* cnt = count.ptr<std::int64_t>();
    auto** a = reinterpret_cast<const float**>(a_ptrs.data);
    auto** o = reinterpret_cast<float**>(o_ptrs.data);
    float* out_base = reduce_here ? out2.ptr<float>() : output.ptr<float>();
    std::memset(out_base, 0, static_cast<std::size_t>(rows * h) * sizeof(float));
    for (int e = 0; e < e_local; ++e) {
      MOEKIT_CHECK_ARG(n[e] >= 0 && n[e] <= t_max(), "expert_num_tokens[" + std::to_string(e) + "]",
                       "in [0, T_max = " + std::to_string(t_max()) + "]", n[e]);
      b[e] = e * t_max();
      cnt[e] = n[e];
    }
    b[e_local] = rows;
    for (std::int64_t r = 0; r < rows; ++r) {
      a[r] = a1.ptr<const float>() + r * h;
      o[r] = out_base + r * h;
    }
    cpu::PipelineRows pr;
    pr.expert_begin = b;
    pr.expert_count = cnt;
    pr.a_rows = a;
    pr.out_rows = o;
    pr.rows = rows;
    s.weights = ws2.ptr<float>();
    cpu::run_expert_pipeline(p, *weights_, pr, s);
    if (reduce_here) {
      const TensorView map = cpu::expert_map_view(p);
      compute_permutation(in.topk_ids, map, e_local, 1, {counts, offsets, sorted, permuted_row});
      batched_rows(in.topk_ids, map, permuted_row, offsets, t_max(), batched_row);
      const TensorView w = p.apply_router_weight_on_input() ? TensorView{} : in.topk_weights;
      unpermute_reduce(out2, batched_row, w, output);
    }
  }

  std::int64_t max_tokens_per_rank_;
  int num_dispatchers_;
  ReducePolicy reduce_;
  const MoeWeights* weights_ = nullptr;
  MoeProblem problem_;
};

}  // namespace

std::unique_ptr<ModularExperts> make_cpu_batched_experts(std::int64_t max_tokens_per_rank,
                                                         int num_dispatchers, ReducePolicy reduce) {
  return std::make_unique<CpuBatchedExperts>(max_tokens_per_rank, num_dispatchers, reduce);
}

}  // namespace moekit
