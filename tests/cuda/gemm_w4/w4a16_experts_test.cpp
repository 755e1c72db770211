// The cuda_w4a16_grouped Experts (permute -> W4A16 GEMM1 + act -> GEMM2 -> weighted sum) against the
// CPU reference layer (moe_reference_routed, weight-only numerics). Bound 1e-2 relative L2: bf16
// hidden states are exact inputs, weights exact in bf16; errors are the bf16 rounding of the
// intermediate activation and of the expert outputs / final sum (each ~2^-9 relative).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/experts/sm90_grouped_experts.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"

namespace moekit {
namespace {

std::uint32_t test_seed() {
  if (const char* s = std::getenv("MOEKIT_TEST_SEED")) return static_cast<std::uint32_t>(std::stoul(s));
  return std::random_device{}();
}

float bf16_value(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void run(const char* preset, QuantScheme scheme, std::int64_t m, std::uint32_t seed) {
  SCOPED_TRACE(std::string(preset) + " " + std::string(scheme_name(scheme)) + " m " +
               std::to_string(m) + " seed " + std::to_string(seed));
  const MoeLayerConfig layer = scaled_layer_config(layer_preset(preset), 256, 128, 16);
  MoeProblem problem;
  problem.num_tokens = m;
  problem.layer = layer;
  problem.weight_quant.scheme = scheme;
  problem.activation_quant.scheme = QuantScheme::kBF16;
  auto experts = cuda::make_sm90_grouped_experts(problem, scheme == QuantScheme::kNVFP4
                                                               ? gemm::GemmScheme::kW4A16NVFP4
                                                               : gemm::GemmScheme::kW4A16MXFP4);
  const Support s = experts->supports(problem);
  ASSERT_TRUE(s.ok) << s.reason;
  const MoeWeights weights = random_moe_weights(layer, problem.weight_quant, seed);
  experts->prepare_weights(problem, weights);

  const int k = layer.top_k(), e = layer.num_experts;
  const Tensor x = random_hidden_states(m, layer.hidden_size, DType::kBF16, seed + 1);
  Tensor ids(DType::kI32, Shape{m, k}), wts(DType::kF32, Shape{m, k});
  std::mt19937 rng(seed + 2);
  for (std::int64_t t = 0; t < m; ++t) {
    std::vector<int> perm(e);
    for (int j = 0; j < e; ++j) perm[j] = j;
    for (int j = 0; j < k; ++j) {
      std::swap(perm[j], perm[j + rng() % (e - j)]);
      ids.ptr<std::int32_t>()[t * k + j] = (t % 3 == 0) ? j : perm[j];  // some shared experts
      wts.ptr<float>()[t * k + j] = 0.1f + (rng() % 100) / 100.0f;
    }
  }
  Tensor ref(DType::kF32, Shape{m, layer.hidden_size});
  moe_reference_routed(x, ids, wts, layer, weights, ref);

  const auto ws = experts->workspace_shapes(problem);
  Tensor d_x(DType::kBF16, x.shape(), Device::cuda(0)), d_ids(DType::kI32, ids.shape(), Device::cuda(0)),
      d_w(DType::kF32, wts.shape(), Device::cuda(0));
  copy(d_x, x);
  copy(d_ids, ids);
  copy(d_w, wts);
  Tensor w13(ws.workspace13.dtype, ws.workspace13.shape, Device::cuda(0));
  Tensor w2(ws.workspace2.dtype, ws.workspace2.shape, Device::cuda(0));
  Tensor out(ws.output.dtype, ws.output.shape, Device::cuda(0));
  DispatchedActivations in;
  in.num_tokens = m;
  in.a1q.values = d_x;
  in.topk_ids = d_ids;
  in.topk_weights = d_w;
  ASSERT_EQ(cudaMemset(out.data(), 0xFF, out.nbytes()), cudaSuccess);
  experts->apply(in, out, w13, w2);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Tensor h_out(DType::kBF16, out.shape());
  copy(h_out, out);
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double v = bf16_value(h_out.ptr<std::uint16_t>()[i]), r = ref.ptr<float>()[i];
    ASSERT_FALSE(std::isnan(v)) << "unwritten output at " << i;
    num += (v - r) * (v - r);
    den += r * r;
  }
  if (m > 0) {
    EXPECT_LT(std::sqrt(num / den), 1e-2);
  }
}

TEST(W4A16Experts, MatchesCpuReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  for (QuantScheme scheme : {QuantScheme::kNVFP4, QuantScheme::kMXFP4}) {
    run("qwen3-30b-a3b", scheme, 1, seed);
    run("qwen3-30b-a3b", scheme, 37, seed);
    run("gpt-oss-20b", scheme, 5, seed);
  }
}

}  // namespace
}  // namespace moekit
