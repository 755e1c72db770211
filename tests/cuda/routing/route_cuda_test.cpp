// route_cuda against route_reference: every method, E up to 512, k up to 32, f32 and bf16 logits,
// M in {0, 1, 3, 127, 128, 129, 1000}, tie-heavy logits. topk_ids must be identical; weights
// identical except for the documented one-ulp sigmoid cases (route_cuda.hpp): every weight within
// 2 ulp and at least 99.9% bit-identical.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/quant/device_test_util.hpp"
#include "moekit/routing/route_cuda.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

using cuda_test::poison;
using cuda_test::to_device;
using cuda_test::to_host;

struct Stats {
  std::int64_t weights = 0, exact = 0;
};

// specials: logits drawn from {NaN, +-Inf, +-0, +-1, normal} (ids compared; weights may be NaN,
// so they are compared only when both are numbers).
void check_routing(const RoutingConfig& cfg, std::int64_t m, int e, bool bf16, bool ties,
                   std::mt19937_64& rng, Stats& stats, bool specials = false) {
  SCOPED_TRACE(cfg.str() + " M=" + std::to_string(m) + " E=" + std::to_string(e) +
               (bf16 ? " bf16" : " f32") + (ties ? " ties" : "") + (specials ? " specials" : ""));
  Tensor logits(bf16 ? DType::kBF16 : DType::kF32, Shape{m, e});
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::uniform_int_distribution<int> few(-3, 3);
  std::uniform_int_distribution<int> pick(0, 9);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1.0f, -1.0f};
  for (std::int64_t i = 0; i < m * e; ++i) {
    const int p = pick(rng);
    const float v = specials && p < 7 ? special[p] : ties ? 0.5f * static_cast<float>(few(rng)) : n(rng);
    if (bf16) logits.ptr<std::uint16_t>()[i] = cuda_test::to_bf16_bits(v);
    else logits.ptr<float>()[i] = v;
  }
  Tensor bias;
  if (routing_uses_bias(cfg.method)) {
    bias = Tensor(DType::kF32, Shape{e});
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (int i = 0; i < e; ++i) bias.ptr<float>()[i] = ties ? 0.0f : u(rng);
  }
  const RoutingResult ref = route_reference(logits, bias.defined() ? bias.view() : TensorView{}, cfg);
  const Tensor logits_d = to_device(logits);
  Tensor bias_d;
  if (bias.defined()) bias_d = to_device(bias);
  Tensor ids_d(DType::kI32, Shape{m, cfg.top_k}, Device::cuda());
  Tensor w_d(DType::kF32, Shape{m, cfg.top_k}, Device::cuda());
  std::vector<std::int32_t> first_ids;
  for (int byte : {0xA5, 0x5A}) {
    poison(ids_d, byte);
    poison(w_d, byte);
    route_cuda(logits_d, bias_d.defined() ? bias_d.view() : TensorView{}, cfg, ids_d, w_d);
    cuda_test::sync();
    EXPECT_TRUE(cuda_test::bytes_equal(ref.topk_ids, ids_d, "topk_ids"));
    const Tensor w = to_host(w_d);
    std::int64_t worst = 0;
    for (std::int64_t i = 0; i < w.numel(); ++i) {
      const float a = ref.topk_weights.ptr<float>()[i], b = w.ptr<float>()[i];
      if (specials && (std::isnan(a) || std::isnan(b))) {
        EXPECT_EQ(std::isnan(a), std::isnan(b)) << "weight " << i;
        continue;
      }
      const std::int64_t d = cuda_test::ulp_distance(a, b);
      worst = std::max(worst, d);
      stats.weights += 1;
      stats.exact += d == 0;
    }
    EXPECT_LE(worst, 2) << "topk_weights beyond the 2-ulp bound";
  }
}

