// CPU batched PrepareFinalize: quantize [M, H] first (linear scales), then scatter values and
// per-row scales into per-expert buffers [E_local, T_max, ...] with expert_num_tokens [E_local];
// per-tensor scales are replicated per expert ([E_local]). Finalize gathers back through the
// batched_row map computed in prepare (same order as the standard permutation).
#include <cstring>
#include <string>
#include <vector>

#include "cpu/prepare_finalize/cpu_prepare_common.hpp"
#include "moekit/core/error.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/permute/permute.hpp"

namespace moekit {
namespace {

TensorView expert_map_view(const MoeProblem& p) {
  if (p.parallel.expert_map.empty()) return {};
  return TensorView(const_cast<std::int32_t*>(p.parallel.expert_map.data()), DType::kI32,
                    Shape{static_cast<std::int64_t>(p.parallel.expert_map.size())});
}

// [M, ...] -> [E_local, T_max, ...]
Shape batched_of(const Shape& s, std::int64_t e_local, std::int64_t t_max) {
  std::vector<std::int64_t> d{e_local, t_max};
  for (int i = 1; i < s.rank(); ++i) d.push_back(s[i]);
  return Shape(d);
}

class CpuBatchedPrepareFinalize final : public ModularPrepareFinalize {
 public:
  CpuBatchedPrepareFinalize(std::int64_t max_tokens_per_rank, int num_dispatchers)
      : max_tokens_per_rank_(max_tokens_per_rank), num_dispatchers_(num_dispatchers) {
    MOEKIT_CHECK_ARG(max_tokens_per_rank >= 1, "max_tokens_per_rank", ">= 1", max_tokens_per_rank);
    MOEKIT_CHECK_ARG(num_dispatchers >= 1, "num_dispatchers", ">= 1", num_dispatchers);
  }
  std::string name() const override { return "cpu_batched"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kBatched; }
  Device device() const override { return Device::host(); }
  std::int64_t max_tokens_per_rank() const override { return max_tokens_per_rank_; }
  int num_dispatchers() const override { return num_dispatchers_; }

  Support supports(const MoeProblem& problem) const override {
    if (problem.num_tokens > max_tokens_per_rank_) {
      return Support::no("chunk of " + std::to_string(problem.num_tokens) +
                         " tokens exceeds max_tokens_per_rank " +
                         std::to_string(max_tokens_per_rank_));
    }
    return cpu::cpu_prepare_supports(problem);
  }

  TensorSpec workspace_shape(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    Pieces p = layout(c, problem,
                      TensorView(nullptr, problem.activation_dtype,
                                 Shape{problem.num_tokens, problem.hidden_size()}),
                      {}, {});
    (void)p;
    return c.spec();
  }

  DispatchedActivations prepare(const MoeProblem& problem, const TensorView& x,
                                const TensorView& topk_ids, const TensorView& topk_weights,
                                const TensorView& a1_static_scale, const TensorView& workspace,
                                StreamHandle) override {
    detail::ByteCarver c(workspace);
    Pieces p = layout(c, problem, x, topk_weights, a1_static_scale);
    const int e_local = problem.num_local_experts();
    const TensorView map = expert_map_view(problem);
    scatter_batched(p.flat.values, topk_ids, map, e_local, p.batched.values, p.expert_num_tokens);
    scatter_or_replicate(p.flat.scales, p.batched.scales, topk_ids, map, e_local,
                         p.expert_num_tokens);
    scatter_or_replicate(p.flat.global_scale, p.batched.global_scale, topk_ids, map, e_local,
                         p.expert_num_tokens);
    compute_permutation(topk_ids, map, e_local, 1, {p.counts, p.offsets, p.sorted, p.permuted_row});
    batched_rows(topk_ids, map, p.permuted_row, p.offsets, t_max(), p.batched_row);
    DispatchedActivations d;
    d.format = ActivationFormat::kBatched;
    d.num_tokens = x.size(0);
    d.a1q = p.batched;
    d.topk_ids = topk_ids;
    d.topk_weights = topk_weights;
    d.expert_num_tokens = p.expert_num_tokens;
    return d;
  }

