// FusedMoEKernel: chunked runner (bitwise vs unchunked), caller-owned workspace, expert parallel
// (expert_map), adversarial token counts, and argument validation.
#include "moekit/framework/fused_moe.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "framework/framework_test_util.hpp"
#include "framework/seed_util.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

using testing::expect_error;
using testing::first_bit_difference;
using testing::small_layer;

MoeProblem make_problem(const MoeLayerConfig& layer, std::string_view wq, std::string_view aq,
                        std::int64_t m) {
  MoeProblem p;
  p.num_tokens = m;
  p.layer = layer;
  p.weight_quant = parse_quant_config(wq);
  p.activation_quant = parse_quant_config(aq);
  p.activation_dtype = DType::kF32;
  return p;
}

struct Routed {
  Tensor x, ids, weights;
};

Routed routed_inputs(const MoeLayerConfig& layer, std::int64_t m, std::uint64_t seed,
                     int force_expert = -1) {
  Routed r;
  r.x = random_hidden_states(m, layer.hidden_size, DType::kF32, seed);
  const RouterWeights router = random_router_weights(layer, seed + 1);
  Tensor logits = router_logits_reference(r.x, router);
  if (force_expert >= 0) {  // every token's top-1 is force_expert
    for (std::int64_t t = 0; t < m; ++t)
      logits.ptr<float>()[t * layer.num_experts + force_expert] = 1e3f;
  }
  RoutingResult rr = route_reference(logits, router.correction_bias, layer.routing);
  r.ids = std::move(rr.topk_ids);
  r.weights = std::move(rr.topk_weights);
  return r;
}

Tensor run(FusedMoEKernel& k, const Routed& in, std::int64_t h) {
  Tensor out(DType::kF32, Shape{in.x.shape()[0], h});
  for (std::int64_t i = 0; i < out.numel(); ++i)
    out.ptr<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  k.apply(in.x, in.ids, in.weights, out);
  return out;
}

TEST(FusedMoE, ChunkedEqualsUnchunkedBitwise) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const MoeLayerConfig layer = small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul);
  const std::int64_t m = 29;
  const Routed in = routed_inputs(layer, m, seed);
  // Chunk-invariant schemes: no dynamic per-tensor activation scale.
  const std::pair<const char*, const char*> schemes[] = {
      {"bf16", "bf16"}, {"nvfp4", "bf16"}, {"mxfp4", "mxfp8"}, {"fp8_block", "fp8_1x128"}};
  for (const auto& [wq, aq] : schemes) {
    SCOPED_TRACE(std::string(wq) + "/" + aq);
    const MoeWeights w = random_moe_weights(layer, parse_quant_config(wq), seed);
    const MoeProblem p = make_problem(layer, wq, aq, m);
    FusedMoEKernel whole(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
    whole.prepare(p, w);
    const Tensor ref = run(whole, in, layer.hidden_size);
    for (std::int64_t chunk : {1, 4, 7, 28}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      FusedMoEKernel std_k(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts(), {chunk});
      std_k.prepare(p, w);
      EXPECT_EQ(std_k.chunk_tokens(p), chunk);
      EXPECT_LT(std_k.workspace_bytes(p), whole.workspace_bytes(p));
      EXPECT_EQ(first_bit_difference(run(std_k, in, layer.hidden_size), ref), -1);
      FusedMoEKernel bat_k(make_cpu_batched_prepare_finalize(chunk),
                           make_cpu_batched_experts(chunk), {chunk});
      bat_k.prepare(p, w);
      EXPECT_EQ(first_bit_difference(run(bat_k, in, layer.hidden_size), ref), -1);
    }
  }
}

// kAlreadyReduced experts with the NoEP finalize (a copy): the kernel hands them the output itself
// (finalize_is_copy), chunked or not, with the same bits as the contiguous policy's finalize; with
// the output aliasing x (in place) it keeps the workspace path, and the result is the same.
TEST(FusedMoE, AlreadyReducedWritesTheOutputDirectlyAndInPlaceIsSafe) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const MoeLayerConfig layer = small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul);
  const std::int64_t m = 13;
  const Routed in = routed_inputs(layer, m, seed);
  const MoeWeights w = random_moe_weights(layer, parse_quant_config("bf16"), seed);
  const MoeProblem p = make_problem(layer, "bf16", "bf16", m);
  EXPECT_TRUE(make_cpu_no_ep_prepare_finalize()->finalize_is_copy(ReducePolicy::kAlreadyReduced));
  EXPECT_FALSE(make_cpu_no_ep_prepare_finalize()->finalize_is_copy(ReducePolicy::kContiguous));
  FusedMoEKernel contiguous(make_cpu_no_ep_prepare_finalize(),
                            make_cpu_standard_experts(ReducePolicy::kContiguous));
  contiguous.prepare(p, w);
  const Tensor ref = run(contiguous, in, layer.hidden_size);
  for (std::int64_t chunk : {0, 4}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    FusedMoEKernel reduced(make_cpu_no_ep_prepare_finalize(),
                           make_cpu_standard_experts(ReducePolicy::kAlreadyReduced), {chunk});
    reduced.prepare(p, w);
    EXPECT_EQ(first_bit_difference(run(reduced, in, layer.hidden_size), ref), -1);
    Tensor x_inplace(DType::kF32, in.x.shape());
    std::memcpy(x_inplace.data(), in.x.data(), in.x.nbytes());
    reduced.apply(x_inplace, in.ids, in.weights, x_inplace);  // output aliases x
    EXPECT_EQ(first_bit_difference(x_inplace, ref), -1);
  }
}

