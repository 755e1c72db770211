// W4A8Experts: supports / workspace_shapes / prepare_weights / apply (see w4a8_experts.hpp).
#include "cuda/experts/w4a8_experts.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/experts/bf16_experts.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/gemm/w4a8.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::cuda {
namespace {

using detail::ws_at;
using detail::ws_up;

// Byte offsets of the pieces of workspace13 for R = M*k rows (workspace2 holds GEMM1's bf16
// output). a2 / a2_scale: GEMM2's e4m3 input and its per-row scales. a1 / a1_scale: GEMM1's
// input, the routed e4m3 rows in expert order and their scales (the kernel reads its rows in
// order); they share out2's bytes (out2 is sized for both): GEMM1 has read them before GEMM2
// writes out2 (plain launches).
struct Layout13 {
  std::size_t offsets, sorted_ids, permuted_row, permute_scratch, a2, a2_scale, out2, a1, a1_scale,
      total;
};
Layout13 layout13(const MoeProblem& problem) {
  const int e = problem.layer.num_experts;
  const std::size_t r = static_cast<std::size_t>(problem.num_tokens * problem.layer.routing.top_k);
  const std::size_t hh = static_cast<std::size_t>(problem.layer.hidden_size);
  const std::size_t ii = static_cast<std::size_t>(problem.layer.intermediate_size);
  Layout13 l{};
  std::size_t p = 0;
  l.offsets = p, p += ws_up((static_cast<std::size_t>(e) + 1) * 4);
  l.sorted_ids = p, p += ws_up(r * 4);
  l.permuted_row = p, p += ws_up(r * 4);
  l.permute_scratch = p, p += ws_up(detail::permute_scratch_bytes(static_cast<std::int64_t>(r), e));
  l.a2 = p, p += ws_up(r * ii);
  l.a2_scale = p, p += ws_up(r * 4);
  l.out2 = p, p += std::max(ws_up(r * hh * 2), ws_up(r * hh) + ws_up(r * 4));
  l.a1 = l.out2;
  l.a1_scale = l.out2 + ws_up(r * hh);
  l.total = p;
  return l;
}


class W4A8Experts : public ModularExperts {
 public:
  explicit W4A8Experts(const MoeProblem& problem) : problem_(problem) {}
  std::string name() const override { return "cuda_w4a8_grouped"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(0); }
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }

  Support supports(const MoeProblem& p) const override {
    if (!gemm::w4a8_available()) return Support::no("built without CUDA");
    if (Support s = detail::sm90_device_support(); !s) return s;
    const QuantScheme w = p.weight_quant.scheme;
    if (w == QuantScheme::kNVFP4)
      return Support::no(
          "nvfp4 weights: e2m1 x e4m3 block-scale products are not exact in e4m3 (use "
          "cuda_w4a16_grouped with bf16 activations)");
    if (w != QuantScheme::kMXFP4)
      return Support::no("weight quant must be mxfp4, got " + std::string(scheme_name(w)));
    if (p.weight_quant.layout != ScaleLayout::kLinear)
      return Support::no("weight block scales must be linear, got " +
                         std::string(layout_name(p.weight_quant.layout)));
    if (p.activation_quant.scheme != QuantScheme::kFP8PerToken)
      return Support::no("activation quant must be fp8_token (e4m3, one scale per row), got " +
                         std::string(scheme_name(p.activation_quant.scheme)));
    return detail::grouped_experts_layer_support(p, 64);
  }

  WorkspaceShapes workspace_shapes(const MoeProblem& p) const override {
    return detail::grouped_workspace_shapes(p, layout13(p).total, p.layer.intermediate_size);
  }

