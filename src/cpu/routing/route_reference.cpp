// The CPU reference router: exact, documented semantics for every RoutingMethod (routing.hpp).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "moe/host_convert.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

namespace {

// Strict "ranks before": higher score first, NaN after every number, ties to the lower index.
inline bool ranks_before(float a, int ia, float b, int ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

inline float sigmoid_f32(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Picks the k best of score[0..n) among eligible[i] != 0, best first, into out_ids.
void select_top(const float* score, const std::uint8_t* eligible, int n, int k, int* out_ids,
                std::vector<std::uint8_t>& taken) {
  taken.assign(static_cast<std::size_t>(n), 0);
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int i = 0; i < n; ++i) {
      if (taken[static_cast<std::size_t>(i)] || (eligible && !eligible[i])) continue;
      if (best < 0 || ranks_before(score[i], i, score[best], best)) best = i;
    }
    MOEKIT_CHECK(best >= 0, "route_reference: internal error: fewer than top_k eligible experts");
    taken[static_cast<std::size_t>(best)] = 1;
    out_ids[j] = best;
  }
}

struct RowScratch {
  std::vector<float> logits, score;
  std::vector<std::uint8_t> eligible, taken, group_taken;
  std::vector<float> group_score;
  std::vector<int> groups;
};

void route_row(const float* logits, const float* bias, int num_experts, const RoutingConfig& cfg,
               RowScratch& s, int* ids, float* weights) {
  const int k = cfg.top_k;
  switch (cfg.method) {
    case RoutingMethod::kDefault:
    case RoutingMethod::kRenormalize:
    case RoutingMethod::kRenormalizeNaive:
    case RoutingMethod::kTopK:
    case RoutingMethod::kSigmoid:
    case RoutingMethod::kSigmoidRenorm:
    case RoutingMethod::kLlama4:
      select_top(logits, nullptr, num_experts, k, ids, s.taken);
      break;
    case RoutingMethod::kMiniMax2:
    case RoutingMethod::kDeepSeekV3: {
      s.score.resize(static_cast<std::size_t>(num_experts));
      for (int e = 0; e < num_experts; ++e) s.score[e] = sigmoid_f32(logits[e]) + bias[e];
      const std::uint8_t* eligible = nullptr;
      const int groups = cfg.method == RoutingMethod::kDeepSeekV3 ? cfg.num_expert_groups : 1;
      if (groups > 1 && cfg.topk_group < groups) {
        const int per_group = num_experts / groups;
        s.group_score.resize(static_cast<std::size_t>(groups));
        int top2[2];
        for (int g = 0; g < groups; ++g) {
          const int take = per_group >= 2 ? 2 : 1;
          select_top(s.score.data() + g * per_group, nullptr, per_group, take, top2, s.taken);
          float sum = s.score[g * per_group + top2[0]];
          if (take == 2) sum += s.score[g * per_group + top2[1]];
          s.group_score[g] = sum;
        }
        s.groups.resize(static_cast<std::size_t>(cfg.topk_group));
        select_top(s.group_score.data(), nullptr, groups, cfg.topk_group, s.groups.data(),
                   s.group_taken);
        s.eligible.assign(static_cast<std::size_t>(num_experts), 0);
        for (int g : s.groups)
          for (int e = g * per_group; e < (g + 1) * per_group; ++e) s.eligible[e] = 1;
        eligible = s.eligible.data();
      }
      select_top(s.score.data(), eligible, num_experts, k, ids, s.taken);
      break;
    }
  }

  // Weights, in float64 from the fp32 inputs, rounded once.
  double w[64];
  std::vector<double> wbig;
  double* wd = w;
  if (k > 64) {
    wbig.resize(static_cast<std::size_t>(k));
    wd = wbig.data();
  }
  auto sig = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  switch (cfg.method) {
    case RoutingMethod::kDefault:
    case RoutingMethod::kRenormalizeNaive: {
      double mx = -std::numeric_limits<double>::infinity();
      for (int e = 0; e < num_experts; ++e) mx = std::fmax(mx, static_cast<double>(logits[e]));
      double denom = 0.0;
      for (int e = 0; e < num_experts; ++e) denom += std::exp(static_cast<double>(logits[e]) - mx);
      double chosen = 0.0;
      for (int j = 0; j < k; ++j) {
        wd[j] = std::exp(static_cast<double>(logits[ids[j]]) - mx) / denom;
        chosen += wd[j];
      }
      if (cfg.method == RoutingMethod::kRenormalizeNaive)
        for (int j = 0; j < k; ++j) wd[j] /= chosen;
      break;
    }
    case RoutingMethod::kRenormalize: {
      const double mx = logits[ids[0]];  // the first chosen is the largest (NaN aside)
      double denom = 0.0;
      for (int j = 0; j < k; ++j) denom += std::exp(static_cast<double>(logits[ids[j]]) - mx);
      for (int j = 0; j < k; ++j)
        wd[j] = std::exp(static_cast<double>(logits[ids[j]]) - mx) / denom;
      break;
    }
    case RoutingMethod::kTopK:
      for (int j = 0; j < k; ++j) wd[j] = logits[ids[j]];
      break;
    case RoutingMethod::kSigmoid:
    case RoutingMethod::kLlama4:
      for (int j = 0; j < k; ++j) wd[j] = sig(logits[ids[j]]);
      break;
    case RoutingMethod::kSigmoidRenorm: {
      double sum = 0.0;
      for (int j = 0; j < k; ++j) sum += (wd[j] = sig(logits[ids[j]]));
      for (int j = 0; j < k; ++j) wd[j] /= sum;
      break;
    }
    case RoutingMethod::kDeepSeekV3:
    case RoutingMethod::kMiniMax2: {
      double sum = 0.0;
      for (int j = 0; j < k; ++j) sum += (wd[j] = sigmoid_f32(logits[ids[j]]));
      const double scale = static_cast<double>(cfg.routed_scaling_factor) / (sum + 1e-20);
      for (int j = 0; j < k; ++j) wd[j] *= scale;
      break;
    }
  }
  for (int j = 0; j < k; ++j) weights[j] = static_cast<float>(wd[j]);
}

void check_host_contiguous(const TensorView& t, const char* name) {
  MOEKIT_CHECK_ARG(t.device.is_host(), std::string(name) + " device", "host", t.device.str());
  MOEKIT_CHECK_ARG(t.is_contiguous(), std::string(name) + " layout", "contiguous", "strided");
}

}  // namespace

