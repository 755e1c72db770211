// The SM90 grouped experts pipeline (sm90_grouped_experts.hpp): supports, workspace,
// prepare_weights and apply, one implementation for every scheme.
#include "cuda/experts/sm90_grouped_experts.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/device_runtime.hpp"
#include "cuda/activation/gated_activation.hpp"
#include "cuda/experts/sm90_experts_weights.hpp"
#include "cuda/finalize/weighted_reduce.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::cuda {
namespace {

using gemm::EpilogueKind;
using gemm::GemmScheme;

bool is_bf16_fp8(GemmScheme s) { return s == GemmScheme::kBF16 || s == GemmScheme::kFP8Block; }

// Bytes of an activation element of GEMM1's input (bf16 2, e4m3 1).
std::size_t a_elem(GemmScheme s) {
  return s == GemmScheme::kFP8Block || s == GemmScheme::kW4A8MXFP4 ? 1 : 2;
}

// Workspace pieces start at 256-byte boundaries.
std::size_t ws_up(std::size_t x) { return (x + 255) / 256 * 256; }

// Byte offsets of the pieces of workspace13 for R = M*k rows (workspace2: GEMM1's bf16 output,
// [R, 2I] before the activation kernel (bf16 / fp8), [R, I] activated (4-bit)).
//   offsets .. permute_scratch   the permutation; sorted_tokens: the token of each sorted row (a
//                                GEMM1 that gathers its rows reads them by it)
//   a_rounded                    bf16 [M, H] when the router weight is on the input (Llama4): the
//                                NoEP prepare's f32 rows x * w rounded here
//   a, a_scales                  GEMM1's gathered rows (+ fp8 1x128 / W4A8 per-row scales); W4A16
//                                wgmma: the rows in its K order. 4-bit: they share out2's bytes
//                                (GEMM1 has read them before GEMM2, launched without overlap,
//                                writes out2)
//   act, act_scales              GEMM2's input (bf16 / fp8 1x128 / W4A8 e4m3 per-row)
//   out2                         GEMM2's rows, reduced into the output
//   gemm_ws, counters            the CUTLASS argument arrays; the fused reduce's counters
struct Layout {
  std::size_t offsets, sorted_ids, permuted_row, sorted_tokens, permute_scratch, a_rounded, a,
      a_scales, act, act_scales, out2, gemm_ws, counters, total;
};

Layout layout_of(GemmScheme s, const MoeProblem& p) {
  const int e = p.num_local_experts();
  const std::size_t r = static_cast<std::size_t>(p.num_tokens * p.top_k());
  const std::size_t m = static_cast<std::size_t>(p.num_tokens);
  const std::size_t h = static_cast<std::size_t>(p.hidden_size());
  const std::size_t i = static_cast<std::size_t>(p.intermediate_size());
  const bool fp8 = s == GemmScheme::kFP8Block, w4a8 = s == GemmScheme::kW4A8MXFP4;
  const bool bf16_in = !fp8 && !w4a8;  // bf16 GEMM1 input: f32 rows with the weight on the input
  Layout l{};
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t here = at;
    at += ws_up(bytes);
    return here;
  };
  l.offsets = take((static_cast<std::size_t>(e) + 1) * 4);
  l.sorted_ids = take(r * 4);
  l.permuted_row = take(r * 4);
  l.sorted_tokens = w4a8 ? at : take(r * 4);
  l.permute_scratch = take(permute_scratch_bytes(static_cast<std::int64_t>(r), e));
  l.a_rounded = take(bf16_in && p.apply_router_weight_on_input() ? m * h * 2 : 0);
  if (is_bf16_fp8(s)) {
    l.a = take(r * h * a_elem(s));
    l.a_scales = take(fp8 ? r * (h / 128) * 4 : 0);
    l.act = take(r * i * a_elem(s));
    l.act_scales = take(fp8 ? r * (i / 128) * 4 : 0);
    l.out2 = take(r * h * 2);
  } else if (w4a8) {
    l.act = take(r * i);
    l.act_scales = take(r * 4);
    l.out2 = take(std::max(ws_up(r * h * 2), ws_up(r * h) + ws_up(r * 4)));
    l.a = l.out2;
    l.a_scales = l.out2 + ws_up(r * h);
  } else {
    l.out2 = take(r * h * 2);
    l.a = l.out2;  // the wgmma kernel's K-ordered rows
  }
  l.gemm_ws = take(is_bf16_fp8(s) ? gemm::grouped_gemm_workspace_bytes(s, e) : 0);
  l.counters = take(s == GemmScheme::kFP8Block || w4a8
                        ? 0
                        : static_cast<std::size_t>(gemm::decode_routing_counters(p.hidden_size())) * 4);
  l.total = at;
  return l;
}

