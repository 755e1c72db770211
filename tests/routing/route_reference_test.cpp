// route_reference: hand-computed cases per method, ties, random rows vs an independent float64
// implementation, and the validation messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "moe/host_convert.hpp"
#include "moe/moe_test_util.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

using reftest::expect_error;
using reftest::f32_tensor;

struct Routed {
  std::vector<int> ids;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, int e, const RoutingConfig& cfg,
             const std::vector<float>& bias = {}) {
  const auto m = static_cast<std::int64_t>(logits.size()) / e;
  Tensor l = f32_tensor(logits, Shape{m, e});
  Tensor b;
  if (!bias.empty()) b = f32_tensor(bias, Shape{e});
  RoutingResult r = route_reference(l, b, cfg);
  Routed out;
  out.ids.assign(r.topk_ids.ptr<int>(), r.topk_ids.ptr<int>() + m * cfg.top_k);
  out.weights.assign(r.topk_weights.ptr<float>(), r.topk_weights.ptr<float>() + m * cfg.top_k);
  return out;
}

RoutingConfig cfg(RoutingMethod m, int k) {
  RoutingConfig c;
  c.method = m;
  c.top_k = k;
  return c;
}

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(Routing, DefaultIsSoftmaxOverAllExperts) {
  Routed r = route({1, 3, 2, 0}, 4, cfg(RoutingMethod::kDefault, 2));
  EXPECT_EQ(r.ids, (std::vector<int>{1, 2}));
  const double s = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_FLOAT_EQ(r.weights[0], std::exp(3.0) / s);
  EXPECT_FLOAT_EQ(r.weights[1], std::exp(2.0) / s);
}

TEST(Routing, RenormalizeIsSoftmaxOverChosen) {
  Routed r = route({1, 3, 2, 0}, 4, cfg(RoutingMethod::kRenormalize, 2));
  EXPECT_EQ(r.ids, (std::vector<int>{1, 2}));
  EXPECT_FLOAT_EQ(r.weights[0], 1.0 / (1.0 + std::exp(-1.0)));
  EXPECT_FLOAT_EQ(r.weights[1], 1.0 / (1.0 + std::exp(1.0)));
  Routed n = route({1, 3, 2, 0}, 4, cfg(RoutingMethod::kRenormalizeNaive, 2));
  EXPECT_EQ(n.ids, r.ids);
  EXPECT_FLOAT_EQ(n.weights[0], r.weights[0]);
  EXPECT_FLOAT_EQ(n.weights[1], r.weights[1]);
}

TEST(Routing, TopKAndSigmoidFamilies) {
  const std::vector<float> l = {0.5f, -1.0f, 2.0f, 1.5f};
  Routed t = route(l, 4, cfg(RoutingMethod::kTopK, 3));
  EXPECT_EQ(t.ids, (std::vector<int>{2, 3, 0}));
  EXPECT_EQ(t.weights, (std::vector<float>{2.0f, 1.5f, 0.5f}));
  Routed s = route(l, 4, cfg(RoutingMethod::kSigmoid, 2));
  EXPECT_EQ(s.ids, (std::vector<int>{2, 3}));
  EXPECT_FLOAT_EQ(s.weights[0], sig(2.0));
  EXPECT_FLOAT_EQ(s.weights[1], sig(1.5));
  Routed sr = route(l, 4, cfg(RoutingMethod::kSigmoidRenorm, 2));
  EXPECT_FLOAT_EQ(sr.weights[0], sig(2.0) / (sig(2.0) + sig(1.5)));
  EXPECT_FLOAT_EQ(sr.weights[1], sig(1.5) / (sig(2.0) + sig(1.5)));
  Routed l4 = route(l, 4, cfg(RoutingMethod::kLlama4, 1));
  EXPECT_EQ(l4.ids, (std::vector<int>{2}));
  EXPECT_FLOAT_EQ(l4.weights[0], sig(2.0));
}

