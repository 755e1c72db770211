// The CPU reference MoE layer (reference.hpp): validation, routing, permutation by expert,
// per-expert dequantized fp32 GEMMs parallelized over (expert, token tile), and the combine.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu/moe/expert_slice.hpp"
#include "cpu/moe/gemm_f32.hpp"
#include "moe/host_convert.hpp"
#include "moekit/activation/activation.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/quant/quantize.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

namespace {

// Tokens (permuted rows) per work item: small enough to spread a decode batch over the threads,
// large enough that each weight row loaded is used several times.
constexpr std::int64_t kTokenTile = 16;

struct WorkItem {
  int expert;
  std::int64_t begin, end;  // permuted rows
};

void check_host_2d(const TensorView& t, const char* name, DType dtype, const Shape& shape) {
  MOEKIT_CHECK_ARG(t.defined(), name, std::string(dtype_name(dtype)) + shape.str(), "absent");
  MOEKIT_CHECK_ARG(t.dtype == dtype, std::string(name) + " dtype", dtype_name(dtype),
                   dtype_name(t.dtype));
  MOEKIT_CHECK_ARG(t.shape == shape, std::string(name) + " shape", shape.str(), t.shape.str());
  MOEKIT_CHECK_ARG(t.device.is_host(), std::string(name) + " device", "host", t.device.str());
  MOEKIT_CHECK_ARG(t.is_contiguous(), std::string(name) + " layout", "contiguous", "strided");
}

// The per-tensor static scale for an activation scheme, if the weights carry one: a [1] view of
// a13_scale / a2_scale (after checking that all experts agree).
TensorView static_activation_scale(const Tensor& scales, const QuantConfig& act, const char* name) {
  if (!scales.defined()) return {};
  if (act.scheme != QuantScheme::kNVFP4 && act.scheme != QuantScheme::kFP8PerTensor) return {};
  const float* s = scales.ptr<const float>();
  for (std::int64_t e = 1; e < scales.numel(); ++e) {
    MOEKIT_CHECK_ARG(s[e] == s[0], std::string(name) + "[" + std::to_string(e) + "]",
                     "equal to " + std::string(name) + "[0] = " + std::to_string(s[0]) +
                         " (one activation scale for all experts)",
                     s[e]);
  }
  return TensorView(const_cast<float*>(s), DType::kF32, Shape{1});
}

// Quantizes and dequantizes data [rows, cols] in place.
void fake_quantize(float* data, std::int64_t rows, std::int64_t cols, const QuantConfig& act,
                   const TensorView& static_scale) {
  if (rows == 0) return;
  const TensorView x(data, DType::kF32, Shape{rows, cols});
  const QuantizedTensor q = quantize(x, act, static_scale);
  dequantize(q.view(), x);
}

}  // namespace

std::string_view numerics_name(MoeNumerics n) {
  return n == MoeNumerics::kWeightOnly ? "w4a16" : "emulate";
}

MoeNumerics parse_numerics(std::string_view name) {
  if (name == "w4a16") return MoeNumerics::kWeightOnly;
  if (name == "emulate") return MoeNumerics::kEmulateActivationQuant;
  throw_arg_error("parse_numerics", "mode", "one of w4a16|emulate", std::string(name));
}

QuantConfig default_activation_quant(QuantScheme weight_scheme) {
  QuantConfig c;
  switch (weight_scheme) {
    case QuantScheme::kNVFP4:
    case QuantScheme::kNVFP4PerToken:
      c.scheme = QuantScheme::kNVFP4;
      break;
    case QuantScheme::kMXFP4:
      c.scheme = QuantScheme::kMXFP8;
      break;
    case QuantScheme::kFP8Block128x128:
    case QuantScheme::kFP8Block1x128:
      c.scheme = QuantScheme::kFP8Block1x128;
      break;
    case QuantScheme::kFP8PerTensor:
      c.scheme = QuantScheme::kFP8PerTensor;
      break;
    case QuantScheme::kFP8PerToken:
      c.scheme = QuantScheme::kFP8PerToken;
      break;
    case QuantScheme::kMXFP8:
      c.scheme = QuantScheme::kMXFP8;
      break;
    case QuantScheme::kBF16:
      c.scheme = QuantScheme::kBF16;
      break;
  }
  return c;
}

QuantConfig emulated_activation_quant(const MoeReferenceOptions& options,
                                      QuantScheme weight_scheme) {
  return options.activation_quant.value_or(default_activation_quant(weight_scheme));
}

