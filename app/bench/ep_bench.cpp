// `moekit bench --ep N`: for each preset x scheme x tokens per rank x dispatch, on every rank:
//   layer_ms  the EP layer (prepare + dispatch, experts, combine + finalize), median of reps;
//   comm_ms   the same with experts that do nothing (quantize + dispatch + combine alone);
//   bytes     what this rank receives (dispatch + combine), from the routing plan;
//   busbw     an ncclAllGather of the same size in the same run -> floor_ms = bytes / busbw;
// and, on rank 0, the same per-rank work on one GPU (the single-GPU layer of C tokens with E/ep
// experts' weights: what EP spreads). Weights: each rank generates only its local experts
// (full-size presets do not fit a host), routing uniform random over all experts.
#include "bench/ep_bench.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "ep/ep_plan.hpp"
#include "moekit/comm/communicator.hpp"
#include "moekit/core/error.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"

namespace moekit::bench {
namespace {

// Experts that compute nothing: the communication-only run. Output: zeros of the kAlreadyReduced
// shape [M, H] bf16.
class NoExperts final : public ModularExperts {
 public:
  std::string name() const override { return "no_experts"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(0); }
  Support supports(const MoeProblem&) const override { return Support::yes(); }
  WorkspaceShapes workspace_shapes(const MoeProblem& p) const override {
    return {{DType::kU8, Shape{1}}, {DType::kU8, Shape{1}},
            {DType::kBF16, Shape{p.num_tokens, p.hidden_size()}}};
  }
  void prepare_weights(const MoeProblem&, const MoeWeights&, StreamHandle) override {}
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }
  void apply(const DispatchedActivations&, const TensorView& out, const TensorView&,
             const TensorView&, StreamHandle s) override {
    MOEKIT_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(), static_cast<cudaStream_t>(s)));
  }
};

struct Scheme {
  const char* name;
  const char* weights;
  const char* activations;
  Backend backend;
};
const Scheme kSchemes[] = {{"bf16", "bf16", "bf16", Backend::kCudaBf16Grouped},
                           {"fp8_block", "fp8_block", "fp8_1x128", Backend::kCudaFp8BlockGrouped},
                           {"nvfp4", "nvfp4", "bf16", Backend::kCudaW4A16Grouped}};

const Scheme& scheme_of(const std::string& n) {
  for (const Scheme& s : kSchemes)
    if (n == s.name) return s;
  throw_arg_error("bench --ep", "--quant", "bf16 | fp8_block | nvfp4", n);
}

double median_ms(Communicator& comm, const std::function<void(cudaStream_t)>& step, int reps,
                 cudaStream_t s) {
  std::vector<double> t;
  cudaEvent_t a, b;
  MOEKIT_CUDA_CHECK(cudaEventCreate(&a));
  MOEKIT_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < reps + 3; ++i) {
    comm.barrier(s);
    MOEKIT_CUDA_CHECK(cudaEventRecord(a, s));
    step(s);
    MOEKIT_CUDA_CHECK(cudaEventRecord(b, s));
    comm.synchronize(s);
    float ms = 0;
    MOEKIT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 3) t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