char* at(const TensorView& v, std::size_t off) { return static_cast<char*>(v.data) + off; }

Support sm90_device_support() {
  try {
    if (device_runtime::device_count() == 0) return Support::no("no CUDA device");
    const auto info = device_runtime::device_info(0);
    if (info.sm_major != 9)
      return Support::no("needs SM90, device is sm_" +
                         std::to_string(info.sm_major * 10 + info.sm_minor));
  } catch (const std::exception& e) {
    return Support::no(std::string("device query failed: ") + e.what());
  }
  return Support::yes();
}

bool identity_map(const ParallelConfig& p) {
  for (std::size_t g = 0; g < p.expert_map.size(); ++g)
    if (p.expert_map[g] != static_cast<std::int32_t>(g)) return false;
  return true;
}

std::string experts_name(GemmScheme s) {
  switch (s) {
    case GemmScheme::kBF16: return "cuda_bf16_grouped";
    case GemmScheme::kFP8Block: return "cuda_fp8_block_grouped";
    case GemmScheme::kW4A16NVFP4:
    case GemmScheme::kW4A16MXFP4: return "cuda_w4a16_grouped";
    case GemmScheme::kW4A8MXFP4: return "cuda_w4a8_grouped";
  }
  return "?";
}

class Sm90GroupedExperts final : public ModularExperts {
 public:
  Sm90GroupedExperts(const MoeProblem& problem, GemmScheme scheme)
      : problem_(problem), scheme_(scheme) {}
  std::string name() const override { return experts_name(scheme_); }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(0); }
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }

  Support supports(const MoeProblem& p) const override {
    if (is_bf16_fp8(scheme_) && !MOEKIT_WITH_CUTLASS)
      return Support::no("built without the CUTLASS headers");
    if (Support s = sm90_device_support(); !s) return s;
    if (Support s = quant_support(p); !s) return s;
    return layer_support(p);
  }

  WorkspaceShapes workspace_shapes(const MoeProblem& p) const override {
    const bool gemm1_fused = !is_bf16_fp8(scheme_);
    WorkspaceShapes w;
    w.workspace13 = {DType::kU8, Shape{static_cast<std::int64_t>(layout_of(scheme_, p).total)}};
    w.workspace2 = {DType::kBF16, Shape{p.num_tokens * p.top_k(),
                                        (gemm1_fused ? 1 : 2) * p.intermediate_size()}};
    w.output = {DType::kBF16, Shape{p.num_tokens, p.hidden_size()}};
    return w;
  }

  void prepare_weights(const MoeProblem& p, const MoeWeights& w, StreamHandle) override {
    problem_ = p;
    if (gemm::is_w4a16(scheme_))  // one backend for both formats: the problem's
      scheme_ = p.weight_quant.scheme == QuantScheme::kNVFP4 ? GemmScheme::kW4A16NVFP4
                                                             : GemmScheme::kW4A16MXFP4;
    weights_ = prepare_sm90_weights(scheme_, p, w, name());
    expert_map_ = Tensor();
    if (!identity_map(p.parallel)) {
      Tensor map(DType::kI32, Shape{static_cast<std::int64_t>(p.parallel.expert_map.size())});
      std::copy(p.parallel.expert_map.begin(), p.parallel.expert_map.end(),
                map.ptr<std::int32_t>());
      expert_map_ = Tensor(DType::kI32, map.shape(), Device::cuda(0));
      copy(expert_map_, map);
    }
    prepared_ = true;
  }

  void apply(const DispatchedActivations& in, const TensorView& output,
             const TensorView& workspace13, const TensorView& workspace2,
             StreamHandle stream) override;

 private:
  Support quant_support(const MoeProblem& p) const;
  Support layer_support(const MoeProblem& p) const;
  void check_apply(const DispatchedActivations& in, const TensorView& output,
                   const TensorView& workspace13, const TensorView& workspace2,
                   const Layout& l) const;

  MoeProblem problem_;
  GemmScheme scheme_;
  Sm90Weights weights_;
  Tensor expert_map_;  // device [E_global] i32 with an expert map
  bool prepared_ = false;
};