double emulation_error_bound(QuantScheme activation_scheme, std::int64_t requantized_elements) {
  MOEKIT_CHECK_ARG(requantized_elements >= 0, "requantized_elements", ">= 0", requantized_elements);
  // The fp32 intermediate (GEMM1 + activation) and the float64 one differ by ~1e-6 relative, so an
  // element sitting on a rounding boundary may take the neighbouring code in one of them. Such a
  // flip moves that element by one ulp, at most 2^-m |x| (m: mantissa bits of the activation
  // elements, 3 e4m3, 1 e2m1, 7 bf16), and the output by a relative L2 of about
  // (|x| / rms) 2^-m / sqrt(N), N = the re-quantized elements (tokens x top-k x I, each feeding H
  // outputs through independent random weights). The bound admits the root-sum-square of a few
  // flips at elements up to 8x the rms: 8 2^-m / sqrt(N). On large problems the many small flips
  // stay below the 2e-3 floor. Seed sweeps (2026-12-02): tiny preset, 13 tokens, I 128, fp8_block,
  // 300 seeds: one at 4.0e-3 (one flip), the rest <= 7.7e-4; 64 tokens, I 512: max 4.5e-4;
  // MoeReferenceEmulate (37 tokens, I 64), 300 seeds: fp8_tensor 3.5e-3, nvfp4 2.7e-3.
  const int mantissa_bits = is_fp4(activation_scheme) ? 1 : is_fp8(activation_scheme) ? 3 : 7;
  const double few_flips =
      requantized_elements > 0
          ? 8.0 * std::ldexp(1.0, -mantissa_bits) / std::sqrt(double(requantized_elements))
          : 0.0;
  return std::max(2e-3, few_flips);
}

void check_layer_matches_weights(const MoeLayerConfig& config, const MoeWeights& weights) {
  MOEKIT_CHECK_ARG(weights.num_experts == config.num_experts, "weights.num_experts",
                   config.num_experts, weights.num_experts);
  MOEKIT_CHECK_ARG(weights.hidden_size == config.hidden_size, "weights.hidden_size",
                   config.hidden_size, weights.hidden_size);
  MOEKIT_CHECK_ARG(weights.intermediate_size == config.intermediate_size,
                   "weights.intermediate_size", config.intermediate_size,
                   weights.intermediate_size);
  const bool gated = is_gated(config.activation.kind);
  MOEKIT_CHECK_ARG(weights.gated == gated, "weights.gated",
                   std::string(gated ? "true" : "false") + " for activation " +
                       std::string(activation_name(config.activation.kind)),
                   weights.gated ? "true" : "false");
  if (config.has_bias) {
    MOEKIT_CHECK_ARG(weights.w13_bias.defined() && weights.w2_bias.defined(),
                     "weights.w13_bias/w2_bias", "present (config.has_bias)", "absent");
  }
}

Tensor router_logits_reference(const TensorView& hidden_states, const RouterWeights& router) {
  detail::check_host_matrix_f32_or_bf16(hidden_states, "router_logits_reference", "hidden_states");
  MOEKIT_CHECK_ARG(router.weight.defined() && router.weight.shape().rank() == 2, "router.weight",
                   "an [E, H] tensor", router.weight.view().str());
  const std::int64_t m = hidden_states.size(0), h = hidden_states.size(1);
  const std::int64_t e = router.weight.shape()[0];
  detail::check_host_matrix_f32_or_bf16(router.weight, "router_logits_reference", "router.weight");
  MOEKIT_CHECK_ARG(router.weight.shape()[1] == h, "router.weight.shape[1]", h,
                   router.weight.shape()[1]);
  if (router.bias.defined())
    check_host_2d(router.bias.view(), "router.bias", DType::kF32, Shape{e});
  Tensor logits(DType::kF32, Shape{m, e});
  std::vector<float> w(static_cast<std::size_t>(e * h));
  detail::load_f32(router.weight, 0, e * h, w.data());
  parallel_for(m, 16, [&](std::int64_t b, std::int64_t end) {
    std::vector<float> x(static_cast<std::size_t>((end - b) * h));
    detail::load_f32(hidden_states, b * h, (end - b) * h, x.data());
    std::vector<const float*> rows;
    for (std::int64_t r = 0; r < end - b; ++r) rows.push_back(x.data() + r * h);
    float* c = logits.ptr<float>() + b * e;
    cpu::gemm_rows_nt(rows.data(), end - b, w.data(), e, h, c, e);
    if (router.bias.defined()) {
      const float* bias = router.bias.ptr<const float>();
      for (std::int64_t r = 0; r < end - b; ++r)
        for (std::int64_t j = 0; j < e; ++j) c[r * e + j] += bias[j];
    }
  });
  return logits;
}

