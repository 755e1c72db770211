// The GEMM1 input contract of the bf16-activation CUDA experts (cuda_bf16_grouped,
// cuda_w4a16_grouped) with the NoEP prepare: with the router weight on the input (Llama4) the
// prepare hands f32 rows x * w (as the CPU NoEP does) and the experts round them to bf16 with
// cuda::convert_rows; anywhere else an f32 input is refused, naming in.a1q.values.
//   - convert_rows f32 -> bf16 is bitwise equal to the host float_to_bf16 (RN-even, NaN kept
//     quiet) on random values, ties, subnormals, infinities and NaNs.
//   - f32 values without weight-on-input routing: moekit::Error naming in.a1q.values.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/experts/sm90_grouped_experts.hpp"
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/quant/codecs.hpp"
#include "test_seed.hpp"

namespace moekit {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(CudaExpertsInput, ConvertRowsMatchesHostBf16Rounding) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = process_test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  const std::int64_t m = 37, h = 264;  // odd row count, H % 8 == 0 (the experts' alignment)
  std::vector<float> v(static_cast<std::size_t>(m * h));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto& x : v) x = normal(rng);
  // Edge cases at the front: exact ties (round to even both ways), the largest values, subnormals,
  // signed zeros, infinities, NaNs (quiet and signalling payloads).
  const std::vector<std::uint32_t> edges = {
      0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F807FFFu, 0x3F808001u, 0x7F7FFFFFu, 0xFF7FFFFFu,
      0x00000001u, 0x807FFFFFu, 0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
      0x7F800001u, 0xFFA00000u, 0x7F7F8000u};
  for (std::size_t i = 0; i < edges.size(); ++i) v[i] = from_bits(edges[i]);

  Tensor src(DType::kF32, Shape{m, h}), d_src(DType::kF32, Shape{m, h}, Device::cuda(0));
  std::memcpy(src.data(), v.data(), src.nbytes());
  copy(d_src, src);
  Tensor d_out(DType::kBF16, Shape{m, h}, Device::cuda(0));
  ASSERT_EQ(cudaMemset(d_out.data(), 0xFF, d_out.nbytes()), cudaSuccess);
  cuda::convert_rows(d_src.view(), d_out.view(), /*stream=*/nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  Tensor out(DType::kBF16, Shape{m, h});
  copy(out, d_out);
  std::int64_t mismatches = 0;
  for (std::int64_t i = 0; i < m * h; ++i) {
    const std::uint16_t want = float_to_bf16(v[static_cast<std::size_t>(i)]);
    const std::uint16_t have = out.ptr<std::uint16_t>()[i];
    if (want != have && ++mismatches <= 5)
      ADD_FAILURE() << "element " << i << ": f32 bits 0x" << std::hex
                    << to_bits(v[static_cast<std::size_t>(i)])
                    << " -> 0x" << have << ", want 0x" << want;
  }
  EXPECT_EQ(mismatches, 0);
}

// f32 GEMM1 input where the routing does not apply the weight on the input: refused before any
// launch, naming in.a1q.values (the workspace has no room for the rounded rows).
TEST(CudaExpertsInput, F32InputWithoutWeightOnInputIsRefused) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = process_test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const MoeLayerConfig layer =
      scaled_layer_config(layer_preset("qwen3-30b-a3b"), 256, 128, 16);  // renormalize_naive
  const std::int64_t m = 4;
  for (QuantScheme w : {QuantScheme::kBF16, QuantScheme::kNVFP4}) {
    SCOPED_TRACE(std::string(scheme_name(w)));
    MoeProblem p;
    p.num_tokens = m;
    p.layer = layer;
    p.weight_quant.scheme = w;
    p.activation_dtype = DType::kBF16;
    ASSERT_FALSE(p.apply_router_weight_on_input());
    auto experts = cuda::make_sm90_grouped_experts(
        p, w == QuantScheme::kBF16 ? gemm::GemmScheme::kBF16 : gemm::GemmScheme::kW4A16NVFP4);
    ASSERT_TRUE(experts->supports(p).ok) << experts->supports(p).reason;
    const MoeWeights weights = random_moe_weights(layer, p.weight_quant, seed);
    experts->prepare_weights(p, weights);
    const auto ws = experts->workspace_shapes(p);
    Tensor ws13(ws.workspace13.dtype, ws.workspace13.shape, Device::cuda(0));
    Tensor ws2(ws.workspace2.dtype, ws.workspace2.shape, Device::cuda(0));
    Tensor out(ws.output.dtype, ws.output.shape, Device::cuda(0));
    Tensor x(DType::kF32, Shape{m, layer.hidden_size}, Device::cuda(0));
    Tensor ids = Tensor::zeros(DType::kI32, Shape{m, layer.top_k()});
    Tensor d_ids(DType::kI32, ids.shape(), Device::cuda(0));
    copy(d_ids, ids);
    Tensor d_w(DType::kF32, ids.shape(), Device::cuda(0));
    DispatchedActivations in;
    in.format = ActivationFormat::kStandard;
    in.num_tokens = m;
    in.a1q.values = x.view();
    in.topk_ids = d_ids.view();
    in.topk_weights = d_w.view();
    try {
      experts->apply(in, out.view(), ws13.view(), ws2.view(), nullptr);
      ADD_FAILURE() << "expected moekit::Error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("in.a1q.values"), std::string::npos) << msg;
      EXPECT_NE(msg.find("f32"), std::string::npos) << msg;
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace moekit
