// The CUDA NoEP PrepareFinalize against the CPU NoEP, byte for byte: the quantized GEMM1 input of
// prepare (every activation scheme, Llama4 weight-on-input), and finalize for the contiguous and
// already-reduced policies (bf16 and f32 outputs); workspace sizes agree.
#include <random>
#include <string>

#include "cuda/quant/device_test_util.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/prepare_finalize/cuda_prepare_finalize.hpp"

namespace moekit {
namespace {

using cuda_test::bytes_equal;
using cuda_test::poison;
using cuda_test::to_device;

MoeProblem make_problem(std::int64_t m, QuantScheme a_scheme, RoutingMethod method, int k,
                        DType act_dtype) {
  MoeProblem p;
  p.num_tokens = m;
  p.layer.name = "test";
  p.layer.num_experts = 16;
  p.layer.hidden_size = 256;
  p.layer.intermediate_size = 128;
  p.layer.routing.method = method;
  p.layer.routing.top_k = k;
  p.weight_quant = QuantConfig{QuantScheme::kBF16};
  p.activation_quant = QuantConfig{a_scheme};
  p.activation_dtype = act_dtype;
  return p;
}

Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937_64& rng) {
  Tensor t(dtype, shape);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const float v = n(rng);
    if (dtype == DType::kF32) t.ptr<float>()[i] = v;
    else t.ptr<std::uint16_t>()[i] = cuda_test::to_bf16_bits(v);
  }
  return t;
}

void check(const MoeProblem& p, std::mt19937_64& rng) {
  SCOPED_TRACE(p.str());
  auto cpu = make_cpu_no_ep_prepare_finalize();
  auto gpu = make_cuda_no_ep_prepare_finalize();
  ASSERT_TRUE(gpu->supports(p).ok) << gpu->supports(p).reason;
  const TensorSpec ws_spec = gpu->workspace_shape(p);
  ASSERT_EQ(ws_spec.nbytes(), cpu->workspace_shape(p).nbytes());
  const std::int64_t m = p.num_tokens, h = p.hidden_size();
  const int k = p.top_k();
  const Tensor x = random_tensor(p.activation_dtype, Shape{m, h}, rng);
  Tensor ids(DType::kI32, Shape{m, k}), w(DType::kF32, Shape{m, k});
  std::uniform_int_distribution<int> e(0, p.num_experts() - 1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (std::int64_t i = 0; i < m * k; ++i) {
    ids.ptr<std::int32_t>()[i] = e(rng);
    w.ptr<float>()[i] = u(rng);
  }
  Tensor ws_h(DType::kU8, ws_spec.shape);
  Tensor ws_d(DType::kU8, ws_spec.shape, Device::cuda());
  poison(ws_d, 0xA5);
  const Tensor x_d = to_device(x), ids_d = to_device(ids), w_d = to_device(w);
  const DispatchedActivations dc = cpu->prepare(p, x, ids, w, {}, ws_h);
  const DispatchedActivations dg = gpu->prepare(p, x_d, ids_d, w_d, {}, ws_d);
  cuda_test::sync();
  // (M = 0 writes nothing on either side: the CPU workspace is uninitialized there.)
  if (m > 0) {
    EXPECT_TRUE(bytes_equal(dc.a1q.values, dg.a1q.values, "a1q.values"));
  }
  if (m > 0 && dc.a1q.scales.defined()) {
    EXPECT_TRUE(bytes_equal(dc.a1q.scales, dg.a1q.scales, "a1q.scales"));
  }
  if (m > 0 && dc.a1q.global_scale.defined()) {
    EXPECT_TRUE(bytes_equal(dc.a1q.global_scale, dg.a1q.global_scale, "a1q.global_scale"));
  }
  // Finalize: contiguous [M, k, H] f32 expert output, and already-reduced [M, H] f32.
  const Tensor y = random_tensor(DType::kF32, Shape{m, k, h}, rng);
  const Tensor y_d = to_device(y);
  Tensor out_h(p.activation_dtype, Shape{m, h});
  Tensor out_d(p.activation_dtype, Shape{m, h}, Device::cuda());
  cpu->finalize(p, y, ReducePolicy::kContiguous, dc, out_h, ws_h);
  poison(out_d, 0xA5);
  gpu->finalize(p, y_d, ReducePolicy::kContiguous, dg, out_d, ws_d);
  cuda_test::sync();
  EXPECT_TRUE(bytes_equal(out_h, out_d, "finalize contiguous"));
  const Tensor r = random_tensor(DType::kF32, Shape{m, h}, rng);
  const Tensor r_d = to_device(r);
  cpu->finalize(p, r, ReducePolicy::kAlreadyReduced, dc, out_h, ws_h);
  poison(out_d, 0x5A);
  gpu->finalize(p, r_d, ReducePolicy::kAlreadyReduced, dg, out_d, ws_d);
  cuda_test::sync();
  EXPECT_TRUE(bytes_equal(out_h, out_d, "finalize already reduced"));
}

TEST(CudaNoEpPrepareFinalize, MatchesCpuNoEp) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  for (QuantScheme s : {QuantScheme::kBF16, QuantScheme::kNVFP4, QuantScheme::kFP8Block1x128,
                        QuantScheme::kMXFP4, QuantScheme::kMXFP8, QuantScheme::kFP8PerToken}) {
    for (std::int64_t m : {0, 1, 129}) {
      check(make_problem(m, s, RoutingMethod::kRenormalize, 4, DType::kBF16), rng);
    }
    check(make_problem(3, s, RoutingMethod::kLlama4, 1, DType::kF32), rng);
  }
}

TEST(CudaNoEpPrepareFinalize, RefusesExpertParallelAndBatchedPolicy) {
  MOEKIT_REQUIRE_GPU();
  auto gpu = make_cuda_no_ep_prepare_finalize();
  MoeProblem p = make_problem(4, QuantScheme::kBF16, RoutingMethod::kRenormalize, 2, DType::kBF16);
  p.parallel = ParallelConfig::expert_parallel(16, 2, 0);
  const Support s = gpu->supports(p);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("expert parallel"), std::string::npos) << s.reason;
  p.parallel = ParallelConfig{};
  Tensor y(DType::kF32, Shape{4, 256}, Device::cuda()), out(DType::kBF16, Shape{4, 256}, Device::cuda());
  testing::expect_error(
      [&] { gpu->finalize(p, y, ReducePolicy::kBatchedPerExpert, DispatchedActivations{}, out, {}); },
      {"reduce policy"});
}

}  // namespace
}  // namespace moekit