void moe_reference(const TensorView& hidden_states, const TensorView& router_logits,
                   const TensorView& correction_bias, const MoeLayerConfig& config,
                   const MoeWeights& weights, const TensorView& out,
                   const MoeReferenceOptions& options) {
  config.validate();
  detail::check_host_matrix_f32_or_bf16(hidden_states, "moe_reference", "hidden_states");
  detail::check_host_matrix_f32_or_bf16(router_logits, "moe_reference", "router_logits");
  MOEKIT_CHECK_ARG(router_logits.size(0) == hidden_states.size(0), "router_logits.shape[0]",
                   hidden_states.size(0), router_logits.size(0));
  MOEKIT_CHECK_ARG(router_logits.size(1) == config.num_experts, "router_logits.shape[1]",
                   config.num_experts, router_logits.size(1));
  const RoutingResult r = route_reference(router_logits, correction_bias, config.routing);
  moe_reference_routed(hidden_states, r.topk_ids, r.topk_weights, config, weights, out, options);
}

void moe_reference_routed(const TensorView& hidden_states, const TensorView& topk_ids,
                          const TensorView& topk_weights, const MoeLayerConfig& config,
                          const MoeWeights& weights, const TensorView& out,
                          const MoeReferenceOptions& options) {
  config.validate();
  weights.validate();
  check_layer_matches_weights(config, weights);
  MOEKIT_CHECK_ARG(weights.device().is_host(), "weights device", "host", weights.device().str());
  detail::check_host_matrix_f32_or_bf16(hidden_states, "moe_reference_routed", "hidden_states");
  const std::int64_t m = hidden_states.size(0), h = config.hidden_size;
  const std::int64_t inter = config.intermediate_size;
  const int k = config.top_k(), num_experts = config.num_experts;
  MOEKIT_CHECK_ARG(hidden_states.size(1) == h, "hidden_states.shape[1]", h, hidden_states.size(1));
  check_host_2d(topk_ids, "topk_ids", DType::kI32, Shape{m, k});
  check_host_2d(topk_weights, "topk_weights", DType::kF32, Shape{m, k});
  check_host_2d(out, "out", DType::kF32, Shape{m, h});
  const std::int32_t* ids = topk_ids.ptr<const std::int32_t>();
  const std::int64_t slots = m * k;
  for (std::int64_t s = 0; s < slots; ++s) {
    MOEKIT_CHECK_ARG(ids[s] >= 0 && ids[s] < num_experts,
                     "topk_ids[" + std::to_string(s / k) + ", " + std::to_string(s % k) + "]",
                     "in [0, " + std::to_string(num_experts) + ")", ids[s]);
  }
  const bool emulate = options.numerics == MoeNumerics::kEmulateActivationQuant;
  const QuantConfig act = emulated_activation_quant(options, weights.quant.scheme);
  const TensorView a13 =
      emulate ? static_activation_scale(weights.a13_scale, act, "a13_scale") : TensorView{};
  const TensorView a2 =
      emulate ? static_activation_scale(weights.a2_scale, act, "a2_scale") : TensorView{};
  if (m == 0) return;

  const float* slot_weight = topk_weights.ptr<const float>();
  const bool weight_on_input = routing_weight_on_input(config.routing.method);

  // GEMM1 input: x [M, H], or for weight-on-input routing the scaled copies [M*k, H].
  std::vector<float> a1(static_cast<std::size_t>((weight_on_input ? slots : m) * h));
  detail::load_f32(hidden_states, 0, m * h, a1.data());
  if (weight_on_input) {
    for (std::int64_t s = slots - 1; s >= 0; --s) {  // back to front: row s >= row s / k
      const float* src = a1.data() + (s / k) * h;
      float* dst = a1.data() + s * h;
      const float w = slot_weight[s];
      for (std::int64_t c = 0; c < h; ++c) dst[c] = src[c] * w;
    }
  }
  if (emulate) fake_quantize(a1.data(), weight_on_input ? slots : m, h, act, a13);
  auto a1_row = [&](std::int64_t slot) {
    return a1.data() + (weight_on_input ? slot : slot / k) * h;
  };

  // Permutation: rows grouped by expert, in (token, slot) order within an expert.
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(num_experts) + 1, 0);
  for (std::int64_t s = 0; s < slots; ++s) offsets[static_cast<std::size_t>(ids[s]) + 1]++;
  for (int e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  std::vector<std::int64_t> perm_slot(static_cast<std::size_t>(slots));
  {
    std::vector<std::int64_t> fill(offsets.begin(), offsets.end() - 1);
    for (std::int64_t s = 0; s < slots; ++s)
      perm_slot[static_cast<std::size_t>(fill[ids[s]]++)] = s;
  }

  // Experts that received tokens; each of their matrices is dequantized exactly once, in
  // batches of at most options.dequant_budget_bytes of fp32 (one expert at least), so that large
  // layers never hold every expert at once.
  const std::int64_t w13_rows = weights.w13_rows();
  std::vector<int> touched;
  for (int e = 0; e < num_experts; ++e)
    if (offsets[e + 1] > offsets[e]) touched.push_back(e);

  // Runs item_fn(item, dequantized matrix) for every token tile, expert batch by expert batch.
  auto for_each_tile = [&](const QuantizedTensor& q, std::int64_t matrix_elems,
                           const std::function<void(const WorkItem&, const float*)>& item_fn) {
    const auto per_batch = static_cast<std::size_t>(std::max<std::int64_t>(
        1, options.dequant_budget_bytes / std::max<std::int64_t>(1, matrix_elems * 4)));
    std::vector<std::vector<float>> cache;
    for (std::size_t first = 0; first < touched.size(); first += per_batch) {
      const std::size_t count = std::min(per_batch, touched.size() - first);
      cache.resize(count);
      parallel_for(static_cast<std::int64_t>(count), 1, [&](std::int64_t b, std::int64_t end) {
        for (std::int64_t t = b; t < end; ++t) {
          cache[t].resize(static_cast<std::size_t>(matrix_elems));
          cpu::dequantize_expert(q, touched[first + static_cast<std::size_t>(t)], cache[t].data());
        }
      });
      std::vector<std::pair<WorkItem, const float*>> items;
      for (std::size_t t = 0; t < count; ++t) {
        const int e = touched[first + t];
        for (std::int64_t b = offsets[e]; b < offsets[e + 1]; b += kTokenTile)
          items.push_back({{e, b, std::min(offsets[e + 1], b + kTokenTile)}, cache[t].data()});
      }
      parallel_for(static_cast<std::int64_t>(items.size()), 1,
                   [&](std::int64_t b, std::int64_t end) {
                     for (std::int64_t it = b; it < end; ++it)
                       item_fn(items[static_cast<std::size_t>(it)].first,
                               items[static_cast<std::size_t>(it)].second);
                   });
    }
  };

  // Phase 1: GEMM1 (+ bias) and the activation, into the permuted intermediate [M*k, I].
  std::vector<float> intermediate(static_cast<std::size_t>(slots * inter));
  for_each_tile(weights.w13, w13_rows * h, [&](const WorkItem& w, const float* w13) {
    thread_local std::vector<float> c1;
    c1.resize(static_cast<std::size_t>(kTokenTile * w13_rows));
    const float* rows[kTokenTile];
    const std::int64_t n = w.end - w.begin;
    for (std::int64_t r = 0; r < n; ++r) rows[r] = a1_row(perm_slot[w.begin + r]);
    cpu::gemm_rows_nt(rows, n, w13, w13_rows, h, c1.data(), w13_rows);
    if (weights.w13_bias.defined()) {
      const float* bias = weights.w13_bias.ptr<const float>() + w.expert * w13_rows;
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < w13_rows; ++c) c1[r * w13_rows + c] += bias[c];
    }
    activation_reference_rows(c1.data(), n, inter, config.activation,
                              intermediate.data() + w.begin * inter);
  });
  if (emulate) fake_quantize(intermediate.data(), slots, inter, act, a2);

  // Phase 2: GEMM2 (+ bias) into per-slot expert outputs [M*k, H].
  std::vector<float> expert_out(static_cast<std::size_t>(slots * h));
  for_each_tile(weights.w2, h * inter, [&](const WorkItem& w, const float* w2) {
    thread_local std::vector<float> c2;
    c2.resize(static_cast<std::size_t>(kTokenTile * h));
    const float* rows[kTokenTile];
    const std::int64_t n = w.end - w.begin;
    for (std::int64_t r = 0; r < n; ++r) rows[r] = intermediate.data() + (w.begin + r) * inter;
    cpu::gemm_rows_nt(rows, n, w2, h, inter, c2.data(), h);
    const float* bias =
        weights.w2_bias.defined() ? weights.w2_bias.ptr<const float>() + w.expert * h : nullptr;
    for (std::int64_t r = 0; r < n; ++r) {
      float* dst = expert_out.data() + perm_slot[w.begin + r] * h;
      const float* src = c2.data() + r * h;
      if (bias) {
        for (std::int64_t c = 0; c < h; ++c) dst[c] = src[c] + bias[c];
      } else {
        std::memcpy(dst, src, static_cast<std::size_t>(h) * sizeof(float));
      }
    }
  });

  // Phase 3: weight and sum over the k slots, in slot order.
  float* y = out.ptr<float>();
  parallel_for(m, 16, [&](std::int64_t b, std::int64_t end) {
    for (std::int64_t t = b; t < end; ++t) {
      float* dst = y + t * h;
      std::fill(dst, dst + h, 0.0f);
      for (int j = 0; j < k; ++j) {
        const float w = weight_on_input ? 1.0f : slot_weight[t * k + j];
        const float* src = expert_out.data() + (t * k + j) * h;
        for (std::int64_t c = 0; c < h; ++c) dst[c] += w * src[c];
      }
    }
  });
}

}  // namespace moekit