TEST(Routing, TiesGoToLowerIndexAndOutputIsOrdered) {
  Routed a = route({1, 2, 2, 0, 2}, 5, cfg(RoutingMethod::kRenormalize, 2));
  EXPECT_EQ(a.ids, (std::vector<int>{1, 2}));
  EXPECT_FLOAT_EQ(a.weights[0], 0.5f);
  Routed b = route({7, 7, 7, 7}, 4, cfg(RoutingMethod::kDefault, 3));
  EXPECT_EQ(b.ids, (std::vector<int>{0, 1, 2}));
  for (float w : b.weights) EXPECT_FLOAT_EQ(w, 0.25f);
  // All experts chosen: ids are a full permutation in descending-score order.
  Routed c = route({0, 3, 1, 3}, 4, cfg(RoutingMethod::kTopK, 4));
  EXPECT_EQ(c.ids, (std::vector<int>{1, 3, 2, 0}));
  // NaN ranks below every number (also -inf).
  const float nan = std::nanf("");
  const float inf = INFINITY;
  Routed d = route({nan, -inf, 1.0f}, 3, cfg(RoutingMethod::kTopK, 3));
  EXPECT_EQ(d.ids, (std::vector<int>{2, 1, 0}));
}

TEST(Routing, DeepSeekV3GroupsRestrictSelection) {
  RoutingConfig c = cfg(RoutingMethod::kDeepSeekV3, 4);
  c.num_expert_groups = 4;
  c.topk_group = 2;
  c.routed_scaling_factor = 2.5f;
  // s = 0.5 everywhere; b = 0.5 + bias = {.5 .6 | .95 .2 | .55 .5 | .7 .75}
  // group scores 1.1, 1.15, 1.05, 1.45 -> keep groups 3 and 1 -> experts {2, 7, 6, 3}
  // (expert 1, b = 0.6, is excluded with its group).
  Routed r =
      route(std::vector<float>(8, 0.0f), 8, c, {0, 0.1f, 0.45f, -0.3f, 0.05f, 0, 0.2f, 0.25f});
  EXPECT_EQ(r.ids, (std::vector<int>{2, 7, 6, 3}));
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 2.5f / 4);
  // Without groups expert 1 is chosen.
  c.num_expert_groups = 1;
  c.topk_group = 1;
  Routed u =
      route(std::vector<float>(8, 0.0f), 8, c, {0, 0.1f, 0.45f, -0.3f, 0.05f, 0, 0.2f, 0.25f});
  EXPECT_EQ(u.ids, (std::vector<int>{2, 7, 6, 1}));
}

TEST(Routing, DeepSeekV3WeightsUseUnbiasedScores) {
  RoutingConfig c = cfg(RoutingMethod::kDeepSeekV3, 2);
  c.routed_scaling_factor = 2.5f;
  // s = sig{0, 1, -1, 2}; b = s + {1, 0, 0, -1} = {1.5, .73, .27, -.12} -> experts {0, 1}.
  Routed r = route({0, 1, -1, 2}, 4, c, {1, 0, 0, -1});
  EXPECT_EQ(r.ids, (std::vector<int>{0, 1}));
  const double s0 = sig(0), s1 = sig(1);
  EXPECT_FLOAT_EQ(r.weights[0], s0 / (s0 + s1) * 2.5);
  EXPECT_FLOAT_EQ(r.weights[1], s1 / (s0 + s1) * 2.5);
  // MiniMax2 computes the same thing without groups.
  RoutingConfig mm = cfg(RoutingMethod::kMiniMax2, 2);
  mm.routed_scaling_factor = 2.5f;
  Routed q = route({0, 1, -1, 2}, 4, mm, {1, 0, 0, -1});
  EXPECT_EQ(q.ids, r.ids);
  EXPECT_FLOAT_EQ(q.weights[0], r.weights[0]);
  EXPECT_FLOAT_EQ(q.weights[1], r.weights[1]);
}

