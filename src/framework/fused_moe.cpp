// FusedMoEKernel: pairing checks, workspace carving and the chunked runner.
#include "moekit/framework/fused_moe.hpp"

#include <algorithm>
#include <sstream>

#include "moekit/core/error.hpp"

namespace moekit {
namespace {

constexpr std::size_t kAlign = 256;

std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::string describe(const PrepareFinalize& pf) {
  std::ostringstream os;
  os << "PrepareFinalize '" << pf.name() << "' (" << activation_format_name(pf.activation_format())
     << ", " << (pf.is_monolithic() ? "monolithic" : "modular") << ")";
  return os.str();
}

std::string describe(const Experts& ex) {
  std::ostringstream os;
  os << "Experts '" << ex.name() << "' (" << activation_format_name(ex.activation_format()) << ", "
     << (ex.is_monolithic() ? "monolithic" : "modular") << ")";
  return os.str();
}

// A view of rows [begin, begin + rows) of a contiguous tensor (absent stays absent).
TensorView row_slice(const TensorView& t, std::int64_t begin, std::int64_t rows) {
  if (!t.defined()) return t;
  Shape s = t.shape;
  const std::int64_t row_elems = t.size(0) ? t.numel() / t.size(0) : 0;
  s[0] = rows;
  auto* base = static_cast<unsigned char*>(t.data) +
               static_cast<std::size_t>(begin * row_elems) * dtype_size(t.dtype);
  return TensorView(base, t.dtype, s, t.device);
}

void check_rows(const TensorView& t, const char* name, std::int64_t rows, std::int64_t cols) {
  MOEKIT_CHECK_ARG(t.defined() && t.rank() == 2, name, "a 2-D tensor", t.str());
  MOEKIT_CHECK_ARG(t.is_contiguous(), std::string(name) + " layout", "contiguous", "strided");
  MOEKIT_CHECK_ARG(t.size(0) == rows && t.size(1) == cols, std::string(name) + " shape",
                   (Shape{rows, cols}.str()), t.shape.str());
}

}  // namespace

Support check_compatible(const PrepareFinalize& pf, const Experts& ex) {
  if (pf.is_monolithic() != ex.is_monolithic()) {
    return Support::no(describe(pf) + " cannot be paired with " + describe(ex) +
                       ": one is monolithic (takes router logits), the other modular");
  }
  if (pf.activation_format() != ex.activation_format()) {
    return Support::no(describe(pf) + " cannot be paired with " + describe(ex) +
                       ": activation formats differ");
  }
  if (pf.activation_format() == ActivationFormat::kBatched &&
      (pf.max_tokens_per_rank() != ex.max_tokens_per_rank() ||
       pf.num_dispatchers() != ex.num_dispatchers())) {
    std::ostringstream os;
    os << describe(pf) << " cannot be paired with " << describe(ex)
       << ": batched buffers differ (max_tokens_per_rank x num_dispatchers "
       << pf.max_tokens_per_rank() << "x" << pf.num_dispatchers() << " vs "
       << ex.max_tokens_per_rank() << "x" << ex.num_dispatchers() << ")";
    return Support::no(os.str());
  }
  if (!(pf.device() == ex.device())) {
    return Support::no(describe(pf) + " cannot be paired with " + describe(ex) +
                       ": devices differ (" + pf.device().str() + " vs " + ex.device().str() + ")");
  }
  return Support::yes();
}

struct FusedMoEKernel::Pieces {
  TensorView pf_ws, ws13, ws2, expert_out, topk_ids, topk_weights;
};

FusedMoEKernel::FusedMoEKernel(std::unique_ptr<PrepareFinalize> prepare_finalize,
                               std::unique_ptr<Experts> experts, FusedMoEOptions options)
    : prepare_finalize_(std::move(prepare_finalize)),
      experts_(std::move(experts)),
      options_(options) {
  MOEKIT_CHECK_ARG(prepare_finalize_ != nullptr, "prepare_finalize", "non-null", "null");
  MOEKIT_CHECK_ARG(experts_ != nullptr, "experts", "non-null", "null");
  MOEKIT_CHECK_ARG(options_.max_chunk_tokens >= 0, "options.max_chunk_tokens", ">= 0",
                   options_.max_chunk_tokens);
  const Support s = check_compatible(*prepare_finalize_, *experts_);
  if (!s) throw Error("FusedMoEKernel: " + s.reason);
  router_ = [](const TensorView& logits, const TensorView& bias, const RoutingConfig& config,
               const TensorView& ids, const TensorView& weights,
               StreamHandle) { route_reference(logits, bias, config, ids, weights); };
}

FusedMoEKernel::~FusedMoEKernel() = default;
FusedMoEKernel::FusedMoEKernel(FusedMoEKernel&&) noexcept = default;
FusedMoEKernel& FusedMoEKernel::operator=(FusedMoEKernel&&) noexcept = default;

std::string FusedMoEKernel::name() const {
  return prepare_finalize_->name() + " + " + experts_->name();
}

std::int64_t FusedMoEKernel::chunk_tokens(const MoeProblem& problem) const {
  std::int64_t c = problem.num_tokens;
  if (options_.max_chunk_tokens > 0) c = std::min(c, options_.max_chunk_tokens);
  return std::max<std::int64_t>(c, 1);
}

Support FusedMoEKernel::supports(const MoeProblem& problem) const {
  try {
    problem.validate();
  } catch (const Error& e) {
    return Support::no(std::string("invalid problem: ") + e.what());
  }
  MoeProblem chunk = problem;
  chunk.num_tokens = chunk_tokens(problem);
  Support s = prepare_finalize_->supports(chunk);
  if (!s) return Support::no("PrepareFinalize '" + prepare_finalize_->name() + "': " + s.reason);
  s = experts_->supports(prepare_finalize_->experts_problem(chunk));
  if (!s) return Support::no("Experts '" + experts_->name() + "': " + s.reason);
  return s;
}

std::size_t FusedMoEKernel::workspace_bytes(const MoeProblem& problem) const {
  MoeProblem chunk = problem;
  chunk.num_tokens = chunk_tokens(problem);
  const auto shapes = experts_->workspace_shapes(prepare_finalize_->experts_problem(chunk));
  const std::size_t topk = static_cast<std::size_t>(chunk.num_tokens * chunk.top_k()) * 4;
  return aligned(prepare_finalize_->workspace_shape(chunk).nbytes()) +
         aligned(shapes.workspace13.nbytes()) + aligned(shapes.workspace2.nbytes()) +
         aligned(shapes.output.nbytes()) + 2 * aligned(topk);
}

FusedMoEKernel::Pieces FusedMoEKernel::carve(void* base) const {
  const auto shapes = experts_->workspace_shapes(prepare_finalize_->experts_problem(problem_));
  const TensorSpec pf = prepare_finalize_->workspace_shape(problem_);
  const Device dev = device();
  auto* p = static_cast<unsigned char*>(base);
  Pieces w;
  auto take = [&](const TensorSpec& spec) {
    TensorView v = spec.view(p, dev);
    p += aligned(spec.nbytes());
    return v;
  };
  w.pf_ws = take(pf);
  w.ws13 = take(shapes.workspace13);
  w.ws2 = take(shapes.workspace2);
  w.expert_out = take(shapes.output);
  const std::int64_t m = problem_.num_tokens, k = problem_.top_k();
  w.topk_ids = take({DType::kI32, Shape{m, k}});
  w.topk_weights = take({DType::kF32, Shape{m, k}});
  return w;
}

void FusedMoEKernel::prepare(const MoeProblem& problem, const MoeWeights& weights,
                             const TensorView& workspace, StreamHandle stream) {
  const Support s = supports(problem);
  if (!s)
    throw Error("FusedMoEKernel '" + name() + "' does not support " + problem.str() + ": " +
                s.reason);
  problem_ = problem;
  problem_.num_tokens = chunk_tokens(problem);
  prepare_finalize_->setup(problem_, stream);
  experts_->prepare_weights(prepare_finalize_->experts_problem(problem_), weights, stream);
  a1_static_scale_ = {};
  const QuantScheme a = problem.activation_quant.scheme;
  if (weights.a13_scale.defined() &&
      (a == QuantScheme::kNVFP4 || a == QuantScheme::kFP8PerTensor)) {
    a1_static_scale_ =
        TensorView(weights.a13_scale.data(), DType::kF32, Shape{1}, weights.a13_scale.device());
  }
  const std::size_t bytes = workspace_bytes(problem);
  if (workspace.defined()) {
    MOEKIT_CHECK_ARG(workspace.nbytes() >= bytes, "workspace bytes", ">= " + std::to_string(bytes),
                     workspace.nbytes());
    MOEKIT_CHECK_ARG(workspace.device == device(), "workspace device", device().str(),
                     workspace.device.str());
    workspace_ = workspace;
    owned_workspace_.reset();
  } else {
    owned_workspace_ = Buffer(bytes, device());
    workspace_ = TensorView(owned_workspace_.data(), DType::kU8,
                            Shape{static_cast<std::int64_t>(bytes)}, device());
  }
  prepared_ = true;
}

void FusedMoEKernel::check_collective_rows(std::int64_t m) const {
  // Every rank must run the same number of collective steps: one chunk per apply.
  if (!prepare_finalize_->collective()) return;
  MOEKIT_CHECK_ARG(m <= problem_.num_tokens, "x rows (expert-parallel kernel)",
                   "<= " + std::to_string(problem_.num_tokens) +
                       " (the prepared tokens per rank: every rank runs one chunk per apply)",
                   m);
}

void FusedMoEKernel::run_modular_chunk(const TensorView& x, const TensorView& topk_ids,
                                       const TensorView& topk_weights, const TensorView& output,
                                       const Pieces& ws, StreamHandle stream) {
  auto& pf = static_cast<ModularPrepareFinalize&>(*prepare_finalize_);
  auto& ex = static_cast<ModularExperts&>(*experts_);
  const std::int64_t m = x.size(0);
  MoeProblem chunk = problem_;
  chunk.num_tokens = m;
  const DispatchedActivations d =
      pf.prepare(chunk, x, topk_ids, topk_weights, a1_static_scale_, ws.pf_ws, stream);
  // The experts' output for the dispatched tokens (this rank's own tokens without expert
  // parallelism).
  MoeProblem experts_chunk = pf.experts_problem(problem_);
  experts_chunk.num_tokens = d.num_tokens;
  const TensorSpec out_spec = ex.workspace_shapes(experts_chunk).output;
  const ReducePolicy policy = resolve_reduce_policy(ex.reduce_policy(), ex.activation_format());
  // Where finalize would only copy the experts' output into `output`, they write it there (not
  // when output overlaps x: experts may read x while they write their output).
  auto extent = [](const TensorView& v) {  // bytes from v.data to one past its last element
    std::int64_t last = 0;
    for (int d = 0; d < v.rank(); ++d) last += (v.size(d) - 1) * v.strides[d];
    return v.numel() == 0 ? std::size_t{0} : static_cast<std::size_t>(last + 1) * dtype_size(v.dtype);
  };
  const auto* o0 = static_cast<const char*>(output.data);
  const auto* x0 = static_cast<const char*>(x.data);
  const bool overlaps_x = o0 < x0 + extent(x) && x0 < o0 + extent(output);
  if (pf.finalize_is_copy(policy) && out_spec.dtype == output.dtype &&
      out_spec.shape == output.shape && output.is_contiguous() && !overlaps_x) {
    ex.apply(d, output, ws.ws13, ws.ws2, stream);
    return;
  }
  const TensorView expert_out = out_spec.view(ws.expert_out.data, device());
  ex.apply(d, expert_out, ws.ws13, ws.ws2, stream);
  pf.finalize(chunk, expert_out, policy, d, output, ws.pf_ws, stream);
}

void FusedMoEKernel::apply(const TensorView& x, const TensorView& topk_ids,
                           const TensorView& topk_weights, const TensorView& output,
                           StreamHandle stream) {
  MOEKIT_CHECK(prepared_, "FusedMoEKernel '", name(), "': apply() before prepare()");
  MOEKIT_CHECK(!experts_->is_monolithic(), "FusedMoEKernel '", name(),
               "' is monolithic: it takes router logits (apply_logits), not topk_ids");
  const std::int64_t h = problem_.hidden_size();
  const int k = problem_.top_k();
  MOEKIT_CHECK_ARG(x.defined() && x.rank() == 2, "x", "[M, H]", x.str());
  const std::int64_t m = x.size(0);
  check_rows(x, "x", m, h);
  MOEKIT_CHECK_ARG(x.dtype == problem_.activation_dtype, "x dtype",
                   dtype_name(problem_.activation_dtype), dtype_name(x.dtype));
  check_rows(topk_ids, "topk_ids", m, k);
  check_rows(topk_weights, "topk_weights", m, k);
  check_rows(output, "output", m, h);
  MOEKIT_CHECK_ARG(output.dtype == problem_.activation_dtype, "output dtype",
                   dtype_name(problem_.activation_dtype), dtype_name(output.dtype));
  const Pieces ws = carve(workspace_.data);
  const std::int64_t c = problem_.num_tokens;
  check_collective_rows(m);
  for (std::int64_t b = 0; b < m || (m == 0 && b == 0); b += c) {
    const std::int64_t rows = std::min(c, m - b);
    run_modular_chunk(row_slice(x, b, rows), row_slice(topk_ids, b, rows),
                      row_slice(topk_weights, b, rows), row_slice(output, b, rows), ws, stream);
    if (m == 0) break;
  }
}

void FusedMoEKernel::apply_logits(const TensorView& x, const TensorView& router_logits,
                                  const TensorView& output, const TensorView& correction_bias,
                                  StreamHandle stream) {
  MOEKIT_CHECK(prepared_, "FusedMoEKernel '", name(), "': apply_logits() before prepare()");
  const std::int64_t h = problem_.hidden_size();
  MOEKIT_CHECK_ARG(x.defined() && x.rank() == 2, "x", "[M, H]", x.str());
  const std::int64_t m = x.size(0);
  check_rows(x, "x", m, h);
  MOEKIT_CHECK_ARG(x.dtype == problem_.activation_dtype, "x dtype",
                   dtype_name(problem_.activation_dtype), dtype_name(x.dtype));
  check_rows(router_logits, "router_logits", m, problem_.num_experts());
  check_rows(output, "output", m, h);
  MOEKIT_CHECK_ARG(output.dtype == problem_.activation_dtype, "output dtype",
                   dtype_name(problem_.activation_dtype), dtype_name(output.dtype));
  const Pieces ws = carve(workspace_.data);
  const std::int64_t c = problem_.num_tokens;
  const int k = problem_.top_k();
  check_collective_rows(m);
  for (std::int64_t b = 0; b < m || (m == 0 && b == 0); b += c) {
    const std::int64_t rows = std::min(c, m - b);
    const TensorView xs = row_slice(x, b, rows), ls = row_slice(router_logits, b, rows);
    const TensorView os = row_slice(output, b, rows);
    if (experts_->is_monolithic()) {
      auto& pf = static_cast<MonolithicPrepareFinalize&>(*prepare_finalize_);
      auto& ex = static_cast<MonolithicExperts&>(*experts_);
      MoeProblem chunk = problem_;
      chunk.num_tokens = rows;
      const MonolithicInputs in =
          pf.prepare(chunk, xs, ls, correction_bias, a1_static_scale_, ws.pf_ws, stream);
      const TensorView expert_out =
          ex.workspace_shapes(chunk).output.view(ws.expert_out.data, device());
      ex.apply(in, expert_out, ws.ws13, ws.ws2, stream);
      pf.finalize(chunk, expert_out, os, ws.pf_ws, stream);
    } else {
      const TensorView ids(ws.topk_ids.data, DType::kI32, Shape{rows, k}, device());
      const TensorView wts(ws.topk_weights.data, DType::kF32, Shape{rows, k}, device());
      router_(ls, correction_bias, problem_.layer.routing, ids, wts, stream);
      run_modular_chunk(xs, ids, wts, os, ws, stream);
    }
    if (m == 0) break;
  }
}

}  // namespace moekit
