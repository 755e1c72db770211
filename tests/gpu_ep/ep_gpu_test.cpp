// Expert parallelism on GPUs (2 / 4 / 8 ranks, one H100/H200 each; bench/run_device_ep.sh): the
// EP layer (CUDA EP PrepareFinalize over NCCL + the CUDA experts of each scheme) against the
// single-GPU layer of all tokens run on every rank's GPU. Bitwise when the experts keep the k
// slots apart (kContiguous: the fixed reduction order), within the scheme's bound when they
// reduce themselves (kAlreadyReduced: one bf16 partial sum per rank). Naive dispatch under CUDA
// graph capture and replay. Experts that refuse the expert-parallel problem (an expert_map) skip,
// naming their reason.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "framework/framework_test_util.hpp"
#include "framework/seed_util.hpp"
#include "gpu_ep/ep_gpu_util.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

struct GpuCase {
  const char* wq;
  const char* aq;
  Backend backend;
  double bound;  // relative L2 vs the single-GPU layer when not bitwise
};
const GpuCase kCases[] = {
    {"bf16", "bf16", Backend::kCudaBf16Grouped, 1e-2},
    {"fp8_block", "fp8_1x128", Backend::kCudaFp8BlockGrouped, 5e-2},
    {"nvfp4", "bf16", Backend::kCudaW4A16Grouped, 1e-2},
};

MoeLayerConfig gpu_layer() {
  MoeLayerConfig c = testing::small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul,
                                          32, 8, 512, 256);
  return c;
}

Tensor to_device(const TensorView& h) {
  Tensor d(h.dtype, h.shape, Device::cuda(0));
  copy(d, h);
  return d;
}
Tensor to_host(const TensorView& d) {
  Tensor h(d.dtype, d.shape);
  copy(h, d);
  return h;
}
TensorView rows_of(const Tensor& t, std::int64_t first, std::int64_t n) {
  const std::int64_t w = t.shape()[1];
  return TensorView(static_cast<char*>(t.data()) + first * w * dtype_size(t.dtype()), t.dtype(),
                    Shape{n, w}, t.device());
}

struct Layer {
  MoeLayerConfig config;
  MoeWeights weights;
  Tensor x, ids, wts;  // host, all tokens
};

Layer make_layer(const GpuCase& c, std::int64_t total, std::uint64_t seed) {
  Layer l;
  l.config = gpu_layer();
  l.weights = random_moe_weights(l.config, parse_quant_config(c.wq), seed);
  l.x = random_hidden_states(total, l.config.hidden_size, DType::kBF16, seed + 2);
  const RouterWeights router = random_router_weights(l.config, seed + 1);
  RoutingResult r = route_reference(router_logits_reference(l.x, router), router.correction_bias,
                                    l.config.routing);
  l.ids = std::move(r.topk_ids);
  l.wts = std::move(r.topk_weights);
  return l;
}

MoeProblem problem_of(const GpuCase& c, const Layer& l, std::int64_t tokens) {
  MoeProblem p;
  p.num_tokens = tokens;
  p.layer = l.config;
  p.weight_quant = parse_quant_config(c.wq);
  p.activation_quant = parse_quant_config(c.aq);
  p.activation_dtype = DType::kBF16;
  return p;
}

// The single-GPU layer of every token (bf16 [M, H], host).
Tensor single_gpu(const GpuCase& c, const Layer& l) {
  const std::int64_t total = l.x.shape()[0];
  const MoeProblem p = problem_of(c, l, std::max<std::int64_t>(total, 1));
  FusedMoEKernel k = make_moe_kernel(c.backend, p);
  k.prepare(p, l.weights);
  Tensor x = to_device(l.x), ids = to_device(l.ids), w = to_device(l.wts);
  Tensor y(DType::kBF16, Shape{total, l.config.hidden_size}, Device::cuda(0));
  k.apply(x, ids, w, y);
  cudaDeviceSynchronize();
  return to_host(y);
}

struct EpKernel {
  std::unique_ptr<FusedMoEKernel> kernel;
  ReducePolicy policy;
  std::string skip;  // non-empty: why the experts refuse
};

EpKernel make_ep_kernel(const GpuCase& c, const Layer& l, std::int64_t cap, DispatchKind kind) {
  auto comm = testing::gpu_world();
  const int ranks = comm->size(), rank = comm->rank();
  MoeProblem p = problem_of(c, l, cap);
  p.parallel = ParallelConfig::expert_parallel(l.config.num_experts, ranks, rank, ranks);
  MoeProblem experts_problem = p;
  experts_problem.num_tokens = cap * ranks;
  const BackendRegistration* reg = BackendRegistry::instance().find(c.backend);
  EpKernel e;
  if (!reg) {
    e.skip = "backend not compiled in";
    return e;
  }
  std::unique_ptr<Experts> experts = reg->make_experts(experts_problem);
  if (Support s = experts->supports(experts_problem); !s) {
    e.skip = experts->name() + ": " + s.reason;
    return e;
  }
  e.policy = resolve_reduce_policy(experts->reduce_policy(), experts->activation_format());
  EpPrepareFinalizeOptions o{kind, e.policy};
  e.kernel = std::make_unique<FusedMoEKernel>(make_cuda_ep_prepare_finalize(comm, p, o),
                                              std::move(experts));
  e.kernel->prepare(p, testing::local_weights(l.weights, p.parallel));
  return e;
}

double relative_l2(const Tensor& a, const TensorView& b) {
  double err = 0, norm = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = bf16_to_float(a.ptr<std::uint16_t>()[i]);
    const double y = bf16_to_float(b.ptr<const std::uint16_t>()[i]);
    err += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(err / norm) : std::sqrt(err);
}

