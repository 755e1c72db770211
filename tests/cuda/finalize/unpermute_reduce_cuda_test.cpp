// unpermute_reduce_cuda against the CPU reference, bit for bit: f32 / bf16 expert outputs and
// outputs, with and without weights, dropped slots (-1), H % 8 != 0, M in {0, 1, 3, 129}; and a
// whole route -> permute -> gather -> reduce chain captured in a CUDA graph, replayed, and equal to
// the eager run (graph-capture safety of every op).
#include <cuda_runtime_api.h>

#include <random>
#include <string>
#include <vector>

#include "cuda/quant/device_test_util.hpp"
#include "moekit/permute/permute.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/permute/permute_cuda.hpp"
#include "moekit/routing/route_cuda.hpp"

namespace moekit {
namespace {

using cuda_test::bytes_equal;
using cuda_test::poison;
using cuda_test::to_device;

void check_reduce(std::int64_t m, int k, std::int64_t rows, std::int64_t h, DType in_t, DType out_t,
                  bool weights, std::mt19937_64& rng) {
  SCOPED_TRACE("M=" + std::to_string(m) + " k=" + std::to_string(k) + " H=" + std::to_string(h) +
               " in=" + std::string(dtype_name(in_t)) + " out=" + std::string(dtype_name(out_t)) +
               (weights ? " weighted" : ""));
  Tensor y(in_t, Shape{rows, h});
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const float v = cuda_test::spread_value(rng);
    if (in_t == DType::kF32) y.ptr<float>()[i] = v;
    else y.ptr<std::uint16_t>()[i] = cuda_test::to_bf16_bits(v);
  }
  Tensor src_row(DType::kI32, Shape{m, k});
  std::uniform_int_distribution<int> r(-1, static_cast<int>(rows) - 1);
  for (std::int64_t i = 0; i < src_row.numel(); ++i) src_row.ptr<std::int32_t>()[i] = r(rng);
  Tensor w(DType::kF32, Shape{m, k});
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::int64_t i = 0; i < w.numel(); ++i) w.ptr<float>()[i] = u(rng);
  Tensor out_ref(out_t, Shape{m, h});
  unpermute_reduce(y, src_row, weights ? w.view() : TensorView{}, out_ref);
  const Tensor y_d = to_device(y), rows_d = to_device(src_row), w_d = to_device(w);
  Tensor out_d(out_t, Shape{m, h}, Device::cuda());
  for (int byte : {0xA5, 0x5A}) {
    poison(out_d, byte);
    unpermute_reduce_cuda(y_d, rows_d, weights ? w_d.view() : TensorView{}, out_d);
    cuda_test::sync();
    EXPECT_TRUE(bytes_equal(out_ref, out_d, "out"));
  }
}

TEST(UnpermuteReduceCuda, MatchesReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  for (DType in_t : {DType::kBF16, DType::kF32})
    for (DType out_t : {DType::kBF16, DType::kF32})
      for (bool weights : {true, false})
        for (std::int64_t m : {0, 1, 3, 129}) {
          check_reduce(m, 8, 50, 7168, in_t, out_t, weights, rng);
          check_reduce(m, 3, 7, 13, in_t, out_t, weights, rng);  // H % 8 != 0
        }
}

TEST(UnpermuteReduceCuda, RejectsBadArguments) {
  MOEKIT_REQUIRE_GPU();
  Tensor y(DType::kBF16, Shape{4, 8}, Device::cuda());
  Tensor rows(DType::kI32, Shape{2, 2}, Device::cuda());
  Tensor out(DType::kF32, Shape{2, 9}, Device::cuda());
  testing::expect_error([&] { unpermute_reduce_cuda(y, rows, {}, out); }, {"out shape"});
  Tensor w(DType::kF32, Shape{2, 3}, Device::cuda());
  Tensor out2(DType::kF32, Shape{2, 8}, Device::cuda());
  testing::expect_error([&] { unpermute_reduce_cuda(y, rows, w, out2); }, {"topk_weights shape"});
}

