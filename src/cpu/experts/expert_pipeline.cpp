#include "cpu/experts/expert_pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/moe/expert_slice.hpp"
#include "cpu/moe/gemm_f32.hpp"
#include "moekit/activation/activation.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::cpu {
namespace {

constexpr std::int64_t kColumnBlock = 64;      // output columns per parallel task
constexpr std::int64_t kSerialWork = 1 << 18;  // multiply-adds below which a GEMM runs serially

std::int64_t w13_rows(const MoeProblem& p) {
  return activation_input_width(p.layer.activation.kind, p.intermediate_size());
}

// c[r, :] = a_rows[r] @ w^T for n_rows rows, parallel over output-column blocks.
void gemm_parallel(const float* const* a_rows, std::int64_t n_rows, const float* w, std::int64_t n,
                   std::int64_t k, float* c, std::int64_t ldc) {
  if (n_rows == 0) return;
  if (n_rows * n * k < kSerialWork) {  // small: thread hand-off costs more than the work
    gemm_rows_nt(a_rows, n_rows, w, n, k, c, ldc);
    return;
  }
  parallel_for((n + kColumnBlock - 1) / kColumnBlock, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t blk = b; blk < e; ++blk) {
      const std::int64_t j0 = blk * kColumnBlock, nj = std::min(kColumnBlock, n - j0);
      gemm_rows_nt(a_rows, n_rows, w + j0 * k, nj, k, c + j0, ldc);
    }
  });
}

}  // namespace

PipelineScratch take_pipeline_scratch(detail::ByteCarver& ws13, std::int64_t rows,
                                      const MoeProblem& problem) {
  PipelineScratch s;
  // GEMM1 output [rows, N1], later reused for GEMM2's [rows, H].
  const std::int64_t width = std::max(w13_rows(problem), problem.hidden_size());
  s.g1 = ws13.take(DType::kF32, Shape{rows, width}).ptr<float>();
  s.intermediate = ws13.take(DType::kF32, Shape{rows, problem.intermediate_size()}).ptr<float>();
  return s;
}

TensorSpec pipeline_weight_scratch(const MoeProblem& problem) {
  const std::int64_t h = problem.hidden_size();
  return {DType::kF32, Shape{std::max(w13_rows(problem) * h, h * problem.intermediate_size())}};
}

void run_expert_pipeline(const MoeProblem& problem, const MoeWeights& weights,
                         const PipelineRows& rows, const PipelineScratch& s) {
  const std::int64_t h = problem.hidden_size(), inter = problem.intermediate_size();
  const std::int64_t n1 = w13_rows(problem);
  const int e_local = problem.num_local_experts();
  std::fill(s.intermediate, s.intermediate + rows.rows * inter, 0.0f);
  // Phase 1: GEMM1 (+ bias) and the activation.
  for (int e = 0; e < e_local; ++e) {
    const std::int64_t begin = rows.expert_begin[e], n = rows.expert_count[e];
    if (n == 0) continue;
    dequantize_expert(weights.w13, e, s.weights);
    float* g1 = s.g1 + begin * n1;
    gemm_parallel(rows.a_rows + begin, n, s.weights, n1, h, g1, n1);
    parallel_for(n, 64, [&](std::int64_t b, std::int64_t end) {
      if (weights.w13_bias.defined()) {
        const float* bias = weights.w13_bias.ptr<const float>() + e * n1;
        for (std::int64_t r = b; r < end; ++r)
          for (std::int64_t c = 0; c < n1; ++c) g1[r * n1 + c] += bias[c];
      }
      activation_reference_rows(g1 + b * n1, end - b, inter, problem.layer.activation,
                                s.intermediate + (begin + b) * inter);
    });
  }
  // GEMM2 input: quantized as one tensor (per-tensor scales cover every row, as in the reference).
  const QuantConfig& act = problem.activation_quant;
  if (act.scheme != QuantScheme::kBF16 && rows.rows > 0) {
    QuantConfig lin = act;
    lin.layout = ScaleLayout::kLinear;
    const TensorView x(s.intermediate, DType::kF32, Shape{rows.rows, inter});
    const QuantizedTensor q = quantize(x, lin, static_scale_for(weights.a2_scale, act.scheme));
    dequantize(q.view(), x);
  }
  // Phase 2: GEMM2 (+ bias) into the output rows.
  for (int e = 0; e < e_local; ++e) {
    const std::int64_t begin = rows.expert_begin[e], n = rows.expert_count[e];
    if (n == 0) continue;
    dequantize_expert(weights.w2, e, s.weights);
    std::vector<const float*> a(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < n; ++r)
      a[static_cast<std::size_t>(r)] = s.intermediate + (begin + r) * inter;
    // g1 scratch is free now: GEMM2 results go there, then to the (scattered) output rows.
    float* c2 = s.g1;
    gemm_parallel(a.data(), n, s.weights, h, inter, c2, h);
    const float* bias =
        weights.w2_bias.defined() ? weights.w2_bias.ptr<const float>() + e * h : nullptr;
    parallel_for(n, 64, [&](std::int64_t b, std::int64_t end) {
      for (std::int64_t r = b; r < end; ++r) {
        float* dst = rows.out_rows[begin + r];
        const float* src = c2 + r * h;
        if (bias) {
          for (std::int64_t c = 0; c < h; ++c) dst[c] = src[c] + bias[c];
        } else {
          std::memcpy(dst, src, static_cast<std::size_t>(h) * sizeof(float));
        }
      }
    });
  }
}

