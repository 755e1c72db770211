// Every compatible CPU PrepareFinalize x Experts pair, for every weight/activation quant scheme,
// activation and routing method, against the CPU reference layer (moe_reference*). The CPU parts
// reproduce the reference's arithmetic order exactly (same permutation order, same fp32 GEMM,
// bias, activation, GEMM2-input quantization over all rows, slot-order reduction), so the bound is
// ZERO: outputs must be bitwise identical. Every incompatible pair must be refused naming both.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "framework/framework_test_util.hpp"
#include "framework/seed_util.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/framework/fused_moe.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

using testing::first_bit_difference;
using testing::small_layer;

constexpr std::int64_t kTokens = 13;

struct Pair {
  std::string name;
  std::function<std::unique_ptr<PrepareFinalize>()> pf;
  std::function<std::unique_ptr<Experts>()> experts;
};

std::vector<Pair> compatible_pairs(std::int64_t t) {
  return {
      {"no_ep+standard[contiguous]", [] { return make_cpu_no_ep_prepare_finalize(); },
       [] { return make_cpu_standard_experts(ReducePolicy::kContiguous); }},
      {"no_ep+standard[delegate]", [] { return make_cpu_no_ep_prepare_finalize(); },
       [] { return make_cpu_standard_experts(ReducePolicy::kDelegate); }},
      {"no_ep+standard[already_reduced]", [] { return make_cpu_no_ep_prepare_finalize(); },
       [] { return make_cpu_standard_experts(ReducePolicy::kAlreadyReduced); }},
      {"batched+batched[batched_per_expert]", [t] { return make_cpu_batched_prepare_finalize(t); },
       [t] { return make_cpu_batched_experts(t, 1, ReducePolicy::kBatchedPerExpert); }},
      {"batched+batched[delegate]", [t] { return make_cpu_batched_prepare_finalize(t); },
       [t] { return make_cpu_batched_experts(t, 1, ReducePolicy::kDelegate); }},
      {"batched+batched[already_reduced]", [t] { return make_cpu_batched_prepare_finalize(t); },
       [t] { return make_cpu_batched_experts(t, 1, ReducePolicy::kAlreadyReduced); }},
      {"monolithic+monolithic", [] { return make_cpu_monolithic_prepare_finalize(); },
       [] { return make_cpu_monolithic_experts(); }},
  };
}

struct QuantCase {
  QuantConfig weights, activations;
};

std::vector<QuantCase> quant_cases() {
  auto q = [](std::string_view s) { return parse_quant_config(s); };
  return {{q("bf16"), q("bf16")},
          {q("fp8_tensor"), q("fp8_tensor")},
          {q("fp8_block"), q("fp8_1x128")},
          {q("nvfp4"), q("bf16")},                  // W4A16
          {q("nvfp4/swizzled_128x4"), q("nvfp4")},  // W4A4 (emulated), swizzled weight scales
          {q("mxfp4"), q("bf16")},                  // W4A16
          {q("mxfp4"), q("mxfp8")},                 // W4A8
          {q("mxfp4/floor"), q("fp8_token")}};      // W4A8, per-token activations
}

struct Inputs {
  Tensor x, logits, bias, ids, weights, ref;
};

Inputs make_inputs(const MoeLayerConfig& layer, const MoeWeights& w, const QuantCase& qc,
                   DType dtype, std::uint64_t seed) {
  Inputs in;
  in.x = random_hidden_states(kTokens, layer.hidden_size, dtype, seed);
  RouterWeights router = random_router_weights(layer, seed + 1);
  in.logits = router_logits_reference(in.x, router);
  in.bias = std::move(router.correction_bias);
  RoutingResult r = route_reference(in.logits, in.bias, layer.routing);
  in.ids = std::move(r.topk_ids);
  in.weights = std::move(r.topk_weights);
  in.ref = Tensor(DType::kF32, Shape{kTokens, layer.hidden_size});
  MoeReferenceOptions opt;
  if (qc.activations.scheme != QuantScheme::kBF16) {
    opt.numerics = MoeNumerics::kEmulateActivationQuant;
    opt.activation_quant = qc.activations;
  }
  moe_reference_routed(in.x, in.ids, in.weights, layer, w, in.ref, opt);
  return in;
}

void poison(const Tensor& t) {
  if (t.dtype() == DType::kF32) {
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.ptr<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  } else {
    for (std::int64_t i = 0; i < t.numel(); ++i) t.ptr<std::uint16_t>()[i] = 0x7FC1;
  }
}

// Runs every pair on one (layer, quant) and compares with the reference bitwise. Returns the
// number of kernels run.
int run_pairs(const MoeLayerConfig& layer, const QuantCase& qc, DType dtype, std::uint64_t seed) {
  const MoeWeights w = random_moe_weights(layer, qc.weights, seed);
  const Inputs in = make_inputs(layer, w, qc, dtype, seed);
  MoeProblem problem;
  problem.num_tokens = kTokens;
  problem.layer = layer;
  problem.weight_quant = qc.weights;
  problem.activation_quant = qc.activations;
  problem.activation_dtype = dtype;
  int ran = 0;
  for (const Pair& pair : compatible_pairs(kTokens)) {
    SCOPED_TRACE(pair.name + " " + problem.str());
    FusedMoEKernel kernel(pair.pf(), pair.experts());
    const Support s = kernel.supports(problem);
    if (!s) {
      // The only refusal on this matrix: monolithic with weight-on-input routing (Llama4).
      EXPECT_TRUE(problem.apply_router_weight_on_input() && pair.name.rfind("monolithic", 0) == 0)
          << s.reason;
      EXPECT_NE(s.reason.find("llama4"), std::string::npos) << s.reason;
      continue;
    }
    kernel.prepare(problem, w);
    Tensor out(dtype, Shape{kTokens, layer.hidden_size});
    poison(out);
    if (pair.name.rfind("monolithic", 0) == 0)
      kernel.apply_logits(in.x, in.logits, out, in.bias);
    else
      kernel.apply(in.x, in.ids, in.weights, out);
    const std::int64_t diff = first_bit_difference(out, in.ref);
    EXPECT_EQ(diff, -1) << testing::describe_difference(out, in.ref, diff);
    ++ran;
  }
  return ran;
}