TEST(RouteCuda, EveryMethodMatchesReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  Stats stats;
  const RoutingMethod plain[] = {RoutingMethod::kDefault, RoutingMethod::kRenormalize,
                                 RoutingMethod::kRenormalizeNaive, RoutingMethod::kTopK,
                                 RoutingMethod::kSigmoid, RoutingMethod::kSigmoidRenorm,
                                 RoutingMethod::kMiniMax2};
  for (RoutingMethod method : plain) {
    for (auto [e, k] : std::vector<std::pair<int, int>>{{8, 2}, {32, 4}, {60, 6}, {128, 8},
                                                        {256, 8}, {512, 32}, {5, 5}}) {
      RoutingConfig cfg;
      cfg.method = method;
      cfg.top_k = k;
      cfg.routed_scaling_factor = method == RoutingMethod::kMiniMax2 ? 1.5f : 1.0f;
      for (std::int64_t m : {0, 1, 3, 129}) check_routing(cfg, m, e, false, false, rng, stats);
      check_routing(cfg, 128, e, true, false, rng, stats);
      check_routing(cfg, 127, e, false, true, rng, stats);
    }
  }
  RoutingConfig llama;
  llama.method = RoutingMethod::kLlama4;
  llama.top_k = 1;
  check_routing(llama, 1000, 16, false, false, rng, stats);
  check_routing(llama, 3, 16, true, true, rng, stats);

  // DeepSeek-V3 (256 experts, 8 groups, 4 kept, k = 8, x2.5), Kimi-K2 style (no groups, 384),
  // and odd groupings (one expert per group; every group kept).
  struct G {
    int e, k, groups, keep;
    float scale;
  };
  // Group sizes: 32 (DeepSeek-V3), 64 (two registers per group), 16 / 8 / 2 / 1 (lane segments),
  // 9 and 12 (not powers of two: the shared-memory path).
  for (const G g : {G{256, 8, 8, 4, 2.5f}, G{384, 8, 1, 1, 2.827f}, G{16, 4, 16, 5, 1.0f},
                    G{64, 6, 8, 8, 1.0f}, G{512, 32, 32, 8, 1.0f}, G{256, 8, 4, 2, 1.0f},
                    G{512, 8, 8, 3, 1.0f}, G{128, 8, 4, 2, 1.0f}, G{48, 4, 6, 2, 1.0f},
                    G{32, 4, 16, 3, 1.0f}, G{72, 4, 8, 3, 1.0f}, G{96, 6, 8, 5, 1.0f}}) {
    RoutingConfig cfg;
    cfg.method = RoutingMethod::kDeepSeekV3;
    cfg.top_k = g.k;
    cfg.num_expert_groups = g.groups;
    cfg.topk_group = g.keep;
    cfg.routed_scaling_factor = g.scale;
    for (std::int64_t m : {0, 1, 3, 127, 128, 129, 1000})
      check_routing(cfg, m, g.e, m == 128, false, rng, stats);
    check_routing(cfg, 129, g.e, false, true, rng, stats);
    check_routing(cfg, 64, g.e, false, false, rng, stats, /*specials=*/true);
  }
  ASSERT_GT(stats.weights, 0);
  const double exact = static_cast<double>(stats.exact) / static_cast<double>(stats.weights);
  RecordProperty("weights_bit_exact_fraction", std::to_string(exact));
  EXPECT_GE(exact, 0.999) << stats.exact << " of " << stats.weights << " weights bit-exact";
}

TEST(RouteCuda, RejectsBadArguments) {
  MOEKIT_REQUIRE_GPU();
  Tensor logits_h(DType::kF32, Shape{2, 8});
  Tensor logits(DType::kF32, Shape{2, 8}, Device::cuda());
  Tensor ids(DType::kI32, Shape{2, 2}, Device::cuda()), w(DType::kF32, Shape{2, 2}, Device::cuda());
  RoutingConfig cfg;
  cfg.top_k = 2;
  testing::expect_error([&] { route_cuda(logits_h, {}, cfg, ids, w); }, {"logits device"});
  Tensor big(DType::kF32, Shape{2, 600}, Device::cuda());
  testing::expect_error([&] { route_cuda(big, {}, cfg, ids, w); }, {"num_experts"});
  Tensor bad_ids(DType::kI32, Shape{2, 3}, Device::cuda());
  testing::expect_error([&] { route_cuda(logits, {}, cfg, bad_ids, w); }, {"topk_ids shape"});
  cfg.method = RoutingMethod::kDeepSeekV3;
  testing::expect_error([&] { route_cuda(logits, {}, cfg, ids, w); }, {"correction_bias"});
  cfg.method = RoutingMethod::kTopK;
  cfg.top_k = 40;
  Tensor l64(DType::kF32, Shape{2, 64}, Device::cuda());
  Tensor i40(DType::kI32, Shape{2, 40}, Device::cuda()), w40(DType::kF32, Shape{2, 40}, Device::cuda());
  testing::expect_error([&] { route_cuda(l64, {}, cfg, i40, w40); }, {"top_k"});
}

}  // namespace
}  // namespace moekit
