// `moekit run --ep N` (ep_run.hpp).
#include "run/ep_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moekit/comm/communicator.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/oracle/dispatch.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/routing/routing.hpp"
#include "run/backend_choice.hpp"

namespace moekit {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TensorView rows_of(const Tensor& t, std::int64_t first, std::int64_t n) {
  const std::int64_t width = t.shape()[1];
  return TensorView(static_cast<char*>(t.data()) + first * width * dtype_size(t.dtype()), t.dtype(),
                    Shape{n, width});
}

// Every rank's [C, H] f32 block to every rank, in pieces small enough for any engine's host path.
std::vector<float> gather_blocks(Communicator& comm, const std::vector<float>& block) {
  const std::size_t n = block.size(), ranks = static_cast<std::size_t>(comm.size());
  std::vector<float> all(n * ranks);
  const std::size_t piece = 32 * 1024;  // floats per rank per call
  std::vector<float> tmp(piece * ranks);
  for (std::size_t at = 0; at < n; at += piece) {
    const std::size_t len = std::min(piece, n - at);
    comm.all_gather_host(block.data() + at, tmp.data(), len * sizeof(float));
    for (std::size_t r = 0; r < ranks; ++r)
      std::copy(tmp.begin() + static_cast<std::ptrdiff_t>(r * len),
                tmp.begin() + static_cast<std::ptrdiff_t>((r + 1) * len),
                all.begin() + static_cast<std::ptrdiff_t>(r * n + at));
  }
  return all;
}

}  // namespace