void route_reference(const TensorView& logits, const TensorView& correction_bias,
                     const RoutingConfig& config, const TensorView& topk_ids,
                     const TensorView& topk_weights) {
  MOEKIT_CHECK_ARG(logits.rank() == 2, "logits rank", 2, logits.rank());
  MOEKIT_CHECK_ARG(logits.dtype == DType::kF32 || logits.dtype == DType::kBF16, "logits dtype",
                   "f32 or bf16", dtype_name(logits.dtype));
  check_host_contiguous(logits, "logits");
  const std::int64_t m = logits.size(0);
  MOEKIT_CHECK_ARG(logits.size(1) >= 1 && logits.size(1) <= std::numeric_limits<int>::max(),
                   "logits.shape[1] (num_experts)", ">= 1", logits.size(1));
  const int num_experts = static_cast<int>(logits.size(1));
  config.validate(num_experts);
  const int k = config.top_k;

  const Shape out_shape{m, k};
  MOEKIT_CHECK_ARG(topk_ids.dtype == DType::kI32, "topk_ids dtype", "i32",
                   dtype_name(topk_ids.dtype));
  MOEKIT_CHECK_ARG(topk_ids.shape == out_shape, "topk_ids shape", out_shape.str(),
                   topk_ids.shape.str());
  check_host_contiguous(topk_ids, "topk_ids");
  MOEKIT_CHECK_ARG(topk_weights.dtype == DType::kF32, "topk_weights dtype", "f32",
                   dtype_name(topk_weights.dtype));
  MOEKIT_CHECK_ARG(topk_weights.shape == out_shape, "topk_weights shape", out_shape.str(),
                   topk_weights.shape.str());
  check_host_contiguous(topk_weights, "topk_weights");

  const bool needs_bias = routing_uses_bias(config.method);
  if (needs_bias) {
    MOEKIT_CHECK_ARG(correction_bias.defined(), "correction_bias",
                     std::string("an f32 [E] tensor for routing method ") +
                         std::string(routing_method_name(config.method)),
                     "absent");
    MOEKIT_CHECK_ARG(correction_bias.dtype == DType::kF32, "correction_bias dtype", "f32",
                     dtype_name(correction_bias.dtype));
    const Shape bias_shape{num_experts};
    MOEKIT_CHECK_ARG(correction_bias.shape == bias_shape, "correction_bias shape", bias_shape.str(),
                     correction_bias.shape.str());
    check_host_contiguous(correction_bias, "correction_bias");
  } else {
    MOEKIT_CHECK_ARG(
        !correction_bias.defined(), "correction_bias",
        std::string("absent for routing method ") + std::string(routing_method_name(config.method)),
        correction_bias.str());
  }
  if (m == 0) return;

  const float* bias = needs_bias ? correction_bias.ptr<const float>() : nullptr;
  auto* ids = topk_ids.ptr<std::int32_t>();
  auto* weights = topk_weights.ptr<float>();
  parallel_for(m, std::max<std::int64_t>(1, 16384 / num_experts),
               [&](std::int64_t b, std::int64_t e) {
                 RowScratch scratch;
                 scratch.logits.resize(static_cast<std::size_t>(num_experts));
                 std::vector<int> row_ids(static_cast<std::size_t>(k));
                 for (std::int64_t r = b; r < e; ++r) {
                   detail::load_f32(logits, r * num_experts, num_experts, scratch.logits.data());
                   route_row(scratch.logits.data(), bias, num_experts, config, scratch,
                             row_ids.data(), weights + r * k);
                   for (int j = 0; j < k; ++j)
                     ids[r * k + j] = row_ids[static_cast<std::size_t>(j)];
                 }
               });
}

RoutingResult route_reference(const TensorView& logits, const TensorView& correction_bias,
                              const RoutingConfig& config) {
  MOEKIT_CHECK_ARG(config.top_k >= 1, "top_k", ">= 1", config.top_k);
  const std::int64_t m = logits.rank() >= 1 ? logits.size(0) : 0;
  RoutingResult r{Tensor(DType::kI32, Shape{m, config.top_k}),
                  Tensor(DType::kF32, Shape{m, config.top_k})};
  route_reference(logits, correction_bias, config, r.topk_ids, r.topk_weights);
  return r;
}

}  // namespace moekit