  void prepare_weights(const MoeProblem& p, const MoeWeights& w, StreamHandle) override {
    problem_ = p;
    const std::int64_t e = p.layer.num_experts, h = p.layer.hidden_size,
                       i = p.layer.intermediate_size;
    MOEKIT_CHECK_ARG(w.quant.scheme == QuantScheme::kMXFP4, "weights.quant", "mxfp4",
                     scheme_name(w.quant.scheme));
    MOEKIT_CHECK_ARG(w.quant.layout == ScaleLayout::kLinear, "weights.quant.layout", "linear",
                     layout_name(w.quant.layout));
    auto prepare = [&](const QuantizedTensor& q, std::int64_t n, std::int64_t k, bool gated,
                       const char* what, Matrix& out) {
      const detail::Fp4HostWeights hw =
          detail::fp4_host_weights(q, e, n, k, 32, DType::kE8M0, what);
      const std::uint8_t *codes = hw.codes, *scales = hw.scales;
      Tensor pc(DType::kU8, Shape{e * n * k / 2}), ps(DType::kU8, Shape{e * n * k / 32});
      Tensor rs(DType::kF32, Shape{e * n});
      // One expert per task (the layout is expert-major); the first failing expert's reason.
      std::vector<std::string> why(static_cast<std::size_t>(e));
      const std::int64_t cb = n * k / 2, sb = n * k / 32;
      parallel_for(e, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t x = begin; x < end; ++x)
          why[static_cast<std::size_t>(x)] = gemm::w4a8_prepare_weights(
              1, n, k, gated, codes + x * cb, scales + x * sb, pc.ptr<std::uint8_t>() + x * cb,
              ps.ptr<std::uint8_t>() + x * sb, rs.ptr<float>() + x * n, x);
      });
      for (const std::string& r : why) {
        MOEKIT_CHECK(r.empty(), name(), ": weights.", what,
                     " are not exactly representable as e4m3 (", r,
                     "); run them with bf16 activations (cuda_w4a16_grouped)");
      }
      out.codes = detail::to_device(pc);
      out.scales = detail::to_device(ps);
      out.row_scale = detail::to_device(rs);
    };
    prepare(w.w13, 2 * i, h, true, "w13", w13_);
    prepare(w.w2, h, i, false, "w2", w2_);
    w13_bias_ = detail::expert_bias_to_device(p, w.w13_bias, 2 * i, "weights.w13_bias");
    w2_bias_ = detail::expert_bias_to_device(p, w.w2_bias, h, "weights.w2_bias");
    prepared_ = true;
  }

  void apply(const DispatchedActivations& in, const TensorView& output,
             const TensorView& workspace13, const TensorView& workspace2,
             StreamHandle stream) override {
    MOEKIT_CHECK(prepared_, name(), ": apply() before prepare_weights()");
    const MoeProblem& p = problem_;
    const int e = p.layer.num_experts, k = p.layer.routing.top_k;
    const std::int64_t h = p.layer.hidden_size, i = p.layer.intermediate_size;
    const std::int64_t m = in.num_tokens, rows = m * k;
    const Layout13 l = layout13(p);
    detail::check_grouped_apply(p, in, output, workspace13, l.total, workspace2, i, "[M*k, I]");
    MOEKIT_CHECK_ARG(in.a1q.config.scheme == QuantScheme::kFP8PerToken, "in.a1q.config.scheme",
                     "fp8_token", scheme_name(in.a1q.config.scheme));
    MOEKIT_CHECK_ARG(in.a1q.values.dtype == DType::kE4M3 && in.a1q.values.numel() >= m * h,
                     "in.a1q.values", "e4m3 [M, H]", in.a1q.values.str());
    MOEKIT_CHECK_ARG(in.a1q.scales.dtype == DType::kF32 && in.a1q.scales.numel() >= m,
                     "in.a1q.scales", "f32 [M] (fp8_token)", in.a1q.scales.str());
    if (m == 0) return;

    auto* offsets = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.offsets));
    auto* sorted = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.sorted_ids));
    auto* prow = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.permuted_row));
    detail::permute_by_expert(in.topk_ids.ptr<const std::int32_t>(), rows, e, offsets, sorted, prow,
                              stream, k, nullptr, ws_at(workspace13, l.permute_scratch));
    // The routed rows (the first offsets[E] of them) and their scales in expert order.
    void* a1 = ws_at(workspace13, l.a1);
    auto* a1_scale = reinterpret_cast<float*>(ws_at(workspace13, l.a1_scale));
    detail::gather_rows(in.a1q.values.data, h, sorted, k, rows, offsets + e, a1, stream);
    detail::gather_rows(in.a1q.scales.data, 4, sorted, k, rows, offsets + e, a1_scale, stream);

    gemm::W4A8GemmArgs g1;
    g1.epilogue = p.layer.activation.kind == Activation::kSwigluOai
                      ? gemm::W4Epilogue::kSwigluOai
                      : gemm::W4Epilogue::kSiluAndMul;
    g1.swiglu_alpha = p.layer.activation.swiglu_alpha;
    g1.swiglu_limit = p.layer.activation.swiglu_limit;
    g1.num_experts = e;
    g1.m = rows;
    g1.n = 2 * i;
    g1.k = h;
    g1.expert_offsets = offsets;
    g1.a = a1;
    g1.lda = h;
    g1.a_scale = a1_scale;
    g1.w = w13_.codes.ptr<std::uint8_t>();
    g1.w_scales = w13_.scales.ptr<std::uint8_t>();
    g1.w_row_scale = w13_.row_scale.ptr<float>();
    g1.bias = w13_bias_.defined() ? w13_bias_.ptr<float>() : nullptr;
    g1.out = workspace2.data;
    g1.stream = stream;
    gemm::w4a8_grouped_gemm(g1);

    // GEMM2's input: the bf16 activation rows, quantized per row (formats.md, FP8 per-token).
    QuantConfig qc;
    qc.scheme = QuantScheme::kFP8PerToken;
    QuantizedView a2;
    a2.config = qc;
    a2.values = TensorView(ws_at(workspace13, l.a2), DType::kE4M3, Shape{rows, i}, Device::cuda(0));
    a2.scales =
        TensorView(ws_at(workspace13, l.a2_scale), DType::kF32, Shape{rows}, Device::cuda(0));
    quantize(TensorView(workspace2.data, DType::kBF16, Shape{rows, i}, Device::cuda(0)), qc, a2,
             QuantBackend::kCuda, {}, stream);

    gemm::W4A8GemmArgs g2 = g1;
    g2.epilogue = gemm::W4Epilogue::kNone;
    g2.n = h;
    g2.k = i;
    g2.a = a2.values.data;
    g2.lda = 0;
    g2.a_scale = a2.scales.ptr<const float>();
    g2.row_index = nullptr;
    g2.w = w2_.codes.ptr<std::uint8_t>();
    g2.w_scales = w2_.scales.ptr<std::uint8_t>();
    g2.w_row_scale = w2_.row_scale.ptr<float>();
    g2.bias = w2_bias_.defined() ? w2_bias_.ptr<float>() : nullptr;
    g2.out = ws_at(workspace13, l.out2);
    gemm::w4a8_grouped_gemm(g2);

    // Llama4 applies the router weight on the input: the prepare already folded it in.
    const bool weights_on_input = p.apply_router_weight_on_input();
    detail::weighted_reduce_bf16(ws_at(workspace13, l.out2), prow,
                                 weights_on_input ? nullptr : in.topk_weights.ptr<const float>(),
                                 m, k, h, output.data, stream);
  }

 private:
  struct Matrix {
    Tensor codes, scales, row_scale;  // device: prepared codes, table offsets, f32 [E*N]
  };
  MoeProblem problem_;
  Matrix w13_, w2_;
  Tensor w13_bias_, w2_bias_;
  bool prepared_ = false;
};

}  // namespace

std::unique_ptr<ModularExperts> make_w4a8_grouped_experts(const MoeProblem& problem) {
  return std::make_unique<W4A8Experts>(problem);
}

}  // namespace moekit::cuda