// route -> permutation -> gather -> reduce, eager and as a replayed CUDA graph: identical bytes.
TEST(LayerGlueCuda, GraphCaptureReplaysIdentically) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  const std::int64_t m = 64, h = 256;
  const int e = 256, k = 8;
  Tensor logits(DType::kF32, Shape{m, e}), bias(DType::kF32, Shape{e}), x(DType::kBF16, Shape{m, h});
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.ptr<float>()[i] = n(rng);
  for (int i = 0; i < e; ++i) bias.ptr<float>()[i] = 0.01f * n(rng);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.ptr<std::uint16_t>()[i] = cuda_test::to_bf16_bits(n(rng));
  const Tensor logits_d = to_device(logits), bias_d = to_device(bias), x_d = to_device(x);
  RoutingConfig cfg;
  cfg.method = RoutingMethod::kDeepSeekV3;
  cfg.top_k = k;
  cfg.num_expert_groups = 8;
  cfg.topk_group = 4;
  cfg.routed_scaling_factor = 2.5f;
  const std::int64_t cap = permute_capacity(m, k, e, 1);
  Tensor ids(DType::kI32, Shape{m, k}, Device::cuda()), w(DType::kF32, Shape{m, k}, Device::cuda());
  Tensor counts(DType::kI32, Shape{e}, Device::cuda()), offs(DType::kI32, Shape{e + 1}, Device::cuda());
  Tensor sorted(DType::kI32, Shape{cap}, Device::cuda()), prow(DType::kI32, Shape{m, k}, Device::cuda());
  Tensor gathered(DType::kBF16, Shape{cap, h}, Device::cuda());
  Tensor out(DType::kF32, Shape{m, h}, Device::cuda());
  const PermutationView pv{counts, offs, sorted, prow};
  auto chain = [&](cudaStream_t s) {
    route_cuda(logits_d, bias_d, cfg, ids, w, s);
    compute_permutation_cuda(ids, {}, e, 1, pv, s);
    permute_gather_cuda(x_d, sorted, k, gathered, s);
    // The "experts" are the identity here: reduce the gathered rows straight back.
    unpermute_reduce_cuda(gathered, prow, w, out, s);
  };
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  chain(s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const Tensor eager = cuda_test::to_host(out);
  const Tensor eager_sorted = cuda_test::to_host(sorted), eager_prow = cuda_test::to_host(prow);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  chain(s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    // Poison the router's outputs and the permutation too: the permutation is a programmatic
    // dependent of the router (it may start early) and must still see this replay's ids.
    poison(out, 0xA5 + rep);
    poison(gathered, 0x5A);
    poison(ids, 0x7F);
    poison(w, 0x7F);
    poison(sorted, 0x3C);
    poison(prow, 0x3C);
    poison(counts, 0x3C);
    poison(offs, 0x3C);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(bytes_equal(eager, out, "graph replay " + std::to_string(rep)));
    EXPECT_TRUE(bytes_equal(eager_sorted, sorted, "sorted_ids, replay " + std::to_string(rep)));
    EXPECT_TRUE(bytes_equal(eager_prow, prow, "permuted_row, replay " + std::to_string(rep)));
  }
  // Sanity: sum of weights times x equals the reduction (the identity experts): out row t is
  // sum_j w[t,j] * x[t] in slot order, so compare with the reference on the host.
  Tensor x_f(DType::kF32, Shape{m, h});
  const Tensor w_h = cuda_test::to_host(w);
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t c = 0; c < h; ++c) {
      float acc = 0.0f;
      const float v = bf16_to_float(x.ptr<std::uint16_t>()[t * h + c]);
      for (int j = 0; j < k; ++j) acc = acc + w_h.ptr<float>()[t * k + j] * v;
      x_f.ptr<float>()[t * h + c] = acc;
    }
  EXPECT_TRUE(bytes_equal(x_f, out, "identity-experts layer"));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace moekit