Support Sm90GroupedExperts::quant_support(const MoeProblem& p) const {
  const QuantScheme w = p.weight_quant.scheme, a = p.activation_quant.scheme;
  auto need = [&](QuantScheme want, QuantScheme got, const char* what) {
    return want == got ? Support::yes()
                       : Support::no(std::string(what) + " quant must be " +
                                     std::string(scheme_name(want)) + ", got " +
                                     std::string(scheme_name(got)));
  };
  // The 4-bit weights' block scales as the checkpoint has them (the kernels' layouts are made by
  // prepare_weights from the linear ones).
  const Support linear_scales =
      p.weight_quant.layout == ScaleLayout::kLinear
          ? Support::yes()
          : Support::no("weight block scales must be linear, got " +
                        std::string(layout_name(p.weight_quant.layout)));
  switch (scheme_) {
    case GemmScheme::kBF16:
      if (Support s = need(QuantScheme::kBF16, w, "weight"); !s) return s;
      return need(QuantScheme::kBF16, a, "activation");
    case GemmScheme::kFP8Block:
      if (Support s = need(QuantScheme::kFP8Block128x128, w, "weight"); !s) return s;
      return need(QuantScheme::kFP8Block1x128, a, "activation");
    case GemmScheme::kW4A16NVFP4:
    case GemmScheme::kW4A16MXFP4:
      if (w != QuantScheme::kNVFP4 && w != QuantScheme::kMXFP4)
        return Support::no("weight quant must be nvfp4 or mxfp4, got " +
                           std::string(scheme_name(w)));
      if (!linear_scales) return linear_scales;
      if (a != QuantScheme::kBF16)
        return Support::no("activation quant must be bf16 (W4A16), got " +
                           std::string(scheme_name(a)));
      return Support::yes();
    case GemmScheme::kW4A8MXFP4:
      if (w == QuantScheme::kNVFP4)
        return Support::no(
            "nvfp4 weights: e2m1 x e4m3 block-scale products are not exact in e4m3 (use "
            "cuda_w4a16_grouped with bf16 activations)");
      if (Support s = need(QuantScheme::kMXFP4, w, "weight"); !s) return s;
      if (!linear_scales) return linear_scales;
      if (a != QuantScheme::kFP8PerToken)
        return Support::no("activation quant must be fp8_token (e4m3, one scale per row), got " +
                           std::string(scheme_name(a)));
      return Support::yes();
  }
  return Support::no("unknown scheme");
}

// bf16 input activations, SiLU / SwiGLU-OAI over gate/up halves, the standard format, 1..512
// local experts, H and I multiples of the kernels' alignment, tokens * top_k below 2^31.
Support Sm90GroupedExperts::layer_support(const MoeProblem& p) const {
  if (p.activation_dtype != DType::kBF16) return Support::no("activation dtype must be bf16");
  const Activation act = p.layer.activation.kind;
  if ((act != Activation::kSiluAndMul && act != Activation::kSwigluOai) ||
      p.layer.activation.layout != GateUpLayout::kHalves)
    return Support::no("only silu / swiglu_oai with gate/up halves, got " +
                       p.layer.activation.str());
  if (p.parallel.low_latency_dispatch)
    return Support::no("the standard format only (low-latency dispatch needs batched experts)");
  const int e = p.num_local_experts();
  if (e < 1 || e > kMaxPermuteExperts)
    return Support::no("local experts must be in [1, " + std::to_string(kMaxPermuteExperts) +
                       "], got " + std::to_string(e));
  const std::int64_t align = scheme_ == GemmScheme::kBF16       ? 8
                             : scheme_ == GemmScheme::kFP8Block ? 128
                                                                : 64;
  if (p.hidden_size() % align != 0 || p.intermediate_size() % align != 0)
    return Support::no("hidden and intermediate sizes must be multiples of " +
                       std::to_string(align) + ", got " + std::to_string(p.hidden_size()) +
                       " and " + std::to_string(p.intermediate_size()));
  if (p.num_tokens * p.top_k() >= (std::int64_t{1} << 31))
    return Support::no("tokens * top_k must be below 2^31");
  return Support::yes();
}