void run_ep_bench(const EpBenchOptions& o) {
  if (const int local = launcher_local_rank(); local >= 0 && !std::getenv("CUDA_VISIBLE_DEVICES"))
    setenv("CUDA_VISIBLE_DEVICES", std::to_string(local).c_str(), 1);
  auto comm = make_nccl_communicator(0);
  MOEKIT_CHECK_ARG(comm->size() == o.ep, "--ep", std::to_string(comm->size()) + " (launched ranks)",
                   o.ep);
  const int ranks = comm->size(), rank = comm->rank();
  cudaStream_t s;
  MOEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  nlohmann::json rows = nlohmann::json::array();
  if (rank == 0)
    std::printf("%-12s %-9s %6s %-6s %10s %10s %7s %12s %9s %9s %7s %10s\n", "preset", "quant",
                "tok/rk", "disp", "layer_ms", "comm_ms", "share", "bytes/rank", "busGB/s",
                "floor_ms", "c/floor", "1gpu_ms");
  for (const std::string& preset : o.presets) {
    const MoeLayerConfig full = layer_preset(preset);
    MOEKIT_CHECK_ARG(full.num_experts % ranks == 0, "--ep", "a divisor of the experts",
                     full.num_experts);
    const int e_local = full.num_experts / ranks;
    const MoeLayerConfig local_cfg = scaled_layer_config(full, 0, 0, e_local);
    for (const std::string& q : o.quants) {
      const Scheme& sc = scheme_of(q);
      const MoeWeights weights =
          random_moe_weights(local_cfg, parse_quant_config(sc.weights), o.seed + rank);
      for (std::int64_t cap : o.tokens) {
        // Inputs and uniform routing (distinct experts per token), this rank's own.
        const std::int64_t h = full.hidden_size;
        const int k = full.top_k();
        const Tensor x_h = random_hidden_states(cap, h, DType::kBF16, o.seed + 100 + rank);
        Tensor ids_h(DType::kI32, Shape{cap, k}), w_h(DType::kF32, Shape{cap, k});
        std::mt19937 gen(static_cast<unsigned>(o.seed * 7919 + rank));
        std::vector<int> perm(static_cast<std::size_t>(full.num_experts));
        for (std::int64_t t = 0; t < cap; ++t) {
          for (int e = 0; e < full.num_experts; ++e) perm[static_cast<std::size_t>(e)] = e;
          for (int j = 0; j < k; ++j) {
            std::swap(perm[static_cast<std::size_t>(j)],
                      perm[static_cast<std::size_t>(j + gen() % (full.num_experts - j))]);
            ids_h.ptr<std::int32_t>()[t * k + j] = perm[static_cast<std::size_t>(j)];
            w_h.ptr<float>()[t * k + j] = 1.0f / k;
          }
        }
        Tensor x(DType::kBF16, x_h.shape(), Device::cuda(0)), ids(DType::kI32, ids_h.shape(), Device::cuda(0)),
            w(DType::kF32, w_h.shape(), Device::cuda(0)), y(DType::kBF16, Shape{cap, h}, Device::cuda(0));
        copy(x, x_h);
        copy(ids, ids_h);
        copy(w, w_h);
        MoeProblem p;
        p.num_tokens = cap;
        p.layer = full;
        p.weight_quant = parse_quant_config(sc.weights);
        p.activation_quant = parse_quant_config(sc.activations);
        p.activation_dtype = DType::kBF16;
        p.parallel = ParallelConfig::expert_parallel(full.num_experts, ranks, rank, ranks);
        // Same per-rank work on one GPU: C tokens over the E/ep local experts.
        double single_ms = 0;
        {
          MoeProblem sp = p;
          sp.layer = local_cfg;
          sp.parallel = ParallelConfig{};
          FusedMoEKernel k1 = make_moe_kernel(sc.backend, sp);
          k1.prepare(sp, weights);
          Tensor ids1(DType::kI32, ids_h.shape(), Device::cuda(0));
          Tensor ids1_h(DType::kI32, ids_h.shape());
          for (std::int64_t a = 0; a < ids_h.numel(); ++a)
            ids1_h.ptr<std::int32_t>()[a] = ids_h.ptr<std::int32_t>()[a] % e_local;
          copy(ids1, ids1_h);
          single_ms = median_ms(*comm, [&](cudaStream_t st) { k1.apply(x, ids1, w, y, st); },
                                o.reps, s);
        }
        for (const std::string& disp : o.dispatch) {
          const DispatchKind kind = disp == "naive" ? DispatchKind::kNaive : DispatchKind::kAllToAll;
          MoeProblem ep_p = p;
          ep_p.num_tokens = cap * ranks;
          const BackendRegistration* reg = BackendRegistry::instance().find(sc.backend);
          MOEKIT_CHECK(reg, "bench --ep: ", moe_backend_name(sc.backend), " not compiled in");
          std::unique_ptr<Experts> experts = reg->make_experts(ep_p);
          const Support sup = experts->supports(ep_p);
          MOEKIT_CHECK(sup.ok, "bench --ep: ", experts->name(), " refuses expert parallelism: ",
                       sup.reason);
          const ReducePolicy pol =
              resolve_reduce_policy(experts->reduce_policy(), experts->activation_format());
          FusedMoEKernel layer(make_cuda_ep_prepare_finalize(comm, p, {kind, pol}),
                               std::move(experts));
          layer.prepare(p, weights);
          FusedMoEKernel comm_only(make_cuda_ep_prepare_finalize(comm, p, {kind, ReducePolicy::kAlreadyReduced}),
                                   std::make_unique<NoExperts>());
          comm_only.prepare(p, weights);
          const double layer_ms =
              median_ms(*comm, [&](cudaStream_t st) { layer.apply(x, ids, w, y, st); }, o.reps, s);
          const double comm_ms = median_ms(
              *comm, [&](cudaStream_t st) { comm_only.apply(x, ids, w, y, st); }, o.reps, s);
          // Bytes this rank receives: activations (+ ids, weights) in, results out.
          const double act_row = sc.activations == std::string("bf16")
                                     ? 2.0 * h
                                     : static_cast<double>(h) + 4.0 * (h / 128);
          const double meta_row = 8.0 * k, out_row = 2.0 * h;
          std::vector<int> owner(static_cast<std::size_t>(full.num_experts));
          for (int g = 0; g < full.num_experts; ++g) owner[static_cast<std::size_t>(g)] = g / e_local;
          const ep::DispatchPlan plan =
              ep::plan_dispatch(ids_h.ptr<std::int32_t>(), cap, k, owner, ranks);
          double sent_tokens = 0;
          for (int d = 0; d < ranks; ++d)
            if (d != rank) sent_tokens += static_cast<double>(plan.send_count[static_cast<std::size_t>(d)]);
          const double bytes =
              kind == DispatchKind::kNaive
                  ? (ranks - 1.0) * cap * (act_row + meta_row + out_row)  // gather + reduce-scatter
                  : sent_tokens * (act_row + meta_row + out_row);          // (uniform: symmetric)
          // Bus bandwidth of an all-gather moving the same bytes per rank.
          const std::size_t per_rank = std::max<std::size_t>(
              static_cast<std::size_t>(bytes / std::max(ranks - 1, 1)), 1 << 16);
          void *src = nullptr, *dst = nullptr;
          MOEKIT_CUDA_CHECK(cudaMalloc(&src, per_rank));
          MOEKIT_CUDA_CHECK(cudaMalloc(&dst, per_rank * ranks));
          const double ag_ms = median_ms(
              *comm, [&](cudaStream_t st) { comm->all_gather(src, dst, per_rank, st); }, o.reps, s);
          cudaFree(src);
          cudaFree(dst);
          const double busbw = (ranks - 1.0) * per_rank / (ag_ms * 1e-3);  // bytes/s per rank
          const double floor_ms = bytes / busbw * 1e3;
          double mine[4] = {layer_ms, comm_ms, bytes, floor_ms}, all[4 * 64];
          comm->all_gather_host(mine, all, sizeof(mine));
          if (rank != 0) continue;
          double max_layer = 0, max_comm = 0, max_bytes = 0;
          for (int r = 0; r < ranks; ++r) {
            max_layer = std::max(max_layer, all[4 * r]);
            max_comm = std::max(max_comm, all[4 * r + 1]);
            max_bytes = std::max(max_bytes, all[4 * r + 2]);
          }
          std::printf("%-12s %-9s %6lld %-6s %10.3f %10.3f %6.1f%% %12.0f %9.1f %9.3f %7.2f %10.3f\n",
                      preset.c_str(), q.c_str(), static_cast<long long>(cap), disp.c_str(),
                      max_layer, max_comm, 100 * max_comm / max_layer, max_bytes, busbw / 1e9,
                      floor_ms, comm_ms / floor_ms, single_ms);
          nlohmann::json row{{"preset", preset}, {"quant", q}, {"tokens_per_rank", cap},
                             {"dispatch", disp}, {"ep", ranks}, {"layer_ms_max", max_layer},
                             {"comm_ms_max", max_comm}, {"comm_share", max_comm / max_layer},
                             {"bytes_per_rank_max", max_bytes}, {"busbw_GBps", busbw / 1e9},
                             {"floor_ms", floor_ms}, {"comm_over_floor", comm_ms / floor_ms},
                             {"single_gpu_same_work_ms", single_ms}};
          nlohmann::json rank_rows = nlohmann::json::array();
          for (int r = 0; r < ranks; ++r)
            rank_rows.push_back({{"layer_ms", all[4 * r]}, {"comm_ms", all[4 * r + 1]},
                                {"bytes", all[4 * r + 2]}});
          row["ranks"] = rank_rows;
          rows.push_back(row);
        }
      }
    }
  }
  cudaStreamDestroy(s);
  if (rank == 0 && !o.json_path.empty()) write_json(o.json_path, {{"ep_bench", rows}});
}

}  // namespace moekit::bench