EpRunReport run_ep_job(const EpRunOptions& o) {
  // One GPU per rank: pin it before anything touches the CUDA runtime.
  if (const int local = launcher_local_rank(); local >= 0 && !std::getenv("CUDA_VISIBLE_DEVICES"))
    setenv("CUDA_VISIBLE_DEVICES", std::to_string(local).c_str(), 1);
  MOEKIT_CHECK_ARG(o.ep >= 1, "--ep", ">= 1", o.ep);
  const RunJobOptions& job = o.job;
  MOEKIT_CHECK_ARG(job.checkpoint.empty() && job.input.empty() && job.output.empty(),
                   "--checkpoint/--input/--output", "not with --ep (random layers only)",
                   "given");
  MoeProblem problem = cli_problem(job.preset, job.quant, job.tokens, job.mode, o.ep, false,
                                   job.hidden_size, job.intermediate_size, job.num_experts);
  const MoeLayerConfig config = problem.layer;
  const std::int64_t total = job.tokens, ep = o.ep;

  // The backend and the device: the oracle on this machine, for rank 0's share of the experts.
  std::shared_ptr<Communicator> host_comm;
  if (mpi_available() && launched_by_mpi()) host_comm = mpi_world();
  const DeviceCapabilities device = DeviceCapabilities::detect();
  problem.parallel = ParallelConfig::expert_parallel(config.num_experts, o.ep, 0, o.ep);
  problem.parallel.low_latency_dispatch = o.low_latency;
  problem.num_tokens = std::max<std::int64_t>((total + ep - 1) / ep, 1);  // C: tokens per rank
  app::BackendRequest request;  // the one selection path of run / oracle (backend_choice.hpp)
  request.name = job.backend;
  request.verbose = job.verbose;
  const BackendSelection sel = app::choose_backend(problem, device, request);
  const bool on_gpu = backend_traits(sel.backend).on_cuda;
  const DispatchSelection dispatch = select_dispatch(problem, o.dispatch);
  std::shared_ptr<Communicator> comm;
  if (on_gpu) {
    comm = make_nccl_communicator(0);
    if (!host_comm) host_comm = comm;
  } else {
    MOEKIT_CHECK(host_comm != nullptr, "run --ep on CPU ranks needs MPI: launch with mpirun -np ",
                 o.ep, " (this build ", mpi_available() ? "has" : "lacks", " MPI)");
    comm = host_comm;
  }
  MOEKIT_CHECK_ARG(comm->size() == o.ep, "--ep", std::to_string(comm->size()) +
                   " (the ranks the launcher started)", o.ep);
  const int rank = comm->rank();
  problem.parallel = ParallelConfig::expert_parallel(config.num_experts, o.ep, rank, o.ep);
  problem.parallel.low_latency_dispatch = o.low_latency;
  // CPU ranks run in f32 (the bf16 inputs widened exactly), as run_job's reference backend does:
  // its output is then checked against the float64 reference with run_job's bound.
  if (!on_gpu) problem.activation_dtype = DType::kF32;

  // The layer and the inputs: identical on every rank (same seed), as run_job builds them.
  const auto t_setup = std::chrono::steady_clock::now();
  const MoeWeights weights = random_moe_weights(config, problem.weight_quant, job.seed);
  const RouterWeights router = random_router_weights(config, job.seed + 1);
  const Tensor hidden = random_hidden_states(total, config.hidden_size, DType::kBF16, job.seed + 2);
  const Tensor logits = router_logits_reference(hidden, router);
  const RoutingResult routing = route_reference(logits, router.correction_bias, config.routing);
  const MoeWeights local =
      select_experts(weights, problem.parallel.local_experts(weights.num_experts));
  Tensor hidden_f32(DType::kF32, hidden.shape());
  for (std::int64_t i = 0; i < hidden.numel(); ++i)
    hidden_f32.ptr<float>()[i] = bf16_to_float(hidden.ptr<std::uint16_t>()[i]);
  const std::int64_t first = total * rank / ep, m = total * (rank + 1) / ep - first;

  // The kernel: the EP PrepareFinalize chosen by the oracle + the backend's experts.
  const std::int64_t cap = problem.num_tokens;
  std::unique_ptr<Experts> experts;
  if (sel.backend == Backend::kCpuReference) {
    experts = make_cpu_standard_experts(ReducePolicy::kContiguous);
  } else if (sel.backend == Backend::kCpuBatched) {
    experts = make_cpu_batched_experts(cap, o.ep, ReducePolicy::kBatchedPerExpert);
  } else {
    const BackendRegistration* reg = BackendRegistry::instance().find(sel.backend);
    MOEKIT_CHECK(reg != nullptr, "run --ep: backend ", moe_backend_name(sel.backend),
                 " is not compiled in");
    MoeProblem ep_problem = problem;
    ep_problem.num_tokens = o.low_latency ? cap : cap * ep;
    experts = reg->make_experts(ep_problem);
  }
  EpPrepareFinalizeOptions pfo;
  pfo.kind = dispatch.kind;
  pfo.expert_reduce = resolve_reduce_policy(experts->reduce_policy(), experts->activation_format());
  std::unique_ptr<ModularPrepareFinalize> pf =
      on_gpu ? make_cuda_ep_prepare_finalize(comm, problem, pfo)
             : make_cpu_ep_prepare_finalize(comm, problem, pfo);
  FusedMoEKernel kernel(std::move(pf), std::move(experts));
  kernel.prepare(problem, local);
  const double setup_ms = ms_since(t_setup);

  std::vector<float> block(static_cast<std::size_t>(cap * config.hidden_size), 0.0f);
  const auto t_layer = std::chrono::steady_clock::now();
  if (!on_gpu) {
    Tensor y(DType::kF32, Shape{m, config.hidden_size});
    kernel.apply(rows_of(hidden_f32, first, m), rows_of(routing.topk_ids, first, m),
                 rows_of(routing.topk_weights, first, m), y);
    std::memcpy(block.data(), y.data(), y.nbytes());
  } else {
    const Device gpu = Device::cuda(0);
    Tensor x(DType::kBF16, Shape{m, config.hidden_size}, gpu), ids(DType::kI32, Shape{m, config.top_k()}, gpu),
        wts(DType::kF32, Shape{m, config.top_k()}, gpu), y(DType::kBF16, Shape{m, config.hidden_size}, gpu);
    copy(x, rows_of(hidden, first, m));
    copy(ids, rows_of(routing.topk_ids, first, m));
    copy(wts, rows_of(routing.topk_weights, first, m));
    kernel.apply(x, ids, wts, y);
    comm->synchronize(nullptr);
    Tensor host(DType::kBF16, Shape{m, config.hidden_size});
    copy(host, y);
    for (std::int64_t i = 0; i < host.numel(); ++i)
      block[static_cast<std::size_t>(i)] = bf16_to_float(host.ptr<std::uint16_t>()[i]);
  }
  double layer_ms = ms_since(t_layer);

  // Rank 0 gathers every rank's rows and its time; every rank takes part.
  const std::vector<float> all = gather_blocks(*host_comm, block);
  std::vector<double> times(static_cast<std::size_t>(ep));
  host_comm->all_gather_host(&layer_ms, times.data(), sizeof(double));
  EpRunReport rep;
  rep.ep = o.ep;
  rep.dispatch = dispatch.str();
  rep.communicator = comm->name();
  rep.is_rank0 = rank == 0;
  rep.min_rank_ms = *std::min_element(times.begin(), times.end());
  rep.max_rank_ms = *std::max_element(times.begin(), times.end());
  if (rank != 0) return rep;

  Tensor out(DType::kF32, Shape{total, config.hidden_size});
  for (std::int64_t r = 0; r < ep; ++r) {
    const std::int64_t f = total * r / ep, n = total * (r + 1) / ep - f;
    std::memcpy(out.ptr<float>() + f * config.hidden_size,
                all.data() + static_cast<std::size_t>(r * cap * config.hidden_size),
                static_cast<std::size_t>(n * config.hidden_size) * sizeof(float));
  }
  RunJobReport& r = rep.run;
  describe_layer(r, config, total);
  r.quant = problem.weight_quant.str();
  r.mode = job.mode;
  r.backend = std::string(moe_backend_name(sel.backend));
  r.seed = job.seed;
  r.threads = num_threads();
  r.experts_touched = experts_touched(routing.topk_ids, config.num_experts);
  r.setup_ms = setup_ms;
  r.layer_ms = rep.max_rank_ms;
  MoeReferenceOptions ro;
  if (problem.activation_quant.scheme != QuantScheme::kBF16) {
    ro.numerics = MoeNumerics::kEmulateActivationQuant;
    ro.activation_quant = problem.activation_quant;
  }
  const auto t_ref = std::chrono::steady_clock::now();
  const std::vector<double> ref = moe_reference_float64(hidden, routing.topk_ids,
                                                        routing.topk_weights, config, weights, ro);
  r.reference_ms = ms_since(t_ref);
  r.bound = run_error_bound(on_gpu ? sel.backend : Backend::kCpuReference, ro.numerics,
                            problem.activation_quant.scheme,
                            total * config.top_k() * config.intermediate_size);
  check_against_reference(r, out, ref);
  if (!on_gpu) {  // the single-process CPU layer of every token, bitwise
    MoeProblem single = problem;
    single.parallel = ParallelConfig{};
    single.num_tokens = std::max<std::int64_t>(total, 1);
    FusedMoEKernel k(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
    k.prepare(single, weights);
    Tensor y(DType::kF32, Shape{total, config.hidden_size});
    k.apply(hidden_f32, routing.topk_ids, routing.topk_weights, y);
    const bool same = y.nbytes() == 0 || std::memcmp(y.data(), out.data(), y.nbytes()) == 0;
    rep.bitwise_vs_single_process = same ? 1 : 0;
    r.pass = r.pass && same;
  }
  return rep;
}

std::string EpRunReport::text() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "  expert parallel: %d ranks (%s), dispatch %s\n"
                "  per-rank layer time: min %.3f ms  max %.3f ms%s\n",
                ep, communicator.c_str(), dispatch.c_str(), min_rank_ms, max_rank_ms,
                bitwise_vs_single_process < 0 ? ""
                : bitwise_vs_single_process ? "\n  bitwise equal to the single-process CPU layer: yes"
                                            : "\n  bitwise equal to the single-process CPU layer: NO");
  std::string t = run.text();
  const std::size_t last = t.rfind('\n', t.size() >= 2 ? t.size() - 2 : 0);
  return t.substr(0, last + 1) + buf + t.substr(last + 1);
}

std::string EpRunReport::json() const {
  nlohmann::json j = nlohmann::json::parse(run.json());
  j["ep"] = ep;
  j["dispatch"] = dispatch;
  j["communicator"] = communicator;
  j["min_rank_ms"] = min_rank_ms;
  j["max_rank_ms"] = max_rank_ms;
  if (bitwise_vs_single_process >= 0) j["bitwise_vs_single_process"] = bitwise_vs_single_process == 1;
  return j.dump(2);
}

}  // namespace moekit
