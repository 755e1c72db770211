// Naive DP/EP PrepareFinalize (AgRs): all-gather every rank's padded token block, reduce-scatter
// the expert outputs back. See include/moekit/prepare_finalize/ep_prepare_finalize.hpp.
//
// Workspace (capacity C per rank, P ranks, the same carve in workspace_shape / prepare /
// finalize): [scaled f32 C x H] local quantized pieces [C, ...], local ids / weights [C, k],
// gathered pieces [P*C, ...], gathered ids / weights [P*C, k], the reduce-scatter result
// [C, k, H] (slot rows) or [C, H] (partial sums) in 4-byte elements, the slot rows map [C, k].
#include <string>

#include "ep/ep_common.hpp"
#include "moekit/core/error.hpp"

namespace moekit::ep {
namespace {

class NaivePrepareFinalize final : public EpPrepareFinalizeBase {
 public:
  using EpPrepareFinalizeBase::EpPrepareFinalizeBase;

  TensorSpec workspace_shape(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    layout(c, problem);
    return c.spec();
  }

  MoeProblem experts_problem(const MoeProblem& chunk) const override {
    MoeProblem p = chunk;
    p.num_tokens = capacity_ * ranks_;  // every rank's block
    return p;
  }

  DispatchedActivations prepare(const MoeProblem& problem, const TensorView& x,
                                const TensorView& topk_ids, const TensorView& topk_weights,
                                const TensorView& a1_static_scale, const TensorView& workspace,
                                StreamHandle stream) override {
    check_policy(options_.expert_reduce);
    detail::ByteCarver c(workspace);
    Pieces p = layout(c, problem);
    const std::int64_t m = x.size(0), k = problem.top_k();
    quantize_local(problem, x, topk_weights, a1_static_scale, p.scaled, p.local, true, stream);
    // Padding rows: zero tokens routed to expert 0 with weight 0 (their outputs land in the
    // padding rows of the block and are never read).
    const std::size_t slot_bytes = static_cast<std::size_t>(k) * 4;
    ops_->copy(p.ids.data, topk_ids.data, static_cast<std::size_t>(m) * slot_bytes, stream);
    ops_->copy(p.weights.data, topk_weights.data, static_cast<std::size_t>(m) * slot_bytes, stream);
    const std::size_t pad = static_cast<std::size_t>(capacity_ - m) * slot_bytes;
    ops_->zero(static_cast<unsigned char*>(p.ids.data) + m * slot_bytes, pad, stream);
    ops_->zero(static_cast<unsigned char*>(p.weights.data) + m * slot_bytes, pad, stream);

    DispatchedActivations d;
    d.format = ActivationFormat::kStandard;
    d.num_tokens = capacity_ * ranks_;
    d.a1q.config = p.local.config;
    std::vector<TensorView*> local = pieces(p.local), all = pieces(p.gathered);
    std::vector<TensorView*> out = pieces(d.a1q = p.gathered);
    const std::vector<bool> per_tensor = per_tensor_flags(p.local);
    for (std::size_t i = 0; i < local.size(); ++i) {
      if (per_tensor[i]) {
        *out[i] = *local[i];  // static: the same on every rank
        continue;
      }
      comm_->all_gather(local[i]->data, all[i]->data, local[i]->nbytes(), stream);
    }
    comm_->all_gather(p.ids.data, p.all_ids.data, p.ids.nbytes(), stream);
    comm_->all_gather(p.weights.data, p.all_weights.data, p.weights.nbytes(), stream);
    d.topk_ids = p.all_ids;
    d.topk_weights = p.all_weights;
    return d;
  }

  void finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                const DispatchedActivations& d, const TensorView& output,
                const TensorView& workspace, StreamHandle stream) override {
    check_policy(policy);
    detail::ByteCarver c(workspace);
    Pieces p = layout(c, problem);
    const std::int64_t m = output.size(0), k = problem.top_k(), h = problem.hidden_size();
    const std::int64_t width = partial_sums() ? 1 : k;  // slot rows per token
    MOEKIT_CHECK_ARG(expert_output.numel() == capacity_ * ranks_ * width * h, "expert_output",
                     "[P*C" + std::string(partial_sums() ? "" : ", k") + ", H] for P*C = " +
                         std::to_string(capacity_ * ranks_),
                     expert_output.str());
    // Each slot row is non-zero on its expert's rank only: the sum is that row, exactly.
    const TensorView mine(p.combined.data, expert_output.dtype, Shape{capacity_ * width, h},
                          ops_->device());
    comm_->reduce_scatter_sum(expert_output.data, mine.data,
                              static_cast<std::size_t>(capacity_ * width * h), expert_output.dtype,
                              stream);
    const TensorView rows = first_rows(p.rows, m);
    const TensorView rows_w(rows.data, DType::kI32, Shape{m, width}, ops_->device());
    ops_->iota(rows_w, stream);
    TensorView weights;  // this rank's block of the gathered weights
    if (!partial_sums() && !problem.apply_router_weight_on_input())
      weights = TensorView(static_cast<unsigned char*>(d.topk_weights.data) +
                               static_cast<std::size_t>(rank_ * capacity_ * k) * 4,
                           DType::kF32, Shape{m, k}, ops_->device());
    ops_->unpermute_reduce(mine, rows_w, weights, output, stream);
  }

 private:
  struct Pieces {
    TensorView scaled;
    QuantizedView local, gathered;
    TensorView ids, weights, all_ids, all_weights, combined, rows;
  };

  Pieces layout(detail::ByteCarver& c, const MoeProblem& problem) const {
    Pieces p;
    const std::int64_t h = problem.hidden_size(), k = problem.top_k(), cap = capacity_;
    if (problem.apply_router_weight_on_input()) p.scaled = c.take(DType::kF32, Shape{cap, h});
    p.local = take_quantized(c, problem, cap, input_dtype(problem));
    p.gathered = take_quantized(c, problem, cap * ranks_, input_dtype(problem));
    p.ids = c.take(DType::kI32, Shape{cap, k});
    p.weights = c.take(DType::kF32, Shape{cap, k});
    p.all_ids = c.take(DType::kI32, Shape{cap * ranks_, k});
    p.all_weights = c.take(DType::kF32, Shape{cap * ranks_, k});
    const std::int64_t width = partial_sums() ? 1 : k;
    p.combined = c.take(DType::kF32, Shape{cap * width, h});  // 4 bytes: f32 or bf16 fits
    p.rows = c.take(DType::kI32, Shape{cap, width});
    return p;
  }
};

}  // namespace

std::unique_ptr<ModularPrepareFinalize> make_naive_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops, const MoeProblem& problem,
    EpPrepareFinalizeOptions options) {
  return std::make_unique<NaivePrepareFinalize>(std::move(comm), std::move(ops), problem, options);
}

}  // namespace moekit::ep