  void finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                const DispatchedActivations& d, const TensorView& output,
                const TensorView& workspace, StreamHandle) override {
    MOEKIT_CHECK_ARG(
        policy == ReducePolicy::kAlreadyReduced || policy == ReducePolicy::kBatchedPerExpert,
        "reduce policy", "already_reduced or batched_per_expert (batched format)",
        reduce_policy_name(policy));
    detail::ByteCarver c(workspace);
    Pieces p = layout(
        c, problem,
        TensorView(nullptr, problem.activation_dtype, Shape{d.num_tokens, problem.hidden_size()}),
        {}, {}, false);
    cpu::cpu_finalize(problem, expert_output, policy, d, p.batched_row, output);
  }

 private:
  struct Pieces {
    QuantizedView flat, batched;
    TensorView expert_num_tokens, counts, offsets, sorted, permuted_row, batched_row;
  };
  std::int64_t t_max() const { return max_tokens_per_rank_ * num_dispatchers_; }

  Pieces layout(detail::ByteCarver& c, const MoeProblem& problem, const TensorView& x,
                const TensorView& topk_weights, const TensorView& scale, bool run = true) const {
    const bool really = run && x.data != nullptr;
    Pieces p;
    const std::int64_t m = x.size(0);
    const int k = problem.top_k(), e_local = problem.num_local_experts();
    p.flat = cpu::prepare_gemm1_input(c, problem, x, topk_weights, scale, really);
    p.batched.config = p.flat.config;
    p.batched.values =
        c.take(p.flat.values.dtype, batched_of(p.flat.values.shape, e_local, t_max()));
    const QuantScheme s = p.flat.config.scheme;
    if (p.flat.scales.defined())
      p.batched.scales = take_batched(c, p.flat.scales, e_local, s == QuantScheme::kFP8PerTensor);
    if (p.flat.global_scale.defined())
      p.batched.global_scale =
          take_batched(c, p.flat.global_scale, e_local, s == QuantScheme::kNVFP4);
    p.expert_num_tokens = c.take(DType::kI32, Shape{e_local});
    p.counts = c.take(DType::kI32, Shape{e_local});
    p.offsets = c.take(DType::kI32, Shape{e_local + 1});
    p.sorted = c.take(DType::kI32, Shape{permute_capacity(m, k, e_local, 1)});
    p.permuted_row = c.take(DType::kI32, Shape{m, k});
    p.batched_row = c.take(DType::kI32, Shape{m, k});
    return p;
  }

  // Per-tensor quantities ([1]) become [E_local]; per-row ones [M, ...] become [E_local, T_max,
  // ...].
  TensorView take_batched(detail::ByteCarver& c, const TensorView& flat, int e_local,
                          bool per_tensor) const {
    if (per_tensor) return c.take(flat.dtype, Shape{e_local});
    return c.take(flat.dtype, batched_of(flat.shape, e_local, t_max()));
  }

  void scatter_or_replicate(const TensorView& flat, const TensorView& batched,
                            const TensorView& topk_ids, const TensorView& map, int e_local,
                            const TensorView& expert_num_tokens) const {
    if (!flat.defined()) return;
    if (batched.rank() == 1) {  // a per-tensor quantity [1] replicated to [E_local]
      for (int e = 0; e < e_local; ++e)
        std::memcpy(static_cast<unsigned char*>(batched.data) + e * dtype_size(flat.dtype),
                    flat.data, dtype_size(flat.dtype));
      return;
    }
    scatter_batched(flat, topk_ids, map, e_local, batched, expert_num_tokens);
  }

  std::int64_t max_tokens_per_rank_;
  int num_dispatchers_;
};

}  // namespace

std::unique_ptr<ModularPrepareFinalize> make_cpu_batched_prepare_finalize(
    std::int64_t max_tokens_per_rank, int num_dispatchers) {
  return std::make_unique<CpuBatchedPrepareFinalize>(max_tokens_per_rank, num_dispatchers);
}

}  // namespace moekit
