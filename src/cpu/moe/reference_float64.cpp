// moe_reference_float64 (moekit/moe/reference.hpp): the layer in float64, written for
// obviousness, not speed: one token and slot at a time, plain triple loops.

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>

#include "cpu/moe/expert_slice.hpp"
#include "moekit/core/error.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {

using cpu::dequantize_expert;

namespace {

double naive_activation(const ActivationConfig& a, double g, double u) {
  switch (a.kind) {
    case Activation::kSiluAndMul:
      return g * u / (1.0 + std::exp(-g));
    case Activation::kGeluErfAndMul:
      return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0))) * u;
    case Activation::kGeluTanhAndMul:
      return 0.5 * g *
             (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g + 0.044715 * g * g * g))) * u;
    case Activation::kSwigluOai: {
      const double glu = std::min<double>(g, a.swiglu_limit);
      const double lin = std::clamp<double>(u, -a.swiglu_limit, a.swiglu_limit);
      return glu * (1.0 / (1.0 + std::exp(-static_cast<double>(a.swiglu_alpha) * glu))) *
             (lin + 1.0);
    }
    case Activation::kRelu2:
      return g > 0 ? g * g : 0.0;
  }
  return 0.0;
}

float to_f32(const TensorView& t, std::int64_t i) {
  if (t.dtype == DType::kF32) return t.ptr<const float>()[i];
  const std::uint32_t u = static_cast<std::uint32_t>(t.ptr<const std::uint16_t>()[i]) << 16;
  return std::bit_cast<float>(u);
}

// Quantize + dequantize rows of fp32 data with the activation scheme (and its static scale).
std::vector<float> fake_quant(std::vector<float> x, std::int64_t rows, std::int64_t cols,
                              const QuantConfig& act, const Tensor& static_scales) {
  if (rows == 0) return x;
  TensorView s;
  if (static_scales.defined() &&
      (act.scheme == QuantScheme::kNVFP4 || act.scheme == QuantScheme::kFP8PerTensor))
    s = TensorView(static_scales.data(), DType::kF32, Shape{1});
  const QuantizedTensor q = quantize(TensorView(x.data(), DType::kF32, Shape{rows, cols}), act, s);
  const Tensor d = dequantize(q.view());
  return std::vector<float>(d.ptr<const float>(), d.ptr<const float>() + rows * cols);
}

}  // namespace