TEST(Routing, DeepSeekV3GroupOfOneAndGroupTies) {
  RoutingConfig c = cfg(RoutingMethod::kDeepSeekV3, 2);
  c.num_expert_groups = 4;  // one expert per group: the group score is that expert's score
  c.topk_group = 2;
  Routed r = route({0, 0, 0, 0}, 4, c, {0.1f, 0.3f, 0.3f, 0.2f});
  EXPECT_EQ(r.ids, (std::vector<int>{1, 2}));
  // All groups tie: the lower groups are kept.
  c.num_expert_groups = 2;
  c.topk_group = 1;
  Routed t = route({0, 0, 0, 0}, 4, c, {0, 0, 0, 0});
  EXPECT_EQ(t.ids, (std::vector<int>{0, 1}));
}

TEST(Routing, Bf16LogitsAreWidenedExactly) {
  Tensor l(DType::kBF16, Shape{1, 3});
  const float v[3] = {0.15625f, 1.5f, -2.0f};  // all exact in bf16
  for (int i = 0; i < 3; ++i) l.ptr<std::uint16_t>()[i] = detail::float_to_bf16_bits(v[i]);
  RoutingResult r = route_reference(l, {}, cfg(RoutingMethod::kTopK, 2));
  EXPECT_EQ(r.topk_ids.ptr<int>()[0], 1);
  EXPECT_EQ(r.topk_weights.ptr<float>()[0], 1.5f);
  EXPECT_EQ(r.topk_weights.ptr<float>()[1], 0.15625f);
}

TEST(Routing, ZeroTokens) {
  Tensor l(DType::kF32, Shape{0, 8});
  RoutingResult r = route_reference(l, {}, cfg(RoutingMethod::kRenormalize, 2));
  EXPECT_EQ(r.topk_ids.shape(), (Shape{0, 2}));
}

// ---- random rows vs an independent float64 implementation -------------------------------------

struct NaiveRow {
  std::vector<int> ids;
  std::vector<double> w;
};

