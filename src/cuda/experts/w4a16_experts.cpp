// W4A16Experts: supports / workspace_shapes / prepare_weights / apply (see w4a16_experts.hpp).
#include "cuda/experts/w4a16_experts.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "core/device_runtime.hpp"
#include "cuda/experts/bf16_experts.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::cuda {
namespace {

using detail::host_copy_if_device;
using detail::ws_at;
using detail::ws_up;

// Byte offsets of the pieces of workspace13 for R = M*k rows (workspace2 holds the activation).
// sorted_tokens: the token of each sorted row, GEMM1's row_index (it reads the unpermuted input
// rows itself: no gathered copy; the wgmma tile: the gather of the conversion below). a_rounded:
// bf16 [M, H] when the router weight is applied on the input (Llama4): the NoEP prepare then hands
// over the f32 rows x * w, rounded here (detail::round_input_rows). counters: the fused reduce's
// (decode sizes, gemm::DecodeRouting). a_wgmma: bf16 [R, H], the routed rows in expert order and
// the wgmma K order, when the problem's size runs the wgmma tile (gemm::w4a16_prefers_wgmma; GEMM1
// then writes GEMM2's input in that order too). It shares out2's bytes: GEMM1 has read it before
// GEMM2 (launched without overlap_previous then) writes out2. Rows past offsets[E] (dropped ids)
// have no valid sorted token: the conversion writes them as zeros (an index outside [0, M)), and no
// unit reads them.
struct Layout13 {
  std::size_t offsets, sorted_ids, permuted_row, sorted_tokens, permute_scratch, a_rounded, out2,
      counters, a_wgmma, total;
};
Layout13 layout13(const MoeProblem& problem) {
  const int e = problem.layer.num_experts;
  const std::size_t r = static_cast<std::size_t>(problem.num_tokens * problem.layer.routing.top_k);
  const std::size_t m = static_cast<std::size_t>(problem.num_tokens);
  const std::size_t hh = static_cast<std::size_t>(problem.layer.hidden_size);
  Layout13 l{};
  std::size_t p = 0;
  l.offsets = p, p += ws_up((static_cast<std::size_t>(e) + 1) * 4);
  l.sorted_ids = p, p += ws_up(r * 4);
  l.permuted_row = p, p += ws_up(r * 4);
  l.sorted_tokens = p, p += ws_up(r * 4);
  l.permute_scratch = p, p += ws_up(detail::permute_scratch_bytes(static_cast<std::int64_t>(r), e));
  l.a_rounded = p, p += problem.apply_router_weight_on_input() ? ws_up(m * hh * 2) : 0;
  l.out2 = p, p += ws_up(r * hh * 2);
  l.counters = p,
  p +=
      ws_up(static_cast<std::size_t>(gemm::decode_routing_counters(problem.layer.hidden_size)) * 4);
  l.a_wgmma = l.out2;
  l.total = p;
  return l;
}

gemm::W4Format format_of(QuantScheme s) {
  return s == QuantScheme::kNVFP4 ? gemm::W4Format::kNVFP4 : gemm::W4Format::kMXFP4;
}


class W4A16Experts : public ModularExperts {
 public:
  explicit W4A16Experts(const MoeProblem& problem) : problem_(problem) {}
  std::string name() const override { return "cuda_w4a16_grouped"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(0); }
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }

  Support supports(const MoeProblem& p) const override {
    if (!gemm::w4a16_available()) return Support::no("built without CUDA");
    if (Support s = detail::sm90_device_support(); !s) return s;
    const QuantScheme w = p.weight_quant.scheme;
    if (w != QuantScheme::kNVFP4 && w != QuantScheme::kMXFP4)
      return Support::no("weight quant must be nvfp4 or mxfp4, got " +
                         std::string(scheme_name(w)));
    if (p.weight_quant.layout != ScaleLayout::kLinear)
      return Support::no("weight block scales must be linear, got " +
                         std::string(layout_name(p.weight_quant.layout)));
    if (p.activation_quant.scheme != QuantScheme::kBF16)
      return Support::no("activation quant must be bf16 (W4A16), got " +
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
    const gemm::W4Format f = format_of(p.weight_quant.scheme);
    const std::int64_t sfv = gemm::w4_scale_block(f);
    const DType sdt = f == gemm::W4Format::kNVFP4 ? DType::kE4M3 : DType::kE8M0;
    MOEKIT_CHECK_ARG(w.quant.scheme == p.weight_quant.scheme, "weights.quant",
                     scheme_name(p.weight_quant.scheme), scheme_name(w.quant.scheme));
    MOEKIT_CHECK_ARG(w.quant.layout == ScaleLayout::kLinear, "weights.quant.layout", "linear",
                     layout_name(w.quant.layout));
    auto prepare = [&](const QuantizedTensor& q, std::int64_t n, std::int64_t k, bool gated,
                       const char* what, Matrix& out) {
      const detail::Fp4HostWeights hw = detail::fp4_host_weights(q, e, n, k, sfv, sdt, what);
      Tensor sc(DType::kU8, Shape{e * n * k / 2}), ssh(DType::kU8, Shape{e * n * k / sfv});
      detail::w4a16_shuffle_per_expert(f, e, n, k, gated, hw.codes, hw.scales,
                                       sc.ptr<std::uint8_t>(), ssh.ptr<std::uint8_t>());
      out.codes = detail::to_device(sc);
      out.scales = detail::to_device(ssh);
      if (f == gemm::W4Format::kNVFP4) {
        MOEKIT_CHECK_ARG(q.global_scale.dtype() == DType::kF32 && q.global_scale.numel() == e,
                         std::string("weights.") + what + ".global_scale", "f32 [E]",
                         q.global_scale.view().str());
        const Tensor hg = host_copy_if_device(q.global_scale);
        const float* gs = (hg.defined() ? hg : q.global_scale).ptr<float>();
        Tensor alpha(DType::kF32, Shape{e});
        for (std::int64_t x = 0; x < e; ++x) alpha.ptr<float>()[x] = 1.0f / gs[x];
        out.alpha = detail::to_device(alpha);
      }
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
    const bool f32_in = p.apply_router_weight_on_input();
    MOEKIT_CHECK_ARG(
        (in.a1q.values.dtype == DType::kBF16 || (f32_in && in.a1q.values.dtype == DType::kF32)) &&
            in.a1q.values.numel() >= m * h,
        "in.a1q.values",
        std::string("bf16 [M, H]") + (f32_in ? " (or f32: router weight on the input)" : ""),
        in.a1q.values.str());
    if (m == 0) return;

    auto* offsets = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.offsets));
    auto* sorted = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.sorted_ids));
    auto* prow = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.permuted_row));
    auto* tokens = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.sorted_tokens));
    const auto* topk_ids = in.topk_ids.ptr<const std::int32_t>();
    // Llama4 applies the router weight on the input: the prepare already folded it in.
    const bool weights_on_input = p.apply_router_weight_on_input();
    const float* topk_weights = weights_on_input ? nullptr : in.topk_weights.ptr<const float>();
    // GEMM1 gathers its A rows itself (row_index = the token of each sorted row).
    const void* a_src = f32_in ? detail::round_input_rows(in.a1q.values, m, h,
                                                          ws_at(workspace13, l.a_rounded), stream)
                               : in.a1q.values.data;

    const gemm::W4Format f = format_of(p.weight_quant.scheme);
    gemm::W4A16GemmArgs g1;
    g1.format = f;
    g1.epilogue = p.layer.activation.kind == Activation::kSwigluOai ? gemm::W4Epilogue::kSwigluOai
                                                                     : gemm::W4Epilogue::kSiluAndMul;
    g1.swiglu_alpha = p.layer.activation.swiglu_alpha;
    g1.swiglu_limit = p.layer.activation.swiglu_limit;
    g1.num_experts = e;
    g1.m = rows;
    g1.n = 2 * i;
    g1.k = h;
    g1.expert_offsets = offsets;
    g1.a = a_src;
    g1.lda = h;
    g1.row_index = tokens;
    g1.w = w13_.codes.ptr<std::uint8_t>();
    g1.w_scales = w13_.scales.ptr<std::uint8_t>();
    g1.alpha = w13_.alpha.defined() ? w13_.alpha.ptr<float>() : nullptr;
    g1.bias = w13_bias_.defined() ? w13_bias_.ptr<float>() : nullptr;
    g1.out = workspace2.data;
    g1.stream = stream;
    // Decode sizes on decode tiles: the permutation in both GEMMs, the reduce in GEMM2's epilogue
    // (two kernels; gemm::DecodeRouting). Otherwise permute -> GEMM1 -> GEMM2 -> reduce.
    // Many rows per expert: the wgmma tile (below).
    const bool wgmma = gemm::w4a16_prefers_wgmma(rows, e);
    const bool fused = !wgmma && rows <= detail::decode_routing_max_rows() &&
                       gemm::w4a16_resolve_tile(g1) == gemm::W4Tile::kDecode8;
    auto* counters = reinterpret_cast<int*>(ws_at(workspace13, l.counters));
    if (fused) {
      g1.expert_offsets = nullptr;
      g1.row_index = nullptr;
      g1.routing = gemm::decode_routing_gemm1(topk_ids, k, counters, h);
    } else {
      detail::permute_by_expert(topk_ids, rows, e, offsets, sorted, prow, stream, k, tokens,
                                ws_at(workspace13, l.permute_scratch));
    }
    // The wgmma tile reads its activations in expert order and the wgmma K order through TMA
    // (the routed rows gathered and converted in one pass; GEMM1 writes GEMM2's rows in that
    // order).
    if (wgmma) {
      void* a_wgmma = ws_at(workspace13, l.a_wgmma);
      gemm::w4a16_to_wgmma_k_order(a_src, h, a_wgmma, h, rows, h, stream, tokens, m);
      g1.a = a_wgmma;
      g1.row_index = nullptr;
      g1.a_order = g1.out_order = gemm::W4KOrder::kWgmma;
    }
    gemm::w4a16_grouped_gemm(g1);

    gemm::W4A16GemmArgs g2 = g1;
    g2.out_order = gemm::W4KOrder::kNatural;
    g2.epilogue = gemm::W4Epilogue::kNone;
    g2.n = h;
    g2.k = i;
    g2.a = workspace2.data;
    g2.lda = 0;
    g2.row_index = nullptr;
    // A programmatic dependent of GEMM1, which writes neither the offsets nor GEMM2's weights:
    // its prologue and first weight loads overlap GEMM1's tail (w4a16.hpp overlap_previous). Not
    // after the wgmma tile: GEMM2's out2 stores would race GEMM1's reads of a_wgmma (same bytes).
    g2.overlap_previous = !wgmma;
    g2.w = w2_.codes.ptr<std::uint8_t>();
    g2.w_scales = w2_.scales.ptr<std::uint8_t>();
    g2.alpha = w2_.alpha.defined() ? w2_.alpha.ptr<float>() : nullptr;
    g2.bias = w2_bias_.defined() ? w2_bias_.ptr<float>() : nullptr;
    g2.out = ws_at(workspace13, l.out2);
    if (fused)
      g2.routing =
          gemm::decode_routing_gemm2(topk_ids, k, output.data, topk_weights, nullptr, counters);
    gemm::w4a16_grouped_gemm(g2);
    if (!fused)
      detail::weighted_reduce_bf16(ws_at(workspace13, l.out2), prow, topk_weights, m, k, h,
                                   output.data, stream);
  }

 private:
  struct Matrix {
    Tensor codes, scales, alpha;  // device: shuffled codes, shuffled scales, f32 [E] (NVFP4)
  };
  MoeProblem problem_;
  Matrix w13_, w2_;
  Tensor w13_bias_, w2_bias_;
  bool prepared_ = false;
};

}  // namespace

namespace detail {

void w4a16_shuffle_per_expert(gemm::W4Format format, std::int64_t num_experts, std::int64_t n,
                              std::int64_t k, bool gated, const std::uint8_t* codes,
                              const std::uint8_t* scales, std::uint8_t* out_codes,
                              std::uint8_t* out_scales) {
  // Both layouts are expert-major ([E][...] with n*k/2 code bytes and n*k/sfv scale bytes per
  // expert, see sm90_w4a16_weight_shuffle.cpp), so expert x is the one-expert shuffle of its slice.
  const std::int64_t code_bytes = n * k / 2, scale_bytes = n * k / gemm::w4_scale_block(format);
  parallel_for(num_experts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t x = begin; x < end; ++x)
      gemm::w4a16_shuffle_weights(format, 1, n, k, gated, codes + x * code_bytes,
                                  scales + x * scale_bytes, out_codes + x * code_bytes,
                                  out_scales + x * scale_bytes);
  });
}

}  // namespace detail

std::unique_ptr<ModularExperts> make_w4a16_grouped_experts(const MoeProblem& problem) {
  return std::make_unique<W4A16Experts>(problem);
}

}  // namespace moekit::cuda