std::vector<double> moe_reference_float64(const TensorView& hidden_states, const TensorView& topk_ids,
                                        const TensorView& topk_weights,
                                        const MoeLayerConfig& config, const MoeWeights& weights,
                                        const MoeReferenceOptions& options) {
  config.validate();
  weights.validate();
  check_layer_matches_weights(config, weights);
  const std::int64_t m = hidden_states.size(0), h = config.hidden_size,
                     n = config.intermediate_size;
  const int k = config.top_k(), num_experts = config.num_experts;
  MOEKIT_CHECK_ARG(topk_ids.shape == Shape({m, k}), "topk_ids shape", Shape({m, k}).str(),
                   topk_ids.shape.str());
  const auto* ids = topk_ids.ptr<const std::int32_t>();
  const auto* tw = topk_weights.ptr<const float>();
  const bool gated = is_gated(config.activation.kind);
  const bool on_input = config.routing.method == RoutingMethod::kLlama4;
  const bool emulate = options.numerics == MoeNumerics::kEmulateActivationQuant;
  const QuantConfig act = emulated_activation_quant(options, weights.quant.scheme);
  const std::int64_t rows13 = gated ? 2 * n : n;

  // Dequantized weights of every expert used, widened to float64.
  std::vector<std::vector<double>> w13(static_cast<std::size_t>(num_experts)), w2(w13.size());
  std::vector<char> used(static_cast<std::size_t>(num_experts), 0);
  for (std::int64_t s = 0; s < m * k; ++s) {
    MOEKIT_CHECK_ARG(ids[s] >= 0 && ids[s] < num_experts, "topk_ids", "in [0, E)", ids[s]);
    used[static_cast<std::size_t>(ids[s])] = 1;
  }
  parallel_for(num_experts, 1, [&](std::int64_t b, std::int64_t end) {
    for (std::int64_t e = b; e < end; ++e) {
      if (!used[static_cast<std::size_t>(e)]) continue;
      std::vector<float> f(static_cast<std::size_t>(rows13 * h));
      dequantize_expert(weights.w13, static_cast<int>(e), f.data());
      w13[e].assign(f.begin(), f.end());
      f.resize(static_cast<std::size_t>(h * n));
      dequantize_expert(weights.w2, static_cast<int>(e), f.data());
      w2[e].assign(f.begin(), f.end());
    }
  });

  // GEMM1 inputs, one row per (token, slot), as fp32 (that is what a kernel is handed).
  std::vector<float> a1(static_cast<std::size_t>(m * k * h));
  for (std::int64_t t = 0; t < m; ++t)
    for (int j = 0; j < k; ++j)
      for (std::int64_t c = 0; c < h; ++c) {
        const float x = to_f32(hidden_states, t * h + c);
        a1[(t * k + j) * h + c] = on_input ? static_cast<float>(double(x) * tw[t * k + j]) : x;
      }
  if (emulate) {
    if (on_input) {
      a1 = fake_quant(std::move(a1), m * k, h, act, weights.a13_scale);
    } else {
      // Quantize each token once ([M, H], per-tensor statistics over the tokens), then expand.
      std::vector<float> x(static_cast<std::size_t>(m * h));
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t c = 0; c < h; ++c) x[t * h + c] = a1[(t * k) * h + c];
      x = fake_quant(std::move(x), m, h, act, weights.a13_scale);
      for (std::int64_t t = 0; t < m; ++t)
        for (int j = 0; j < k; ++j)
          for (std::int64_t c = 0; c < h; ++c) a1[(t * k + j) * h + c] = x[t * h + c];
    }
  }

  // GEMM1 + bias + activation, per (token, slot), in float64.
  std::vector<double> inter(static_cast<std::size_t>(m * k * n));
  parallel_for(m * k, 1, [&](std::int64_t b, std::int64_t end) {
    std::vector<double> g(static_cast<std::size_t>(rows13));
    for (std::int64_t s = b; s < end; ++s) {
      const int e = ids[s];
      for (std::int64_t r = 0; r < rows13; ++r) {
        double acc = 0.0;
        for (std::int64_t c = 0; c < h; ++c) acc += double(a1[s * h + c]) * w13[e][r * h + c];
        if (weights.w13_bias.defined()) acc += weights.w13_bias.ptr<const float>()[e * rows13 + r];
        g[r] = acc;
      }
      for (std::int64_t i = 0; i < n; ++i) {
        double gate = g[i], up = 0.0;
        if (gated && config.activation.layout == GateUpLayout::kInterleaved) {
          gate = g[2 * i];
          up = g[2 * i + 1];
        } else if (gated) {
          up = g[n + i];
        }
        inter[s * n + i] = naive_activation(config.activation, gate, up);
      }
    }
  });
  if (emulate) {
    std::vector<float> f(inter.begin(), inter.end());
    f = fake_quant(std::move(f), m * k, n, act, weights.a2_scale);
    inter.assign(f.begin(), f.end());
  }

  // GEMM2 + bias, weighted sum over the slots.
  std::vector<double> out(static_cast<std::size_t>(m * h), 0.0);
  parallel_for(m, 1, [&](std::int64_t b, std::int64_t end) {
    for (std::int64_t t = b; t < end; ++t) {
      for (int j = 0; j < k; ++j) {
        const std::int64_t s = t * k + j;
        const int e = ids[s];
        const double w = on_input ? 1.0 : double(tw[s]);
        for (std::int64_t c = 0; c < h; ++c) {
          double acc = 0.0;
          for (std::int64_t i = 0; i < n; ++i) acc += inter[s * n + i] * w2[e][c * n + i];
          if (weights.w2_bias.defined()) acc += weights.w2_bias.ptr<const float>()[e * h + c];
          out[t * h + c] += w * acc;
        }
      }
    }
  });
  return out;
}

ErrorStats compare_to_reference(const float* out, const double* ref, std::int64_t n) {
  double num = 0.0, den = 0.0, mx = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = double(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
    mx = std::max(mx, std::fabs(d));
  }
  ErrorStats s;
  s.max_abs = mx;
  s.relative_l2 =
      den > 0 ? std::sqrt(num / den) : (num > 0 ? std::numeric_limits<double>::infinity() : 0.0);
  if (std::isnan(num)) s.relative_l2 = std::numeric_limits<double>::quiet_NaN();
  return s;
}

}  // namespace moekit