TEST(Combination, EveryPairQuantAndRoutingMethodMatchesReferenceBitwise) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const RoutingMethod methods[] = {
      RoutingMethod::kDefault,    RoutingMethod::kRenormalize, RoutingMethod::kRenormalizeNaive,
      RoutingMethod::kTopK,       RoutingMethod::kSigmoid,     RoutingMethod::kSigmoidRenorm,
      RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4,      RoutingMethod::kMiniMax2};
  int ran = 0;
  for (const QuantCase& qc : quant_cases()) {
    for (RoutingMethod m : methods) {
      ran += run_pairs(small_layer(m, Activation::kSiluAndMul), qc, DType::kF32, seed);
    }
  }
  EXPECT_GT(ran, 400);
}

TEST(Combination, EveryPairQuantAndActivationMatchesReferenceBitwise) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const Activation acts[] = {Activation::kGeluErfAndMul, Activation::kGeluTanhAndMul,
                             Activation::kSwigluOai, Activation::kRelu2};
  for (const QuantCase& qc : quant_cases()) {
    for (Activation a : acts) {
      run_pairs(small_layer(RoutingMethod::kRenormalize, a), qc, DType::kF32, seed + 7);
    }
  }
}

TEST(Combination, Bf16ActivationsRoundOnceAtTheEnd) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  for (const QuantCase& qc : quant_cases())
    run_pairs(small_layer(RoutingMethod::kRenormalizeNaive, Activation::kSiluAndMul), qc,
              DType::kBF16, seed + 11);
}

TEST(Combination, ModularApplyLogitsRoutesWithTheReference) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const MoeLayerConfig layer = small_layer(RoutingMethod::kDeepSeekV3, Activation::kSiluAndMul);
  const QuantCase qc{parse_quant_config("mxfp4"), parse_quant_config("mxfp8")};
  const MoeWeights w = random_moe_weights(layer, qc.weights, seed);
  const Inputs in = make_inputs(layer, w, qc, DType::kF32, seed);
  MoeProblem problem;
  problem.num_tokens = kTokens;
  problem.layer = layer;
  problem.weight_quant = qc.weights;
  problem.activation_quant = qc.activations;
  problem.activation_dtype = DType::kF32;
  FusedMoEKernel kernel(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  kernel.prepare(problem, w);
  Tensor out(DType::kF32, Shape{kTokens, layer.hidden_size});
  poison(out);
  kernel.apply_logits(in.x, in.logits, out, in.bias);
  EXPECT_EQ(first_bit_difference(out, in.ref), -1);
}

// All PrepareFinalize x Experts objects; pairs differing in format or modular/monolithic (or in
// batched T_max) are refused at construction, naming both parts.
TEST(Combination, IncompatiblePairsAreRefusedNamingBoth) {
  std::vector<std::function<std::unique_ptr<PrepareFinalize>()>> pfs = {
      [] { return make_cpu_no_ep_prepare_finalize(); },
      [] { return make_cpu_batched_prepare_finalize(16); },
      [] { return make_cpu_monolithic_prepare_finalize(); }};
  std::vector<std::function<std::unique_ptr<Experts>()>> experts = {
      [] { return make_cpu_standard_experts(ReducePolicy::kContiguous); },
      [] { return make_cpu_standard_experts(ReducePolicy::kAlreadyReduced); },
      [] { return make_cpu_batched_experts(16); },
      [] { return make_cpu_batched_experts(8); },
      [] { return make_cpu_batched_experts(16, 1, ReducePolicy::kAlreadyReduced); },
      [] { return make_cpu_monolithic_experts(); }};
  int refused = 0, accepted = 0;
  for (auto& make_pf : pfs) {
    for (auto& make_ex : experts) {
      auto pf = make_pf();
      auto ex = make_ex();
      const std::string pf_name = pf->name(), ex_name = ex->name();
      const bool compatible = pf->is_monolithic() == ex->is_monolithic() &&
                              pf->activation_format() == ex->activation_format() &&
                              pf->max_tokens_per_rank() == ex->max_tokens_per_rank();
      SCOPED_TRACE(pf_name + " x " + ex_name);
      if (compatible) {
        EXPECT_NO_THROW(FusedMoEKernel(std::move(pf), std::move(ex)));
        ++accepted;
        continue;
      }
      try {
        FusedMoEKernel k(std::move(pf), std::move(ex));
        ADD_FAILURE() << "expected a refusal";
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(pf_name), std::string::npos) << msg;
        EXPECT_NE(msg.find(ex_name), std::string::npos) << msg;
        ++refused;
      }
    }
  }
  EXPECT_EQ(accepted, 5);  // no_ep x 2 standard, batched x 2 batched(16), monolithic x monolithic
  EXPECT_EQ(refused, 13);
}

}  // namespace
}  // namespace moekit
