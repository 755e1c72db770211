// All-to-all dispatch/combine PrepareFinalize: tokens travel only to the ranks owning one of
// their experts; each (token, slot) result travels back. Standard format ([R, H] received tokens)
// or, under low-latency dispatch, the batched format ([E_local, T_max, H]). The routing plan is
// computed on the host (ep_plan.hpp). See include/moekit/prepare_finalize/ep_prepare_finalize.hpp.
//
// Workspace (capacity C per rank, P ranks, R_max = P*C received tokens; one carve in
// workspace_shape / prepare / finalize): see layout(). Sends and receives are sized for the worst
// case (every token to every rank; every slot of every rank's tokens on this rank).
#include <string>
#include <vector>

#include "ep/ep_common.hpp"
#include "ep/ep_plan.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute.hpp"

namespace moekit::ep {
namespace {

std::vector<std::size_t> scaled_sizes(const std::vector<std::int64_t>& counts, std::size_t unit) {
  std::vector<std::size_t> out(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i)
    out[i] = static_cast<std::size_t>(counts[i]) * unit;
  return out;
}

std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> out(sizes.size());
  std::size_t at = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out[i] = at;
    at += sizes[i];
  }
  return out;
}

std::int64_t sum_of(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (std::int64_t x : v) s += x;
  return s;
}

class AllToAllPrepareFinalize final : public EpPrepareFinalizeBase {
 public:
  using EpPrepareFinalizeBase::EpPrepareFinalizeBase;

  TensorSpec workspace_shape(const MoeProblem& problem) const override {
    detail::ByteCarver c;
    layout(c, problem);
    return c.spec();
  }

  MoeProblem experts_problem(const MoeProblem& chunk) const override {
    MoeProblem p = chunk;
    // Standard: up to every rank's tokens arrive. Batched: experts are built for
    // max_tokens_per_rank = C and num_dispatchers = P and check the per-rank count.
    p.num_tokens = batched() ? capacity_ : capacity_ * ranks_;
    return p;
  }

