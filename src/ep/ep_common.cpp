#include "ep/ep_common.hpp"

#include <string>

#include "framework/prepare_checks.hpp"
#include "moekit/core/error.hpp"

namespace moekit::ep {

TensorView row_range(const TensorView& t, std::int64_t first, std::int64_t n) {
  if (!t.defined()) return t;
  Shape s = t.shape;
  const std::size_t rb = bytes_per_row(t);
  s[0] = n;
  return TensorView(static_cast<unsigned char*>(t.data) + static_cast<std::size_t>(first) * rb,
                    t.dtype, s, t.device);
}

TensorView first_rows(const TensorView& t, std::int64_t n) { return row_range(t, 0, n); }

std::size_t bytes_per_row(const TensorView& t) {
  std::int64_t per = 1;
  for (int d = 1; d < t.rank(); ++d) per *= t.size(d);
  return static_cast<std::size_t>(per) * dtype_size(t.dtype);
}

QuantizedView take_quantized(detail::ByteCarver& c, const MoeProblem& problem, std::int64_t rows,
                             DType input_dtype) {
  QuantizedView q;
  q.config = problem.activation_quant;
  q.config.layout = ScaleLayout::kLinear;
  if (q.config.scheme == QuantScheme::kBF16) {
    q.values = c.take(input_dtype, Shape{rows, problem.hidden_size()});
    return q;
  }
  const QuantShapes s = infer_quant_shapes(Shape{rows, problem.hidden_size()}, q.config);
  q.values = c.take(s.value_dtype, s.values);
  if (s.scales.rank() > 0) q.scales = c.take(s.scale_dtype, s.scales);
  if (s.has_global_scale) q.global_scale = c.take(DType::kF32, s.global_scale);
  return q;
}

std::vector<bool> per_tensor_flags(const QuantizedView& q) {
  // By role, never by address (shape-only layouts have null data everywhere).
  const QuantScheme s = q.config.scheme;
  std::vector<bool> out{false};
  if (q.scales.defined()) out.push_back(s == QuantScheme::kFP8PerTensor);
  if (q.global_scale.defined()) out.push_back(s == QuantScheme::kNVFP4);
  return out;
}

std::vector<TensorView*> pieces(QuantizedView& q) {
  std::vector<TensorView*> out{&q.values};
  if (q.scales.defined()) out.push_back(&q.scales);
  if (q.global_scale.defined()) out.push_back(&q.global_scale);
  return out;
}

EpPrepareFinalizeBase::EpPrepareFinalizeBase(std::shared_ptr<Communicator> comm,
                                             std::unique_ptr<EpOps> ops,
                                             const MoeProblem& problem,
                                             EpPrepareFinalizeOptions options)
    : comm_(std::move(comm)),
      ops_(std::move(ops)),
      options_(options),
      format_(problem.parallel.activation_format()) {
  MOEKIT_CHECK_ARG(comm_ != nullptr, "comm", "a communicator", "null");
  ranks_ = comm_->size();
  rank_ = comm_->rank();
  capacity_ = problem.num_tokens;
  options_.expert_reduce = resolve_reduce_policy(options_.expert_reduce, format_);
}

std::string EpPrepareFinalizeBase::name() const {
  return std::string(ops_->device().is_cuda() ? "cuda" : "cpu") + "_ep_" +
         std::string(dispatch_kind_name(options_.kind)) + (batched() ? "_batched" : "") + "[" +
         comm_->name() + " x" + std::to_string(ranks_) + "]";
}

Support EpPrepareFinalizeBase::supports(const MoeProblem& p) const {
  const ParallelConfig& par = p.parallel;
  if (comm_->device().kind != ops_->device().kind)
    return Support::no("communicator '" + comm_->name() + "' works on " + comm_->device().str() +
                       " memory, the PrepareFinalize on " + ops_->device().str());
  if (par.ep_size != ranks_)
    return Support::no("parallel.ep_size " + std::to_string(par.ep_size) +
                       " differs from the communicator's " + std::to_string(ranks_) + " ranks");
  if (par.ep_rank != rank_)
    return Support::no("parallel.ep_rank " + std::to_string(par.ep_rank) +
                       " differs from the communicator rank " + std::to_string(rank_));
  if (par.dp_size != par.ep_size)
    return Support::no("parallel.dp_size " + std::to_string(par.dp_size) + " must equal ep_size " +
                       std::to_string(par.ep_size) + " (each rank dispatches its own tokens)");
  if (p.num_tokens != capacity_)
    return Support::no("tokens per rank " + std::to_string(p.num_tokens) +
                       " differ from the capacity this object was built for (" +
                       std::to_string(capacity_) + ")");
  if (par.activation_format() != format_)
    return Support::no("built for the " + std::string(activation_format_name(format_)) +
                       " format, the parallel config gives " +
                       std::string(activation_format_name(par.activation_format())));
  if (options_.kind == DispatchKind::kNaive && batched())
    return Support::no("naive dispatch all-gathers into the standard format; low-latency "
                       "(batched) dispatch needs a2a");
  const ReducePolicy r = options_.expert_reduce;
  if (batched() && r != ReducePolicy::kBatchedPerExpert)
    return Support::no("batched dispatch combines per-expert rows: the experts' reduce policy must "
                       "be batched_per_expert, got " + std::string(reduce_policy_name(r)));
  if (!batched() && r != ReducePolicy::kContiguous && r != ReducePolicy::kAlreadyReduced)
    return Support::no("standard dispatch needs experts with a contiguous or already_reduced "
                       "output, got " + std::string(reduce_policy_name(r)));
  return detail::prepare_input_supports(p);
}

void EpPrepareFinalizeBase::setup(const MoeProblem& problem, StreamHandle stream) {
  check_ranks_agree(*comm_, problem, options_.kind);
  owner_ = expert_owners(*comm_, problem.parallel, problem.num_experts());
  const std::size_t e = static_cast<std::size_t>(problem.num_experts());
  std::vector<std::int32_t> map(e);
  for (std::size_t g = 0; g < e; ++g)
    map[g] = problem.parallel.expert_map.empty() ? static_cast<std::int32_t>(g)
                                                 : problem.parallel.expert_map[g];
  expert_map_ = Buffer(e * sizeof(std::int32_t), ops_->device());
  ops_->upload(expert_map_.data(), map.data(), e * sizeof(std::int32_t), stream);
  set_up_ = true;
}

void EpPrepareFinalizeBase::check_policy(ReducePolicy policy) const {
  MOEKIT_CHECK(set_up_, name(), ": prepare/finalize before setup() (FusedMoEKernel::prepare)");
  MOEKIT_CHECK_ARG(policy == options_.expert_reduce, "reduce policy",
                   std::string(reduce_policy_name(options_.expert_reduce)) +
                       " (EpPrepareFinalizeOptions::expert_reduce)",
                   reduce_policy_name(policy));
}

void EpPrepareFinalizeBase::quantize_local(const MoeProblem& problem, const TensorView& x,
                                           const TensorView& topk_weights,
                                           const TensorView& static_scale,
                                           const TensorView& scaled, QuantizedView& local,
                                           bool zero_padding, StreamHandle stream) {
  const std::int64_t m = x.size(0);
  MOEKIT_CHECK_ARG(m <= capacity_, "x rows", "<= " + std::to_string(capacity_) + " (per rank)", m);
  TensorView input = x;
  if (problem.apply_router_weight_on_input()) {
    const TensorView s = first_rows(scaled, m);
    if (m > 0) ops_->scale_rows_by_weight(x, topk_weights, s, stream);
    input = s;
  }
  const QuantScheme scheme = local.config.scheme;
  const std::vector<bool> flags = per_tensor_flags(local);
  if (scheme == QuantScheme::kBF16) {
    ops_->copy(local.values.data, input.data, input.nbytes(), stream);
  } else {
    const bool needs_static = scheme == QuantScheme::kFP8PerTensor || scheme == QuantScheme::kNVFP4;
    MOEKIT_CHECK(!needs_static || static_scale.defined(), name(), ": activations '",
                 scheme_name(scheme), "' with a dynamic per-tensor scale would be quantized with a "
                 "different scale on each rank: pass a static input scale (MoeWeights::a13_scale)");
    QuantizedView rows = local;
    const std::vector<TensorView*> row_pieces = pieces(rows);
    for (std::size_t i = 0; i < row_pieces.size(); ++i)
      if (!flags[i]) *row_pieces[i] = first_rows(*row_pieces[i], m);
    if (m > 0) ops_->quantize(input, local.config, rows, static_scale, stream);
    // Per-tensor pieces: the static scale itself (quantize writes it only when m > 0, and a rank
    // with no tokens still hands it to the experts for the other ranks' tokens).
    for (std::size_t i = 0; i < row_pieces.size(); ++i)
      if (flags[i]) ops_->copy(pieces(local)[i]->data, static_scale.data, 4, stream);
  }
  if (!zero_padding) return;
  const std::vector<TensorView*> local_pieces = pieces(local);
  for (std::size_t i = 0; i < local_pieces.size(); ++i) {
    if (flags[i]) continue;
    const TensorView* piece = local_pieces[i];
    const std::size_t rb = bytes_per_row(*piece);
    ops_->zero(static_cast<unsigned char*>(piece->data) + static_cast<std::size_t>(m) * rb,
               static_cast<std::size_t>(capacity_ - m) * rb, stream);
  }
}

}  // namespace moekit::ep