void expect_matches(const GpuCase& c, const EpKernel& e, const Tensor& out, const TensorView& ref) {
  if (e.policy == ReducePolicy::kContiguous) {
    EXPECT_EQ(std::memcmp(out.data(), ref.data, out.nbytes()), 0) << "not bitwise (kContiguous)";
  } else {
    EXPECT_LE(relative_l2(out, ref), c.bound) << "partial sums (" << reduce_policy_name(e.policy)
                                              << ")";
  }
}

TEST(EpGpu, MatchesTheSingleGpuLayer) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  auto comm = testing::gpu_world();
  const int ranks = comm->size(), rank = comm->rank();
  int ran = 0;
  std::string skipped;
  for (const GpuCase& c : kCases) {
    for (const bool last_empty : {false, true}) {
      // Uneven split (M not divisible by the ranks), optionally with M = 0 on the last rank.
      std::vector<std::int64_t> n(static_cast<std::size_t>(ranks));
      for (int r = 0; r < ranks; ++r) n[static_cast<std::size_t>(r)] = 37 + 11 * r;
      if (last_empty) n.back() = 0;
      std::int64_t total = 0, first = 0, cap = 1;
      for (int r = 0; r < ranks; ++r) {
        if (r < rank) first += n[static_cast<std::size_t>(r)];
        total += n[static_cast<std::size_t>(r)];
        cap = std::max(cap, n[static_cast<std::size_t>(r)]);
      }
      const std::int64_t m = n[static_cast<std::size_t>(rank)];
      const Layer l = make_layer(c, total, seed);
      const Tensor ref = single_gpu(c, l);
      for (DispatchKind kind : {DispatchKind::kNaive, DispatchKind::kAllToAll}) {
        SCOPED_TRACE(std::string(c.wq) + " " + std::string(dispatch_kind_name(kind)) +
                     (last_empty ? " last rank empty" : ""));
        EpKernel e = make_ep_kernel(c, l, cap, kind);
        if (!e.skip.empty()) {
          skipped = e.skip;
          continue;
        }
        Tensor x = to_device(rows_of(l.x, first, m)), ids = to_device(rows_of(l.ids, first, m)),
               w = to_device(rows_of(l.wts, first, m));
        Tensor y(DType::kBF16, Shape{m, l.config.hidden_size}, Device::cuda(0));
        e.kernel->apply(x, ids, w, y);
        comm->synchronize(nullptr);
        expect_matches(c, e, to_host(y), rows_of(ref, first, m));
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << "every CUDA experts backend refuses expert parallelism: " << skipped;
}

// Naive dispatch is graph-capturable: NCCL all-gathers and reduce-scatters inside the graph; two
// replays give the eager result bit for bit.
TEST(EpGpu, NaiveDispatchCapturesAndReplaysInACudaGraph) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  auto comm = testing::gpu_world();
  const int ranks = comm->size(), rank = comm->rank();
  const GpuCase& c = kCases[0];
  const std::int64_t cap = 64, total = cap * ranks;
  const Layer l = make_layer(c, total, seed);
  EpKernel e = make_ep_kernel(c, l, cap, DispatchKind::kNaive);
  if (!e.skip.empty()) GTEST_SKIP() << e.skip;
  Tensor x = to_device(rows_of(l.x, rank * cap, cap)), ids = to_device(rows_of(l.ids, rank * cap, cap)),
         w = to_device(rows_of(l.wts, rank * cap, cap));
  Tensor eager(DType::kBF16, Shape{cap, l.config.hidden_size}, Device::cuda(0));
  Tensor graphed(DType::kBF16, Shape{cap, l.config.hidden_size}, Device::cuda(0));
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  e.kernel->apply(x, ids, w, eager, s);
  comm->synchronize(s);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  e.kernel->apply(x, ids, w, graphed, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    cudaMemsetAsync(graphed.data(), 0xFF, graphed.nbytes(), s);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    comm->synchronize(s);
    const Tensor a = to_host(eager), b = to_host(graphed);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// The communicator alone (no experts needed): the collectives the PrepareFinalize uses move the
// right bytes, and the sum of one non-zero value and zeros is exact.
TEST(EpGpu, CollectivesMoveTheRightBytes) {
  auto comm = testing::gpu_world();
  const int ranks = comm->size(), rank = comm->rank();
  const std::size_t n = 1000;
  std::vector<float> mine(n), all(n * ranks);
  for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(rank * 10000 + i) * 0.37f;
  Tensor d_mine = to_device(TensorView(mine.data(), DType::kF32, Shape{static_cast<std::int64_t>(n)}));
  Tensor d_all(DType::kF32, Shape{static_cast<std::int64_t>(n * ranks)}, Device::cuda(0));
  comm->all_gather(d_mine.data(), d_all.data(), n * 4);
  comm->synchronize();
  const Tensor h_all = to_host(d_all);
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < n; i += 97)
      EXPECT_EQ(h_all.ptr<float>()[r * n + i], static_cast<float>(r * 10000 + i) * 0.37f);
  // reduce_scatter: block b of rank r is non-zero only when r == b.
  std::vector<float> blocks(n * ranks, 0.0f);
  for (std::size_t i = 0; i < n; ++i) blocks[rank * n + i] = mine[i];
  Tensor d_blocks = to_device(TensorView(blocks.data(), DType::kF32, Shape{static_cast<std::int64_t>(n * ranks)}));
  Tensor d_out(DType::kF32, Shape{static_cast<std::int64_t>(n)}, Device::cuda(0));
  comm->reduce_scatter_sum(d_blocks.data(), d_out.data(), n, DType::kF32);
  comm->synchronize();
  const Tensor h_out = to_host(d_out);
  EXPECT_EQ(std::memcmp(h_out.data(), mine.data(), n * 4), 0);
}

}  // namespace
}  // namespace moekit