TEST(FusedMoE, StaticPerTensorScalesMakeNvfp4ChunkInvariant) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const MoeLayerConfig layer = small_layer(RoutingMethod::kSigmoidRenorm, Activation::kSiluAndMul);
  MoeWeights w = random_moe_weights(layer, parse_quant_config("nvfp4"), seed);
  w.a13_scale = Tensor(DType::kF32, Shape{layer.num_experts});
  w.a2_scale = Tensor(DType::kF32, Shape{layer.num_experts});
  for (int e = 0; e < layer.num_experts; ++e) {
    w.a13_scale.ptr<float>()[e] = 2688.0f / 4.0f;  // ENCODE scales (amax 4, amax 2)
    w.a2_scale.ptr<float>()[e] = 2688.0f / 2.0f;
  }
  const std::int64_t m = 17;
  const Routed in = routed_inputs(layer, m, seed);
  const MoeProblem p = make_problem(layer, "nvfp4", "nvfp4", m);
  Tensor ref(DType::kF32, Shape{m, layer.hidden_size});
  MoeReferenceOptions opt{MoeNumerics::kEmulateActivationQuant, parse_quant_config("nvfp4")};
  moe_reference_routed(in.x, in.ids, in.weights, layer, w, ref, opt);
  for (std::int64_t chunk : {0, 5}) {
    FusedMoEKernel k(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts(), {chunk});
    k.prepare(p, w);
    EXPECT_EQ(first_bit_difference(run(k, in, layer.hidden_size), ref), -1) << "chunk " << chunk;
  }
}

TEST(FusedMoE, AdversarialTokenCounts) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  // k = 4 > M for small M; one expert takes every token; most experts stay empty.
  MoeLayerConfig layer =
      small_layer(RoutingMethod::kRenormalizeNaive, Activation::kSiluAndMul, 8, 4);
  const MoeWeights w = random_moe_weights(layer, parse_quant_config("mxfp4"), seed);
  for (std::int64_t m : {0, 1, 2, 3, 40}) {
    SCOPED_TRACE("M=" + std::to_string(m));
    const Routed in =
        routed_inputs(layer, m, seed + static_cast<std::uint64_t>(m), m == 40 ? 5 : -1);
    Tensor ref(DType::kF32, Shape{m, layer.hidden_size});
    MoeReferenceOptions opt{MoeNumerics::kEmulateActivationQuant, parse_quant_config("mxfp8")};
    moe_reference_routed(in.x, in.ids, in.weights, layer, w, ref, opt);
    const MoeProblem p = make_problem(layer, "mxfp4", "mxfp8", std::max<std::int64_t>(m, 1));
    FusedMoEKernel s(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
    s.prepare(p, w);
    EXPECT_EQ(first_bit_difference(run(s, in, layer.hidden_size), ref), -1);
    FusedMoEKernel b(make_cpu_batched_prepare_finalize(p.num_tokens),
                     make_cpu_batched_experts(p.num_tokens));
    b.prepare(p, w);
    EXPECT_EQ(first_bit_difference(run(b, in, layer.hidden_size), ref), -1);
  }
}