void Sm90GroupedExperts::check_apply(const DispatchedActivations& in, const TensorView& output,
                                     const TensorView& workspace13, const TensorView& workspace2,
                                     const Layout& l) const {
  const MoeProblem& p = problem_;
  const std::int64_t m = in.num_tokens, rows = m * p.top_k(), h = p.hidden_size();
  const std::int64_t ws2_cols = (is_bf16_fp8(scheme_) ? 2 : 1) * p.intermediate_size();
  MOEKIT_CHECK_ARG(in.format == ActivationFormat::kStandard, "in.format", "standard",
                   activation_format_name(in.format));
  MOEKIT_CHECK_ARG(m >= 0 && m <= p.num_tokens, "in.num_tokens",
                   ::moekit::detail::concat("in [0, ", p.num_tokens, "]"), m);
  MOEKIT_CHECK_ARG(in.topk_ids.dtype == DType::kI32 && in.topk_ids.numel() >= rows, "in.topk_ids",
                   "i32 [M, k]", in.topk_ids.str());
  MOEKIT_CHECK_ARG(output.dtype == DType::kBF16 && output.numel() >= m * h, "output",
                   "bf16 [M, H]", output.str());
  MOEKIT_CHECK_ARG(workspace13.nbytes() >= l.total, "workspace13",
                   ::moekit::detail::concat(">= ", l.total, " bytes"), workspace13.nbytes());
  MOEKIT_CHECK_ARG(workspace2.nbytes() >= static_cast<std::size_t>(rows * ws2_cols) * 2,
                   "workspace2", ::moekit::detail::concat("bf16 [M*k, ", ws2_cols, "]"),
                   workspace2.str());
  const QuantizedView& a = in.a1q;
  switch (scheme_) {
    case GemmScheme::kFP8Block:
      MOEKIT_CHECK_ARG(a.values.dtype == DType::kE4M3 && a.values.numel() >= m * h,
                       "in.a1q.values", "e4m3 [M, H]", a.values.str());
      MOEKIT_CHECK_ARG(a.scales.dtype == DType::kF32 && a.scales.numel() >= m * (h / 128),
                       "in.a1q.scales", "f32 [M, H/128] (1x128 groups)", a.scales.str());
      break;
    case GemmScheme::kW4A8MXFP4:
      MOEKIT_CHECK_ARG(a.config.scheme == QuantScheme::kFP8PerToken, "in.a1q.config.scheme",
                       "fp8_token", scheme_name(a.config.scheme));
      MOEKIT_CHECK_ARG(a.values.dtype == DType::kE4M3 && a.values.numel() >= m * h,
                       "in.a1q.values", "e4m3 [M, H]", a.values.str());
      MOEKIT_CHECK_ARG(a.scales.dtype == DType::kF32 && a.scales.numel() >= m, "in.a1q.scales",
                       "f32 [M] (fp8_token)", a.scales.str());
      break;
    default: {
      // bf16 activations; with the router weight on the input the NoEP prepare hands over the f32
      // rows x * w (the CPU one does the same), rounded to bf16 here.
      const bool f32_in = p.apply_router_weight_on_input();
      MOEKIT_CHECK_ARG(
          (a.values.dtype == DType::kBF16 || (f32_in && a.values.dtype == DType::kF32)) &&
              a.values.numel() >= m * h,
          "in.a1q.values",
          std::string("bf16 [M, H]") + (f32_in ? " (or f32: router weight on the input)" : ""),
          a.values.str());
    }
  }
}