  DispatchedActivations prepare(const MoeProblem& problem, const TensorView& x,
                                const TensorView& topk_ids, const TensorView& topk_weights,
                                const TensorView& a1_static_scale, const TensorView& workspace,
                                StreamHandle stream) override {
    check_policy(options_.expert_reduce);
    detail::ByteCarver c(workspace);
    Pieces p = layout(c, problem);
    const std::int64_t m = x.size(0);
    const int k = problem.top_k();
    own_weights_ = problem.apply_router_weight_on_input() || partial_sums() ? TensorView{}
                                                                            : topk_weights;
    // 1. The plan (host): who gets which token, and how many arrive from each rank.
    own_ids_.resize(static_cast<std::size_t>(m * k));
    ops_->download(own_ids_.data(), topk_ids.data, own_ids_.size() * 4, stream);
    dispatch_ = plan_dispatch(own_ids_.data(), m, k, owner_, ranks_);
    recv_count_.assign(static_cast<std::size_t>(ranks_), 0);
    comm_->all_to_all_host(dispatch_.send_count.data(), recv_count_.data());
    const std::int64_t sent = static_cast<std::int64_t>(dispatch_.send_token.size());
    received_ = sum_of(recv_count_);
    const TensorView send_index = first_rows(p.send_index, sent);
    ops_->upload(send_index.data, dispatch_.send_token.data(), send_index.nbytes(), stream);

    // 2. Quantize this rank's tokens, then move every per-row piece, the ids and the weights.
    quantize_local(problem, x, topk_weights, a1_static_scale, p.scaled, p.local, false, stream);
    std::vector<TensorView*> local = pieces(p.local), send = pieces(p.send), recv = pieces(p.recv);
    QuantizedView standard = p.recv;
    std::vector<TensorView*> out = pieces(standard);
    const std::vector<bool> per_tensor = per_tensor_flags(p.local);
    for (std::size_t i = 0; i < local.size(); ++i) {
      if (per_tensor[i]) {
        *out[i] = *local[i];
        continue;
      }
      *out[i] = exchange(first_rows(*local[i], m), send_index, *send[i], *recv[i], stream);
    }
    const TensorView ids =
        exchange(topk_ids, send_index, p.send_ids, p.recv_ids, stream);
    const TensorView weights =
        exchange(topk_weights, send_index, p.send_weights, p.recv_weights, stream);

    // 3. The combine plan needs the received ids on the host (and so does the batched layout):
    // wait for the exchange first with the communicator's bounded wait (a dead peer must not
    // hang the device->host copy).
    comm_->synchronize(stream);
    recv_ids_.resize(static_cast<std::size_t>(received_ * k));
    ops_->download(recv_ids_.data(), ids.data, recv_ids_.size() * 4, stream);
    DispatchedActivations d;
    d.num_tokens = received_;
    d.topk_ids = ids;
    d.topk_weights = weights;
    if (!batched()) {
      d.format = ActivationFormat::kStandard;
      d.a1q = standard;
      plan_combine_now(m, k, [k](std::int64_t i, int j) { return static_cast<std::int32_t>(i * k + j); });
      upload_combine(p, stream);
      return d;
    }
    // Batched: the permutation of the received slots by local expert (host, the reference order),
    // then every per-row piece scattered into [E_local, T_max, ...].
    const int e_local = problem.num_local_experts();
    const std::int64_t t_max = capacity_ * ranks_;
    std::vector<std::int32_t> counts(static_cast<std::size_t>(e_local)),
        offsets(static_cast<std::size_t>(e_local) + 1),
        sorted(static_cast<std::size_t>(permute_capacity(received_, k, e_local, 1))),
        permuted(static_cast<std::size_t>(received_ * k)), brow(permuted.size());
    const TensorView host_ids(recv_ids_.data(), DType::kI32, Shape{received_, k});
    // Local ids per the rank's own expert_map (setup checked that the maps partition the experts).
    std::vector<std::int32_t> map = problem.parallel.expert_map;
    if (map.empty())
      for (std::size_t g = 0; g < owner_.size(); ++g) map.push_back(static_cast<std::int32_t>(g));
    const TensorView map_view(map.data(), DType::kI32, Shape{static_cast<std::int64_t>(map.size())});
    const PermutationView hp{TensorView(counts.data(), DType::kI32, Shape{e_local}),
                             TensorView(offsets.data(), DType::kI32, Shape{e_local + 1}),
                             TensorView(sorted.data(), DType::kI32,
                                        Shape{static_cast<std::int64_t>(sorted.size())}),
                             TensorView(permuted.data(), DType::kI32, Shape{received_, k})};
    compute_permutation(host_ids, map_view, e_local, 1, hp);
    batched_rows(host_ids, map_view, hp.permuted_row, hp.expert_offsets, t_max,
                 TensorView(brow.data(), DType::kI32, Shape{received_, k}));
    const PermutationView dp{p.counts, p.offsets, first_rows(p.sorted, sorted.size()),
                             first_rows(p.permuted_row, received_)};
    ops_->upload(dp.expert_counts.data, counts.data(), counts.size() * 4, stream);
    ops_->upload(dp.expert_offsets.data, offsets.data(), offsets.size() * 4, stream);
    ops_->upload(dp.sorted_ids.data, sorted.data(), sorted.size() * 4, stream);
    ops_->upload(dp.permuted_row.data, permuted.data(), permuted.size() * 4, stream);
    d.format = ActivationFormat::kBatched;
    d.a1q.config = p.local.config;
    std::vector<TensorView*> bat = pieces(p.batched), bout = pieces(d.a1q = p.batched);
    for (std::size_t i = 0; i < local.size(); ++i) {
      if (per_tensor[i]) {  // [1] -> [E_local]: one per expert matrix
        for (int e = 0; e < e_local; ++e)
          ops_->copy(static_cast<unsigned char*>(bat[i]->data) + e * 4, local[i]->data, 4, stream);
        continue;
      }
      ops_->scatter_batched(*out[i], dp, k, *bat[i], p.expert_num_tokens, stream);
      *bout[i] = *bat[i];
    }
    d.expert_num_tokens = p.expert_num_tokens;
    plan_combine_now(m, k, [&brow, k](std::int64_t i, int j) { return brow[static_cast<std::size_t>(i * k + j)]; });
    upload_combine(p, stream);
    return d;
  }