void dequantize_activations(const QuantizedView& a, float* out) {
  const std::int64_t n = a.values.numel();
  if (a.config.scheme == QuantScheme::kBF16) {
    if (a.values.dtype == DType::kF32) {
      if (n) std::memcpy(out, a.values.data, static_cast<std::size_t>(n) * 4);
    } else {
      MOEKIT_CHECK_ARG(a.values.dtype == DType::kBF16, "activations dtype", "bf16 or f32",
                       dtype_name(a.values.dtype));
      const auto* v = a.values.ptr<const std::uint16_t>();
      for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(v[i]);
    }
    return;
  }
  if (n == 0) return;
  Shape s = a.values.shape;
  if (a.values.dtype == DType::kE2M1x2) s[s.rank() - 1] *= 2;
  dequantize(a, TensorView(out, DType::kF32, s));
}

TensorView static_scale_for(const Tensor& scales, QuantScheme scheme) {
  if (!scales.defined()) return {};
  if (scheme != QuantScheme::kNVFP4 && scheme != QuantScheme::kFP8PerTensor) return {};
  return TensorView(scales.data(), DType::kF32, Shape{1});
}

Support cpu_experts_supports(const MoeProblem& problem) {
  const QuantScheme a = problem.activation_quant.scheme;
  const int sfv = scale_block_size(a);
  if (has_block_scales(a) && problem.intermediate_size() % sfv != 0) {
    return Support::no("intermediate size " + std::to_string(problem.intermediate_size()) +
                       " is not a multiple of " + std::to_string(sfv) + " (" +
                       std::string(scheme_name(a)) + " blocks of the GEMM2 input)");
  }
  return Support::yes();
}

void check_cpu_weights(const MoeProblem& problem, const MoeWeights& weights) {
  weights.validate();
  MOEKIT_CHECK_ARG(weights.device().is_host(), "weights device", "host", weights.device().str());
  MOEKIT_CHECK_ARG(weights.num_experts == problem.num_local_experts(), "weights.num_experts",
                   std::to_string(problem.num_local_experts()) + " (local experts of the problem)",
                   weights.num_experts);
  MOEKIT_CHECK_ARG(weights.hidden_size == problem.hidden_size(), "weights.hidden_size",
                   problem.hidden_size(), weights.hidden_size);
  MOEKIT_CHECK_ARG(weights.intermediate_size == problem.intermediate_size(),
                   "weights.intermediate_size", problem.intermediate_size(),
                   weights.intermediate_size);
  MOEKIT_CHECK_ARG(weights.quant.scheme == problem.weight_quant.scheme, "weights.quant",
                   problem.weight_quant.str(), weights.quant.str());
  const bool gated = is_gated(problem.layer.activation.kind);
  MOEKIT_CHECK_ARG(weights.gated == gated, "weights.gated", gated ? "true" : "false",
                   weights.gated ? "true" : "false");
  if (problem.layer.has_bias) {
    MOEKIT_CHECK_ARG(weights.w13_bias.defined() && weights.w2_bias.defined(),
                     "weights.w13_bias/w2_bias", "present (layer has_bias)", "absent");
  }
}

}  // namespace moekit::cpu