void Sm90GroupedExperts::apply(const DispatchedActivations& in, const TensorView& output,
                               const TensorView& workspace13, const TensorView& workspace2,
                               StreamHandle stream) {
  MOEKIT_CHECK(prepared_, name(), ": apply() before prepare_weights()");
  const MoeProblem& p = problem_;
  const GemmScheme s = scheme_;
  const bool fp8 = s == GemmScheme::kFP8Block, w4a8 = s == GemmScheme::kW4A8MXFP4;
  const int e = p.num_local_experts(), k = p.top_k();
  const std::int64_t h = p.hidden_size(), i = p.intermediate_size();
  const std::int64_t m = in.num_tokens, rows = m * k;
  const Layout l = layout_of(s, p);
  check_apply(in, output, workspace13, workspace2, l);
  if (m == 0) return;

  tuning::sm90::ExpertsPlan plan =
      tuning::sm90::experts_plan(s, e, rows, h, i, weights_.aligned16);
  // The fused routing reads global ids as local ones: single rank, every expert local.
  const bool fused = plan.fused_routing && identity_map(p.parallel);
  const bool indexed = plan.gemm1_gathers_rows;
  auto* offsets = reinterpret_cast<std::int32_t*>(at(workspace13, l.offsets));
  auto* sorted = reinterpret_cast<std::int32_t*>(at(workspace13, l.sorted_ids));
  auto* prow = reinterpret_cast<std::int32_t*>(at(workspace13, l.permuted_row));
  auto* tokens = reinterpret_cast<std::int32_t*>(at(workspace13, l.sorted_tokens));
  auto* counters = reinterpret_cast<int*>(at(workspace13, l.counters));
  const std::int32_t* used_rows = offsets + e;
  const auto* topk_ids = in.topk_ids.ptr<const std::int32_t>();
  if (!fused) {
    permute_by_expert(
        {.topk_ids = topk_ids,
         .num_assignments = rows,
         .num_experts = p.num_experts(),
         .expert_map = expert_map_.defined() ? expert_map_.ptr<const std::int32_t>() : nullptr,
         .num_local_experts = e,
         .expert_offsets = offsets,
         .sorted_ids = sorted,
         .permuted_row = prow,
         .top_k = k,
         .sorted_tokens = indexed ? tokens : nullptr,
         .scratch = at(workspace13, l.permute_scratch)},
        stream);
  }
  // GEMM1's input rows: bf16 (f32 rows with the weight on the input rounded RN-even, the same
  // rounding as the CPU's convert_rows; the only difference to the CPU reference's f32 GEMM1
  // input, <= 2^-9 relative per element), or the prepare's e4m3 rows.
  const void* a_src = in.a1q.values.data;
  if (!fp8 && !w4a8 && in.a1q.values.dtype == DType::kF32) {
    void* rounded = at(workspace13, l.a_rounded);
    convert_rows(TensorView(in.a1q.values.data, DType::kF32, Shape{m, h}, in.a1q.values.device),
                 TensorView(rounded, DType::kBF16, Shape{m, h}, in.a1q.values.device), stream);
    a_src = rounded;
  }
  const bool rounded = a_src != in.a1q.values.data;
  GatherArgs gather;
  gather.sorted_ids = sorted;
  gather.top_k = k;
  gather.max_rows = rows;
  gather.num_rows = used_rows;
  const bool gather_a = !fused && !indexed;
  if (gather_a) {
    gather.src = a_src;
    gather.row_bytes = h * static_cast<std::int64_t>(a_elem(s));
    gather.out = at(workspace13, l.a);
    gather.order = plan.wgmma_k_order ? gemm::KOrder::kWgmma : gemm::KOrder::kNatural;
    gather_rows(gather, stream);
    if (fp8 || w4a8) {
      gather.src = in.a1q.scales.data;
      gather.row_bytes = fp8 ? (h / 128) * 4 : 4;
      gather.out = at(workspace13, l.a_scales);
      gather.order = gemm::KOrder::kNatural;
      gather_rows(gather, stream);
    }
  }

  const Activation kind = p.layer.activation.kind;
  const float* bias1 = weights_.w13_bias.defined() ? weights_.w13_bias.ptr<float>() : nullptr;
  const float* bias2 = weights_.w2_bias.defined() ? weights_.w2_bias.ptr<float>() : nullptr;
  // Llama4 applies the router weight on the input: the prepare already folded it in.
  const float* topk_weights =
      p.apply_router_weight_on_input() ? nullptr : in.topk_weights.ptr<const float>();

  gemm::GroupedGemmArgs g1;
  g1.scheme = s;
  g1.num_experts = e;
  g1.rows = rows;
  g1.n = 2 * i;
  g1.k = h;
  g1.expert_offsets = fused ? nullptr : offsets;
  g1.a = gather_a ? at(workspace13, l.a) : a_src;
  g1.lda = gather_a ? 0 : h;
  g1.row_index = indexed && !fused ? tokens : nullptr;
  g1.a_scales = fp8 || w4a8 ? reinterpret_cast<const float*>(
                                  gather_a ? at(workspace13, l.a_scales) : in.a1q.scales.data)
                            : nullptr;
  g1.w = weights_.w13.values;
  g1.w_scales = weights_.w13.scales;
  g1.w_expert_scale =
      weights_.w13.expert_scale.defined() ? weights_.w13.expert_scale.ptr<float>() : nullptr;
  g1.w_row_scale = weights_.w13.row_scale.defined() ? weights_.w13.row_scale.ptr<float>() : nullptr;
  if (plan.gemm1_fuses_activation) {
    g1.epilogue.kind =
        kind == Activation::kSwigluOai ? EpilogueKind::kSwigluOai : EpilogueKind::kSiluAndMul;
    g1.epilogue.swiglu_alpha = p.layer.activation.swiglu_alpha;
    g1.epilogue.swiglu_limit = p.layer.activation.swiglu_limit;
    g1.epilogue.bias = bias1;
  }
  // GEMM1's output: GEMM2's input when it runs the activation (4-bit: workspace2), else the
  // pre-activation rows in workspace2.
  g1.out = plan.gemm1_fuses_activation && is_bf16_fp8(s) ? at(workspace13, l.act) : workspace2.data;
  g1.workspace = at(workspace13, l.gemm_ws);
  g1.workspace_bytes = is_bf16_fp8(s) ? gemm::grouped_gemm_workspace_bytes(s, e) : 0;
  g1.stream = stream;
  // PDL (the decode kernels; the others ignore it): GEMM1's previous kernel is the row gather, or
  // on the decode kernel the rounding of f32 input rows (a kernel only when the input is f32);
  // right after the permutation, which writes the offsets, GEMM1 must not overlap.
  g1.overlap_previous = is_bf16_fp8(s) && (plan.gemm1.kernel != gemm::GemmKernel::kDecode || rounded);
  if (fused) g1.routing = gemm::decode_routing_gemm1(topk_ids, k, counters, h);
  gemm::grouped_gemm(g1, plan.gemm1);

  // GEMM2's input.
  const void* a2 = plan.gemm1_fuses_activation && !is_bf16_fp8(s) ? workspace2.data
                                                                   : at(workspace13, l.act);
  const float* a2_scales = nullptr;
  if (!plan.gemm1_fuses_activation) {
    GatedActivationArgs act;
    act.kind = kind;
    act.swiglu_alpha = p.layer.activation.swiglu_alpha;
    act.swiglu_limit = p.layer.activation.swiglu_limit;
    act.bias = bias1;
    act.expert_offsets = offsets;
    act.num_experts = e;
    if (fp8) {
      a2_scales = reinterpret_cast<const float*>(at(workspace13, l.act_scales));
      gated_activation_quant_fp8_block(workspace2.data, at(workspace13, l.act),
                                       const_cast<float*>(a2_scales), rows, i, used_rows, act,
                                       stream);
    } else {
      gated_activation_bf16(workspace2.data, at(workspace13, l.act), rows, i, used_rows, act,
                            stream);
    }
  }
  if (w4a8) {
    // W4A8's GEMM2 input: the bf16 activation rows quantized per row (formats.md, FP8 per-token).
    QuantConfig qc;
    qc.scheme = QuantScheme::kFP8PerToken;
    QuantizedView q;
    q.config = qc;
    q.values = TensorView(at(workspace13, l.act), DType::kE4M3, Shape{rows, i}, Device::cuda(0));
    q.scales =
        TensorView(at(workspace13, l.act_scales), DType::kF32, Shape{rows}, Device::cuda(0));
    quantize(TensorView(workspace2.data, DType::kBF16, Shape{rows, i}, Device::cuda(0)), qc, q,
             QuantBackend::kCuda, {}, stream);
    a2 = q.values.data;
    a2_scales = q.scales.ptr<const float>();
  }

  gemm::GroupedGemmArgs g2 = g1;
  g2.n = h;
  g2.k = i;
  g2.a = a2;
  g2.lda = 0;
  g2.ldo = 0;
  g2.row_index = nullptr;
  g2.a_scales = a2_scales;
  g2.w = weights_.w2.values;
  g2.w_scales = weights_.w2.scales;
  g2.w_expert_scale =
      weights_.w2.expert_scale.defined() ? weights_.w2.expert_scale.ptr<float>() : nullptr;
  g2.w_row_scale = weights_.w2.row_scale.defined() ? weights_.w2.row_scale.ptr<float>() : nullptr;
  g2.epilogue = {};
  // GEMM2's bias: in its epilogue (4-bit), else in the weighted reduce.
  if (!is_bf16_fp8(s)) g2.epilogue.bias = bias2;
  g2.out = at(workspace13, l.out2);
  g2.routing = {};
  // A programmatic dependent of what writes its input (the activation kernel or GEMM1), which
  // writes neither the offsets nor GEMM2's weights. Not after the W4A16 wgmma GEMM1: GEMM2's out2
  // stores would race GEMM1's reads of its K-ordered rows (the same bytes).
  g2.overlap_previous = is_bf16_fp8(s) || (gemm::is_w4a16(s) && !plan.wgmma_k_order);
  if (fused)
    g2.routing = gemm::decode_routing_gemm2(topk_ids, k, output.data, topk_weights,
                                            is_bf16_fp8(s) ? bias2 : nullptr, counters);
  gemm::grouped_gemm(g2, plan.gemm2);
  if (fused) return;
  WeightedReduceArgs r;
  r.expert_out = at(workspace13, l.out2);
  r.source_row = prow;
  r.topk_weights = topk_weights;
  r.num_tokens = m;
  r.top_k = k;
  r.hidden = h;
  r.out = output.data;
  if (is_bf16_fp8(s) && bias2 != nullptr) {
    // The reduce indexes the bias by the slot's top-k id: global ids with an expert map.
    r.bias = weights_.w2_bias_global.defined() ? weights_.w2_bias_global.ptr<float>() : bias2;
    r.topk_ids = topk_ids;
  }
  weighted_reduce(r, stream);
}

}  // namespace

SchemeChoice gemm_scheme_of(const MoeProblem& p) {
  const QuantScheme w = p.weight_quant.scheme, a = p.activation_quant.scheme;
  if (w == QuantScheme::kBF16 && a == QuantScheme::kBF16) return {true, GemmScheme::kBF16};
  if (w == QuantScheme::kFP8Block128x128 && a == QuantScheme::kFP8Block1x128)
    return {true, GemmScheme::kFP8Block};
  if (w == QuantScheme::kNVFP4 && a == QuantScheme::kBF16) return {true, GemmScheme::kW4A16NVFP4};
  if (w == QuantScheme::kMXFP4 && a == QuantScheme::kBF16) return {true, GemmScheme::kW4A16MXFP4};
  if (w == QuantScheme::kMXFP4 && a == QuantScheme::kFP8PerToken)
    return {true, GemmScheme::kW4A8MXFP4};
  return {};
}

std::unique_ptr<ModularExperts> make_sm90_grouped_experts(const MoeProblem& problem,
                                                          GemmScheme scheme) {
  return std::make_unique<Sm90GroupedExperts>(problem, scheme);
}

}  // namespace moekit::cuda