  void finalize(const MoeProblem& problem, const TensorView& expert_output, ReducePolicy policy,
                const DispatchedActivations&, const TensorView& output,
                const TensorView& workspace, StreamHandle stream) override {
    check_policy(policy);
    detail::ByteCarver c(workspace);
    Pieces p = layout(c, problem);
    const std::int64_t h = problem.hidden_size(), m = output.size(0);
    const std::int64_t width = partial_sums() ? ranks_ : problem.top_k();
    MOEKIT_CHECK_ARG(m * width == static_cast<std::int64_t>(combine_.home_row.size()),
                     "output rows", static_cast<std::int64_t>(combine_.home_row.size()) / width, m);
    const std::int64_t src_rows = h ? expert_output.numel() / h : 0;
    const TensorView src(expert_output.data, expert_output.dtype, Shape{src_rows, h},
                         ops_->device());
    const std::int64_t back = static_cast<std::int64_t>(combine_.send_row.size());
    const std::int64_t home = sum_of(combine_.home_count);
    const TensorView send_rows(p.combine_send.data, expert_output.dtype, Shape{back, h},
                               ops_->device());
    const TensorView home_rows(p.combine_recv.data, expert_output.dtype, Shape{home, h},
                               ops_->device());
    ops_->gather_rows(src, first_rows(p.combine_index, back), send_rows, stream);
    const std::size_t rb = static_cast<std::size_t>(h) * dtype_size(expert_output.dtype);
    const auto sb = scaled_sizes(combine_.send_count, rb), hb = scaled_sizes(combine_.home_count, rb);
    comm_->all_to_all_v(send_rows.data, sb, offsets_of(sb), home_rows.data, hb, offsets_of(hb),
                        stream);
    const TensorView rows(p.home_row.data, DType::kI32, Shape{m, width}, ops_->device());
    ops_->unpermute_reduce(home_rows, rows, own_weights_, output, stream);
  }

 private:
  struct Pieces {
    TensorView scaled, send_index;
    QuantizedView local, send, recv, batched;
    TensorView send_ids, send_weights, recv_ids, recv_weights;
    TensorView expert_num_tokens, counts, offsets, sorted, permuted_row;
    TensorView combine_index, combine_send, combine_recv, home_row;
  };