// Selection scores follow the spec (fp32 for the sigmoid + bias methods; logits otherwise),
// ordering by std::stable_sort; everything else in double.
NaiveRow naive_route(const float* l, const float* bias, int e, const RoutingConfig& c) {
  const int k = c.top_k;
  std::vector<float> score(l, l + e);
  std::vector<char> ok(static_cast<std::size_t>(e), 1);
  const bool biased =
      c.method == RoutingMethod::kDeepSeekV3 || c.method == RoutingMethod::kMiniMax2;
  if (biased) {
    for (int i = 0; i < e; ++i) score[i] = 1.0f / (1.0f + std::exp(-l[i])) + bias[i];
    const int g = c.method == RoutingMethod::kDeepSeekV3 ? c.num_expert_groups : 1;
    if (g > 1) {
      const int per = e / g;
      std::vector<std::pair<float, int>> gs;
      for (int gi = 0; gi < g; ++gi) {
        std::vector<float> v(score.begin() + gi * per, score.begin() + (gi + 1) * per);
        std::sort(v.rbegin(), v.rend());
        gs.push_back({per > 1 ? v[0] + v[1] : v[0], gi});
      }
      std::stable_sort(gs.begin(), gs.end(), [](auto a, auto b) { return a.first > b.first; });
      std::fill(ok.begin(), ok.end(), 0);
      for (int j = 0; j < c.topk_group; ++j)
        for (int i = 0; i < per; ++i) ok[gs[j].second * per + i] = 1;
    }
  }
  std::vector<int> order;
  for (int i = 0; i < e; ++i)
    if (ok[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  NaiveRow r;
  r.ids.assign(order.begin(), order.begin() + k);
  double mx = *std::max_element(l, l + e), all = 0, chosen_exp = 0, chosen_sig = 0;
  for (int i = 0; i < e; ++i) all += std::exp(double(l[i]) - mx);
  for (int id : r.ids) {
    chosen_exp += std::exp(double(l[id]) - mx);
    chosen_sig += sig(l[id]);
  }
  for (int id : r.ids) {
    const double x = l[id];
    switch (c.method) {
      case RoutingMethod::kDefault:
        r.w.push_back(std::exp(x - mx) / all);
        break;
      case RoutingMethod::kRenormalize:
      case RoutingMethod::kRenormalizeNaive:
        r.w.push_back(std::exp(x - mx) / chosen_exp);
        break;
      case RoutingMethod::kTopK:
        r.w.push_back(x);
        break;
      case RoutingMethod::kSigmoid:
      case RoutingMethod::kLlama4:
        r.w.push_back(sig(x));
        break;
      case RoutingMethod::kSigmoidRenorm:
        r.w.push_back(sig(x) / chosen_sig);
        break;
      case RoutingMethod::kDeepSeekV3:
      case RoutingMethod::kMiniMax2:
        r.w.push_back(sig(x) / chosen_sig * c.routed_scaling_factor);
        break;
    }
  }
  return r;
}

TEST(Routing, RandomRowsMatchFloat64Naive) {
  MOEKIT_REF_SEED(seed);
  std::mt19937_64 rng(seed);
  struct Case {
    RoutingMethod method;
    int e, k, groups, topk_group;
    float scale;
  };
  const Case cases[] = {
      {RoutingMethod::kDefault, 8, 2, 1, 1, 1.0f},
      {RoutingMethod::kRenormalize, 32, 4, 1, 1, 1.0f},
      {RoutingMethod::kRenormalizeNaive, 128, 8, 1, 1, 1.0f},
      {RoutingMethod::kTopK, 16, 3, 1, 1, 1.0f},
      {RoutingMethod::kSigmoid, 16, 4, 1, 1, 1.0f},
      {RoutingMethod::kSigmoidRenorm, 64, 6, 1, 1, 1.0f},
      {RoutingMethod::kDeepSeekV3, 256, 8, 8, 4, 2.5f},
      {RoutingMethod::kDeepSeekV3, 64, 6, 8, 3, 1.5f},
      {RoutingMethod::kDeepSeekV3, 384, 8, 1, 1, 2.827f},
      {RoutingMethod::kLlama4, 16, 1, 1, 1, 1.0f},
      {RoutingMethod::kMiniMax2, 256, 8, 1, 1, 2.0f},
  };
  for (const Case& cs : cases) {
    RoutingConfig c = cfg(cs.method, cs.k);
    c.num_expert_groups = cs.groups;
    c.topk_group = cs.topk_group;
    c.routed_scaling_factor = cs.scale;
    SCOPED_TRACE(c.str());
    const int m = 37;
    std::vector<float> l(static_cast<std::size_t>(m * cs.e)), bias;
    std::normal_distribution<float> nd(0.0f, 2.0f);
    // Half the rows from a coarse grid, so that exact ties are common.
    for (int t = 0; t < m; ++t)
      for (int i = 0; i < cs.e; ++i)
        l[t * cs.e + i] = t % 2 ? nd(rng) : std::round(nd(rng) * 2.0f) / 2.0f;
    if (routing_uses_bias(cs.method)) {
      bias.resize(static_cast<std::size_t>(cs.e));
      for (auto& b : bias) b = std::round(nd(rng) * 4.0f) / 64.0f;
    }
    Routed r = route(l, cs.e, c, bias);
    for (int t = 0; t < m; ++t) {
      NaiveRow n = naive_route(l.data() + t * cs.e, bias.data(), cs.e, c);
      for (int j = 0; j < cs.k; ++j) {
        ASSERT_EQ(r.ids[t * cs.k + j], n.ids[j]) << "row " << t << " slot " << j;
        EXPECT_NEAR(r.weights[t * cs.k + j], n.w[j], 2e-7 * std::max(1.0, std::fabs(n.w[j])))
            << "row " << t << " slot " << j;
      }
    }
  }
}

// ---- validation -----------------------------------------------------------------------------

TEST(RoutingValidation, MessagesNameTheArgument) {
  Tensor l(DType::kF32, Shape{2, 8});
  std::fill(l.ptr<float>(), l.ptr<float>() + 16, 0.0f);
  expect_error([&] { route_reference(l, {}, cfg(RoutingMethod::kRenormalize, 9)); },
               {"top_k", "9"});
  expect_error([&] { route_reference(l, {}, cfg(RoutingMethod::kRenormalize, 0)); }, {"top_k"});
  RoutingConfig ds = cfg(RoutingMethod::kDeepSeekV3, 2);
  Tensor bias = Tensor::zeros(DType::kF32, Shape{8});
  ds.num_expert_groups = 3;
  expect_error([&] { route_reference(l, bias, ds); }, {"num_expert_groups", "3"});
  ds.num_expert_groups = 4;
  ds.topk_group = 5;
  expect_error([&] { route_reference(l, bias, ds); }, {"topk_group", "5"});
  ds.topk_group = 1;
  ds.top_k = 3;  // one group of 2 experts kept
  expect_error([&] { route_reference(l, bias, ds); }, {"top_k", "topk_group"});
  ds.top_k = 2;
  ds.routed_scaling_factor = 0.0f;
  expect_error([&] { route_reference(l, bias, ds); }, {"routed_scaling_factor"});
  ds.routed_scaling_factor = 1.0f;
  expect_error([&] { route_reference(l, {}, ds); }, {"correction_bias", "absent"});
  Tensor bad_bias = Tensor::zeros(DType::kF32, Shape{7});
  expect_error([&] { route_reference(l, bad_bias, ds); }, {"correction_bias shape", "[8]", "[7]"});
  expect_error([&] { route_reference(l, bias, cfg(RoutingMethod::kRenormalize, 2)); },
               {"correction_bias", "absent"});
  RoutingConfig grouped = cfg(RoutingMethod::kRenormalize, 2);
  grouped.num_expert_groups = 2;
  expect_error([&] { route_reference(l, {}, grouped); }, {"num_expert_groups"});
  Tensor l1(DType::kF32, Shape{8});
  expect_error([&] { route_reference(l1, {}, cfg(RoutingMethod::kRenormalize, 2)); },
               {"logits rank"});
  Tensor li(DType::kI32, Shape{2, 8});
  expect_error([&] { route_reference(li, {}, cfg(RoutingMethod::kRenormalize, 2)); },
               {"logits dtype", "i32"});
  Tensor ids(DType::kF32, Shape{2, 2}), w(DType::kF32, Shape{2, 2});
  expect_error([&] { route_reference(l, {}, cfg(RoutingMethod::kRenormalize, 2), ids, w); },
               {"topk_ids dtype"});
  Tensor ids3(DType::kI32, Shape{2, 3});
  expect_error([&] { route_reference(l, {}, cfg(RoutingMethod::kRenormalize, 2), ids3, w); },
               {"topk_ids shape", "[2, 2]", "[2, 3]"});
  expect_error([] { parse_routing_method("softmax"); },
               {"routing method", "deepseek_v3", "softmax"});
}

TEST(RoutingConfigNames, RoundTrip) {
  for (auto m :
       {RoutingMethod::kDefault, RoutingMethod::kRenormalize, RoutingMethod::kRenormalizeNaive,
        RoutingMethod::kTopK, RoutingMethod::kSigmoid, RoutingMethod::kSigmoidRenorm,
        RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4, RoutingMethod::kMiniMax2}) {
    EXPECT_EQ(parse_routing_method(routing_method_name(m)), m);
  }
  EXPECT_TRUE(routing_uses_bias(RoutingMethod::kDeepSeekV3));
  EXPECT_FALSE(routing_uses_bias(RoutingMethod::kLlama4));
  EXPECT_TRUE(routing_weight_on_input(RoutingMethod::kLlama4));
}

}  // namespace
}  // namespace moekit