// Each EP rank computes its local experts only; its output equals the reference with the
// non-local slots' weights set to zero (0 * v adds exactly nothing), and the ranks' outputs sum to
// the full reference within fp32 reassociation error.
TEST(FusedMoE, ExpertParallelRanksOwnTheirExperts) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const MoeLayerConfig layer = small_layer(RoutingMethod::kDeepSeekV3, Activation::kSwigluOai);
  const std::int64_t m = 21;
  const Routed in = routed_inputs(layer, m, seed);
  const MoeWeights w = random_moe_weights(layer, parse_quant_config("mxfp4"), seed);
  MoeReferenceOptions opt{MoeNumerics::kEmulateActivationQuant, parse_quant_config("mxfp8")};
  Tensor full(DType::kF32, Shape{m, layer.hidden_size});
  moe_reference_routed(in.x, in.ids, in.weights, layer, w, full, opt);
  std::vector<double> sum(static_cast<std::size_t>(full.numel()), 0.0);
  const int ep = 4;
  for (int rank = 0; rank < ep; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    MoeProblem p = make_problem(layer, "mxfp4", "mxfp8", m);
    p.parallel = ParallelConfig::expert_parallel(layer.num_experts, ep, rank);
    const MoeWeights local = testing::local_weights(w, p.parallel);
    Tensor masked(DType::kF32, Shape{m, layer.top_k()});
    for (std::int64_t a = 0; a < masked.numel(); ++a) {
      const int g = in.ids.ptr<std::int32_t>()[a];
      masked.ptr<float>()[a] = p.parallel.expert_map[static_cast<std::size_t>(g)] >= 0
                                   ? in.weights.ptr<float>()[a]
                                   : 0.0f;
    }
    Tensor ref(DType::kF32, Shape{m, layer.hidden_size});
    moe_reference_routed(in.x, in.ids, masked, layer, w, ref, opt);
    FusedMoEKernel s(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
    s.prepare(p, local);
    const Tensor out = run(s, in, layer.hidden_size);
    EXPECT_EQ(first_bit_difference(out, ref), -1);
    FusedMoEKernel b(make_cpu_batched_prepare_finalize(m), make_cpu_batched_experts(m));
    b.prepare(p, local);
    EXPECT_EQ(first_bit_difference(run(b, in, layer.hidden_size), ref), -1);
    for (std::int64_t i = 0; i < out.numel(); ++i)
      sum[static_cast<std::size_t>(i)] += out.ptr<float>()[i];
  }
  double err = 0, norm = 0;
  for (std::int64_t i = 0; i < full.numel(); ++i) {
    const double d = sum[static_cast<std::size_t>(i)] - full.ptr<float>()[i];
    err += d * d;
    norm += static_cast<double>(full.ptr<float>()[i]) * full.ptr<float>()[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-6);  // 4 partial sums re-associated in fp32
}

TEST(FusedMoE, CallerOwnedWorkspace) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const MoeLayerConfig layer = small_layer(RoutingMethod::kRenormalize, Activation::kRelu2);
  const MoeWeights w = random_moe_weights(layer, parse_quant_config("fp8_tensor"), seed);
  const MoeProblem p = make_problem(layer, "fp8_tensor", "fp8_tensor", 9);
  const Routed in = routed_inputs(layer, 9, seed);
  FusedMoEKernel owned(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  owned.prepare(p, w);
  const Tensor ref = run(owned, in, layer.hidden_size);
  FusedMoEKernel k(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  const std::size_t bytes = k.workspace_bytes(p);
  Tensor ws(DType::kU8, Shape{static_cast<std::int64_t>(bytes)});
  std::memset(ws.data(), 0xCD, bytes);  // garbage must not matter
  k.prepare(p, w, ws);
  EXPECT_EQ(first_bit_difference(run(k, in, layer.hidden_size), ref), -1);
  Tensor small(DType::kU8, Shape{static_cast<std::int64_t>(bytes - 1)});
  FusedMoEKernel k2(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  expect_error([&] { k2.prepare(p, w, small); }, {"workspace bytes"});
}

TEST(FusedMoE, ValidationNamesTheArgument) {
  const MoeLayerConfig layer =
      small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul, 8, 2);
  const MoeWeights w = random_moe_weights(layer, parse_quant_config("bf16"), 1);
  const MoeProblem p = make_problem(layer, "bf16", "bf16", 4);
  FusedMoEKernel k(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  Tensor x(DType::kF32, Shape{4, layer.hidden_size}), out(DType::kF32, Shape{4, layer.hidden_size});
  Tensor ids = Tensor::zeros(DType::kI32, Shape{4, 2}),
         wts = Tensor::zeros(DType::kF32, Shape{4, 2});
  expect_error([&] { k.apply(x, ids, wts, out); }, {"before prepare"});
  k.prepare(p, w);
  Tensor bad_ids = Tensor::zeros(DType::kI32, Shape{4, 3});
  expect_error([&] { k.apply(x, bad_ids, wts, out); }, {"topk_ids shape", "[4, 2]", "[4, 3]"});
  Tensor xb(DType::kBF16, Shape{4, layer.hidden_size});
  expect_error([&] { k.apply(xb, ids, wts, out); }, {"x dtype", "f32", "bf16"});
  ids.ptr<std::int32_t>()[3] = 99;
  expect_error([&] { k.apply(x, ids, wts, out); }, {"topk_ids", "99"});
  // Weights of the wrong expert count (e.g. global weights under EP).
  MoeProblem ep = p;
  ep.parallel = ParallelConfig::expert_parallel(layer.num_experts, 2, 0);
  FusedMoEKernel k2(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  expect_error([&] { k2.prepare(ep, w); }, {"weights.num_experts", "4"});
  // Unsupported problems throw with the part's reason.
  MoeLayerConfig llama = small_layer(RoutingMethod::kLlama4, Activation::kSiluAndMul);
  FusedMoEKernel mono(make_cpu_monolithic_prepare_finalize(), make_cpu_monolithic_experts());
  MoeProblem lp = make_problem(llama, "bf16", "bf16", 4);
  expect_error([&] { mono.prepare(lp, w); }, {"cpu_monolithic", "llama4"});
  expect_error([] { ParallelConfig::expert_parallel(8, 3, 0); }, {"ep_size"});
  FusedMoEKernel bk(make_cpu_batched_prepare_finalize(2), make_cpu_batched_experts(2));
  expect_error([&] { bk.prepare(p, w); }, {"max_tokens_per_rank"});
}

}  // namespace
}  // namespace moekit