  Pieces layout(detail::ByteCarver& c, const MoeProblem& problem) const {
    Pieces p;
    const std::int64_t h = problem.hidden_size(), k = problem.top_k(), cap = capacity_;
    const std::int64_t r_max = cap * ranks_;  // tokens sent (<= C per destination) or received
    const DType in = input_dtype(problem);
    if (problem.apply_router_weight_on_input()) p.scaled = c.take(DType::kF32, Shape{cap, h});
    p.local = take_quantized(c, problem, cap, in);
    p.send_index = c.take(DType::kI32, Shape{r_max});
    p.send = take_quantized(c, problem, r_max, in);
    p.recv = take_quantized(c, problem, r_max, in);
    p.send_ids = c.take(DType::kI32, Shape{r_max, k});
    p.send_weights = c.take(DType::kF32, Shape{r_max, k});
    p.recv_ids = c.take(DType::kI32, Shape{r_max, k});
    p.recv_weights = c.take(DType::kF32, Shape{r_max, k});
    if (batched()) {
      const std::int64_t e_local = problem.num_local_experts(), t_max = cap * ranks_;
      QuantizedView flat = take_quantized(c, problem, 1, in);  // shapes of one row, per scheme
      p.batched.config = flat.config;
      std::vector<TensorView*> f = pieces(flat), b{&p.batched.values};
      const std::vector<bool> per_tensor = per_tensor_flags(flat);
      if (flat.scales.defined()) b.push_back(&p.batched.scales);
      if (flat.global_scale.defined()) b.push_back(&p.batched.global_scale);
      for (std::size_t i = 0; i < f.size(); ++i) {
        if (per_tensor[i]) {
          *b[i] = c.take(f[i]->dtype, Shape{e_local});
          continue;
        }
        std::vector<std::int64_t> dims{e_local, t_max};
        for (int d = 1; d < f[i]->rank(); ++d) dims.push_back(f[i]->size(d));
        *b[i] = c.take(f[i]->dtype, Shape(dims));
      }
      p.expert_num_tokens = c.take(DType::kI32, Shape{e_local});
      p.counts = c.take(DType::kI32, Shape{e_local});
      p.offsets = c.take(DType::kI32, Shape{e_local + 1});
      p.sorted = c.take(DType::kI32, Shape{permute_capacity(r_max, static_cast<int>(k),
                                                            static_cast<int>(e_local), 1)});
      p.permuted_row = c.take(DType::kI32, Shape{r_max, k});
    }
    // Combine: rows sent back (slot rows: <= R_max * k; partial sums: <= R_max) and received
    // home (slot rows: <= C * k; partial sums: <= C * P), 4-byte elements (f32 or bf16 fit).
    const bool partial = partial_sums();
    const std::int64_t back = partial ? r_max : r_max * k, home = partial ? cap * ranks_ : cap * k;
    p.combine_index = c.take(DType::kI32, Shape{back});
    p.combine_send = c.take(DType::kF32, Shape{back, h});
    p.combine_recv = c.take(DType::kF32, Shape{home, h});
    p.home_row = c.take(DType::kI32, Shape{cap, partial ? ranks_ : k});
    return p;
  }

  // Gathers the rows of `src` this rank sends into `send` (grouped by destination) and exchanges
  // them; returns the received rows [R, ...].
  TensorView exchange(const TensorView& src, const TensorView& send_index, const TensorView& send,
                      const TensorView& recv, StreamHandle stream) {
    const TensorView s = first_rows(send, send_index.size(0));
    ops_->gather_rows(src, send_index, s, stream);
    const std::size_t rb = bytes_per_row(send);
    const auto sb = scaled_sizes(dispatch_.send_count, rb), rcv = scaled_sizes(recv_count_, rb);
    const TensorView r = first_rows(recv, received_);
    comm_->all_to_all_v(s.data, sb, offsets_of(sb), r.data, rcv, offsets_of(rcv), stream);
    return r;
  }

  template <typename Row>
  void plan_combine_now(std::int64_t m, int k, Row row) {
    combine_ = plan_combine(recv_ids_.data(), recv_count_, own_ids_.data(), m, k, dispatch_,
                            owner_, rank_, partial_sums(), row);
  }

  void upload_combine(const Pieces& p, StreamHandle stream) {
    ops_->upload(p.combine_index.data, combine_.send_row.data(), combine_.send_row.size() * 4,
                 stream);
    ops_->upload(p.home_row.data, combine_.home_row.data(), combine_.home_row.size() * 4, stream);
  }

  // The state between prepare and the matching finalize (host plan; device copies in the
  // workspace).
  std::vector<std::int32_t> own_ids_, recv_ids_;
  DispatchPlan dispatch_;
  CombinePlan combine_;
  std::vector<std::int64_t> recv_count_;
  std::int64_t received_ = 0;
  TensorView own_weights_;
};

}  // namespace

std::unique_ptr<ModularPrepareFinalize> make_all_to_all_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops, const MoeProblem& problem,
    EpPrepareFinalizeOptions options) {
  return std::make_unique<AllToAllPrepareFinalize>(std::move(comm), std::move(ops), problem,
                                                   options);
}

}  // namespace moekit::ep
