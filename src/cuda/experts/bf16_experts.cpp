// GroupedGemmExperts: supports / workspace_shapes / prepare_weights / apply for the bf16 and fp8
// block grouped-GEMM experts (see bf16_experts.hpp for the pipeline).
#include "cuda/experts/bf16_experts.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/device_runtime.hpp"
#include "cuda/gemm/sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "moekit/core/error.hpp"

namespace moekit::cuda {

namespace {

using detail::ws_at;
using detail::ws_up;

bool is_fp8(gemm::GroupedGemmType t) { return t == gemm::GroupedGemmType::kFP8Block128; }

// With the router weight on the input (Llama4) and bf16 activations, the NoEP prepares (CPU and
// CUDA alike) hand the experts the f32 rows x * w (activation_quant kBF16 passes its input
// through); the fp8 scheme quantizes those rows in the prepare and gets e4m3.
bool takes_f32_input(gemm::GroupedGemmType t, const MoeProblem& problem) {
  return !is_fp8(t) && problem.apply_router_weight_on_input();
}

// Byte offsets of the pieces of workspace13 for R = M*k rows (workspace2 holds GEMM1's output).
// a_rounded: bf16 [M, H] for f32 GEMM1 inputs (bf16 activations with the router weight on the
// input, see round_input_rows); empty otherwise.
// sorted_tokens: the token of each sorted row (the decode and wgmma configs' row_index: GEMM1
// gathers its rows itself, `a` and `a_scales` stay unused). counters: the fused reduce's (bf16
// decode sizes, gemm::DecodeRouting).
struct Layout13 {
  std::size_t offsets, sorted_ids, permuted_row, sorted_tokens, permute_scratch, a_rounded, a,
      a_scales, act, act_scales, out2, gemm_ws, counters, total;
};

Layout13 layout13(gemm::GroupedGemmType t, const MoeProblem& problem) {
  const int e = problem.layer.num_experts;
  const std::size_t r = static_cast<std::size_t>(problem.num_tokens * problem.layer.routing.top_k);
  const std::size_t m = static_cast<std::size_t>(problem.num_tokens);
  const std::size_t h = static_cast<std::size_t>(problem.layer.hidden_size);
  const std::size_t i = static_cast<std::size_t>(problem.layer.intermediate_size);
  const std::size_t elem = is_fp8(t) ? 1 : 2;
  Layout13 l{};
  std::size_t p = 0;
  l.offsets = p, p += ws_up((static_cast<std::size_t>(e) + 1) * 4);
  l.sorted_ids = p, p += ws_up(r * 4);
  l.permuted_row = p, p += ws_up(r * 4);
  l.sorted_tokens = p, p += ws_up(r * 4);
  l.permute_scratch = p, p += ws_up(detail::permute_scratch_bytes(static_cast<std::int64_t>(r), e));
  l.a_rounded = p, p += takes_f32_input(t, problem) ? ws_up(m * h * 2) : 0;
  l.a = p, p += ws_up(r * h * elem);
  l.a_scales = p, p += is_fp8(t) ? ws_up(r * (h / 128) * 4) : 0;
  l.act = p, p += ws_up(r * i * elem);
  l.act_scales = p, p += is_fp8(t) ? ws_up(r * (i / 128) * 4) : 0;
  l.out2 = p, p += ws_up(r * h * 2);
  l.gemm_ws = p, p += ws_up(gemm::grouped_gemm_workspace_bytes(t, e));
  l.counters = p, p += is_fp8(t) ? 0
                                 : ws_up(static_cast<std::size_t>(gemm::decode_routing_counters(
                                             problem.layer.hidden_size)) *
                                         4);
  l.total = p;
  return l;
}

}  // namespace

gemm::GroupedGemmConfig grouped_gemm_config_from_env(gemm::GroupedGemmType t) {
  const char* v = std::getenv("MOEKIT_GROUPED_GEMM_CONFIG");
  if (v == nullptr) return gemm::GroupedGemmConfig::kAuto;
  const std::string all(v);
  if (all.empty()) return gemm::GroupedGemmConfig::kAuto;
  if (all.find(':') == std::string::npos)
    return gemm::parse_grouped_gemm_config(all, "MOEKIT_GROUPED_GEMM_CONFIG");
  const std::string want = gemm::grouped_gemm_type_name(t) + ":";
  std::size_t start = 0;
  while (start <= all.size()) {
    const std::size_t end = std::min(all.find(',', start), all.size());
    const std::string item = all.substr(start, end - start);
    if (item.rfind(want, 0) == 0)
      return gemm::parse_grouped_gemm_config(item.substr(want.size()), "MOEKIT_GROUPED_GEMM_CONFIG");
    start = end + 1;
  }
  return gemm::GroupedGemmConfig::kAuto;
}

int wgmma_row_gather_from_env() {
  const char* v = std::getenv("MOEKIT_WGMMA_ROW_GATHER");
  if (v == nullptr || *v == 0) return -1;
  const std::string s = v;
  MOEKIT_CHECK_ARG(s == "0" || s == "1", "MOEKIT_WGMMA_ROW_GATHER", "0 or 1", s);
  return s == "1" ? 1 : 0;
}

bool wgmma_gathers_rows(int from_env, bool fp8, int num_experts, std::int64_t rows) {
  if (from_env >= 0) return from_env == 1;
  return std::string(gemm::detail::wgmma_auto_tile_name(fp8, num_experts, rows)) == "160r256";
}

struct GroupedGemmExperts::State {
  MoeProblem problem;
  Tensor w13_owned, w2_owned, w13_scales_owned, w2_scales_owned;
  const void* w13 = nullptr;  // [E, 2I, H]
  const void* w2 = nullptr;   // [E, H, I]
  const float* w13_scales = nullptr;  // fp8: [E, 2I/128, H/128]
  const float* w2_scales = nullptr;   // fp8: [E, H/128, I/128]
  Tensor w13_bias, w2_bias;            // device f32 [E, 2I] / [E, H] (layers with biases)
  bool prepared = false;
  gemm::GroupedGemmConfig config = gemm::GroupedGemmConfig::kAuto;
  int wgmma_row_gather = -1;  // MOEKIT_WGMMA_ROW_GATHER: -1 unset (wgmma_gathers_rows), 0, 1
};

GroupedGemmExperts::GroupedGemmExperts(const MoeProblem& problem, gemm::GroupedGemmType type)
    : type_(type), state_(std::make_unique<State>()) {
  state_->problem = problem;
  state_->config = grouped_gemm_config_from_env(type);
  state_->wgmma_row_gather = wgmma_row_gather_from_env();
}

GroupedGemmExperts::~GroupedGemmExperts() = default;

std::string GroupedGemmExperts::name() const {
  return is_fp8(type_) ? "cuda_fp8_block_grouped" : "cuda_bf16_grouped";
}

namespace detail {

Tensor host_copy_if_device(const Tensor& t) {
  if (t.device().is_host()) return Tensor();
  Tensor h(t.dtype(), t.shape(), Device::host());
  copy(h, t);
  return h;
}

Tensor to_device(const Tensor& t) {
  Tensor d(t.dtype(), t.shape(), Device::cuda(0));
  copy(d, t);
  return d;
}

Fp4HostWeights fp4_host_weights(const QuantizedTensor& q, std::int64_t num_experts, std::int64_t n,
                                std::int64_t k, std::int64_t sfv, DType scale_dtype,
                                const char* what) {
  const Shape vs{num_experts, n, k / 2}, ss{num_experts, n, k / sfv};
  MOEKIT_CHECK_ARG(q.values.dtype() == DType::kE2M1x2 && q.values.shape() == vs,
                   std::string("weights.") + what + ".values", "e2m1x2" + vs.str(),
                   q.values.view().str());
  MOEKIT_CHECK_ARG(q.scales.dtype() == scale_dtype && q.scales.shape() == ss,
                   std::string("weights.") + what + ".scales",
                   std::string(dtype_name(scale_dtype)) + ss.str(), q.scales.view().str());
  Fp4HostWeights h;
  h.values_copy = host_copy_if_device(q.values);
  h.scales_copy = host_copy_if_device(q.scales);
  h.codes = (h.values_copy.defined() ? h.values_copy : q.values).ptr<std::uint8_t>();
  h.scales = (h.scales_copy.defined() ? h.scales_copy : q.scales).ptr<std::uint8_t>();
  return h;
}

Experts::WorkspaceShapes grouped_workspace_shapes(const MoeProblem& p, std::size_t ws13_bytes,
                                                  std::int64_t ws2_cols) {
  Experts::WorkspaceShapes w;
  w.workspace13 = {DType::kU8, Shape{static_cast<std::int64_t>(ws13_bytes)}};
  w.workspace2 = {DType::kBF16, Shape{p.num_tokens * p.layer.routing.top_k, ws2_cols}};
  w.output = {DType::kBF16, Shape{p.num_tokens, p.layer.hidden_size}};
  return w;
}

void check_grouped_apply(const MoeProblem& p, const DispatchedActivations& in,
                         const TensorView& output, const TensorView& workspace13,
                         std::size_t ws13_bytes, const TensorView& workspace2,
                         std::int64_t ws2_cols, const char* ws2_what) {
  const std::int64_t m = in.num_tokens, rows = m * p.layer.routing.top_k;
  MOEKIT_CHECK_ARG(in.format == ActivationFormat::kStandard, "in.format", "standard",
                   activation_format_name(in.format));
  MOEKIT_CHECK_ARG(m >= 0 && m <= p.num_tokens, "in.num_tokens",
                   ::moekit::detail::concat("in [0, ", p.num_tokens, "]"), m);
  MOEKIT_CHECK_ARG(in.topk_ids.dtype == DType::kI32 && in.topk_ids.numel() >= rows, "in.topk_ids",
                   "i32 [M, k]", in.topk_ids.str());
  MOEKIT_CHECK_ARG(output.dtype == DType::kBF16 && output.numel() >= m * p.layer.hidden_size,
                   "output", "bf16 [M, H]", output.str());
  MOEKIT_CHECK_ARG(workspace13.nbytes() >= ws13_bytes, "workspace13",
                   ::moekit::detail::concat(">= ", ws13_bytes, " bytes"), workspace13.nbytes());
  MOEKIT_CHECK_ARG(workspace2.nbytes() >= static_cast<std::size_t>(rows * ws2_cols) * 2,
                   "workspace2", std::string("bf16 ") + ws2_what, workspace2.str());
}

Support grouped_experts_layer_support(const MoeProblem& p, std::int64_t align) {
  if (p.activation_dtype != DType::kBF16) return Support::no("activation dtype must be bf16");
  const Activation act = p.layer.activation.kind;
  if ((act != Activation::kSiluAndMul && act != Activation::kSwigluOai) ||
      p.layer.activation.layout != GateUpLayout::kHalves)
    return Support::no("only silu / swiglu_oai with gate/up halves, got " +
                       p.layer.activation.str());
  if (p.parallel.ep_size != 1 || !p.parallel.expert_map.empty() || p.parallel.low_latency_dispatch)
    return Support::no("single-rank standard format only (no expert map)");
  const int e = p.layer.num_experts;
  if (e < 1 || e > kMaxPermuteExperts)
    return Support::no("experts must be in [1, " + std::to_string(kMaxPermuteExperts) +
                       "], got " + std::to_string(e));
  if (p.layer.hidden_size % align != 0 || p.layer.intermediate_size % align != 0)
    return Support::no("hidden and intermediate sizes must be multiples of " +
                       std::to_string(align) + ", got " + std::to_string(p.layer.hidden_size) +
                       " and " + std::to_string(p.layer.intermediate_size));
  if (p.num_tokens * p.layer.routing.top_k >= (std::int64_t{1} << 31))
    return Support::no("tokens * top_k must be below 2^31");
  return Support::yes();
}

int decode_routing_max_rows() {
  static const int rows = [] {
    const char* v = std::getenv("MOEKIT_DECODE_ROUTING");
    if (v == nullptr) return gemm::kDecodeRoutingMaxRows;
    const int x = std::atoi(v);
    return std::clamp(x, 0, gemm::kDecodeRoutingMaxRows);
  }();
  return rows;
}

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

}  // namespace detail

Support GroupedGemmExperts::supports(const MoeProblem& p) const {
  const bool fp8 = is_fp8(type_);
  if (!gemm::grouped_gemm_available(type_))
    return Support::no("built without the CUTLASS headers");
  if (Support s = detail::sm90_device_support(); !s) return s;
  const auto want_w = fp8 ? QuantScheme::kFP8Block128x128 : QuantScheme::kBF16;
  const auto want_a = fp8 ? QuantScheme::kFP8Block1x128 : QuantScheme::kBF16;
  if (p.weight_quant.scheme != want_w)
    return Support::no("weight quant must be " + std::string(scheme_name(want_w)) +
                       ", got " + std::string(scheme_name(p.weight_quant.scheme)));
  if (p.activation_quant.scheme != want_a)
    return Support::no("activation quant must be " + std::string(scheme_name(want_a)) +
                       ", got " + std::string(scheme_name(p.activation_quant.scheme)));
  return detail::grouped_experts_layer_support(p, fp8 ? 128 : 8);
}

Experts::WorkspaceShapes GroupedGemmExperts::workspace_shapes(const MoeProblem& p) const {
  return detail::grouped_workspace_shapes(p, layout13(type_, p).total,
                                          2 * p.layer.intermediate_size);
}

void GroupedGemmExperts::prepare_weights(const MoeProblem& p, const MoeWeights& w,
                                         StreamHandle stream) {
  (void)stream;
  const bool fp8 = is_fp8(type_);
  const std::int64_t e = p.layer.num_experts, h = p.layer.hidden_size,
                     i = p.layer.intermediate_size;
  const DType vt = fp8 ? DType::kE4M3 : DType::kBF16;
  const Shape s13{e, 2 * i, h}, s2{e, h, i};
  MOEKIT_CHECK_ARG(w.w13.values.dtype() == vt && w.w13.values.shape() == s13, "weights.w13.values",
                   std::string(dtype_name(vt)) + s13.str(), w.w13.values.view().str());
  MOEKIT_CHECK_ARG(w.w2.values.dtype() == vt && w.w2.values.shape() == s2, "weights.w2.values",
                   std::string(dtype_name(vt)) + s2.str(), w.w2.values.view().str());
  State& st = *state_;
  st.problem = p;
  auto keep = [](const Tensor& t, Tensor& owned) -> const void* {
    MOEKIT_CHECK_ARG(t.view().is_contiguous(), "weights", "contiguous tensors", t.view().str());
    if (t.device().is_cuda()) return t.data();  // used in place: must outlive the experts
    owned = detail::to_device(t);
    return owned.data();
  };
  st.w13 = keep(w.w13.values, st.w13_owned);
  st.w2 = keep(w.w2.values, st.w2_owned);
  if (fp8) {
    const Shape ss13{e, (2 * i + 127) / 128, h / 128}, ss2{e, (h + 127) / 128, i / 128};
    MOEKIT_CHECK_ARG(w.w13.scales.dtype() == DType::kF32 && w.w13.scales.shape() == ss13,
                     "weights.w13.scales", "f32" + ss13.str(), w.w13.scales.view().str());
    MOEKIT_CHECK_ARG(w.w2.scales.dtype() == DType::kF32 && w.w2.scales.shape() == ss2,
                     "weights.w2.scales", "f32" + ss2.str(), w.w2.scales.view().str());
    st.w13_scales = static_cast<const float*>(keep(w.w13.scales, st.w13_scales_owned));
    st.w2_scales = static_cast<const float*>(keep(w.w2.scales, st.w2_scales_owned));
  }
  // Biases (gpt-oss): GEMM1's is added by its epilogue (decode, bf16 wgmma) or the activation
  // kernel, GEMM2's by the weighted reduce.
  st.w13_bias = detail::expert_bias_to_device(p, w.w13_bias, 2 * i, "weights.w13_bias");
  st.w2_bias = detail::expert_bias_to_device(p, w.w2_bias, h, "weights.w2_bias");
  st.prepared = true;
}

void GroupedGemmExperts::apply(const DispatchedActivations& in, const TensorView& output,
                               const TensorView& workspace13, const TensorView& workspace2,
                               StreamHandle stream) {
  State& st = *state_;
  MOEKIT_CHECK(st.prepared, name(), ": apply() before prepare_weights()");
  const bool fp8 = is_fp8(type_);
  const MoeProblem& p = st.problem;
  const int e = p.layer.num_experts, k = p.layer.routing.top_k;
  const std::int64_t h = p.layer.hidden_size, i = p.layer.intermediate_size;
  const std::int64_t m = in.num_tokens, rows = m * k;
  const auto l = layout13(type_, p);
  detail::check_grouped_apply(p, in, output, workspace13, l.total, workspace2, 2 * i, "[M*k, 2I]");
  const DType vt = fp8 ? DType::kE4M3 : DType::kBF16;
  const bool f32_in = takes_f32_input(type_, p);
  MOEKIT_CHECK_ARG((in.a1q.values.dtype == vt || (f32_in && in.a1q.values.dtype == DType::kF32)) &&
                       in.a1q.values.numel() >= m * h,
                   "in.a1q.values",
                   std::string(dtype_name(vt)) + " [M, H]" +
                       (f32_in ? " (or f32: router weight on the input)" : ""),
                   in.a1q.values.str());
  if (fp8)
    MOEKIT_CHECK_ARG(in.a1q.scales.dtype == DType::kF32 && in.a1q.scales.numel() >= m * (h / 128),
                     "in.a1q.scales", "f32 [M, H/128] (1x128 groups)", in.a1q.scales.str());
  if (m == 0) return;

  auto* offsets = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.offsets));
  auto* sorted = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.sorted_ids));
  auto* prow = reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.permuted_row));
  const std::int32_t* used_rows = offsets + e;
  // The decode config (bf16, few rows) gathers GEMM1's rows itself (row_index) and runs the
  // activation (+ GEMM1's bias) in GEMM1's epilogue: no gather and no activation kernel. The
  // wgmma config gathers GEMM1's rows itself too on its 160r256 tile (wgmma_gathers_rows: cp.async
  // by two producer warps; fp8 would take the rows' scales by the same index), and for bf16 runs
  // the activation in GEMM1's epilogue. The CUTLASS configs take gathered rows; they, and fp8 on
  // wgmma, run the activation kernel between the GEMMs. (fp8 has no decode kernel: a forced
  // decode config fails in grouped_gemm, naming the config.)
  const gemm::GroupedGemmConfig config =
      gemm::resolve_grouped_gemm_config(type_, st.config, e, rows);
  const bool decode = !fp8 && config == gemm::GroupedGemmConfig::kDecode;
  const bool wgmma = config == gemm::GroupedGemmConfig::kWgmma;
  const bool gated_gemm1 = decode || (!fp8 && wgmma);
  const bool indexed =  // GEMM1 takes row_index
      decode || (wgmma && wgmma_gathers_rows(st.wgmma_row_gather, fp8, e, rows));
  auto* tokens =
      indexed ? reinterpret_cast<std::int32_t*>(ws_at(workspace13, l.sorted_tokens)) : nullptr;
  // Decode sizes on the decode config: the permutation in both GEMMs, the reduce in GEMM2's
  // epilogue (two kernels; gemm::DecodeRouting).
  const bool fused = decode && rows <= detail::decode_routing_max_rows();
  const auto* topk_ids = in.topk_ids.ptr<const std::int32_t>();
  auto* counters = reinterpret_cast<int*>(ws_at(workspace13, l.counters));
  if (!fused)
    detail::permute_by_expert(topk_ids, rows, e, offsets, sorted, prow, stream, k, tokens,
                              ws_at(workspace13, l.permute_scratch));
  const std::int64_t elem = fp8 ? 1 : 2;
  const void* a_src = f32_in ? detail::round_input_rows(in.a1q.values, m, h,
                                                        ws_at(workspace13, l.a_rounded), stream)
                             : in.a1q.values.data;
  if (!indexed) {
    detail::gather_rows(a_src, h * elem, sorted, k, rows, used_rows, ws_at(workspace13, l.a),
                        stream);
    if (fp8)
      detail::gather_rows(in.a1q.scales.data, (h / 128) * 4, sorted, k, rows, used_rows,
                          ws_at(workspace13, l.a_scales), stream);
  }

  gemm::GatedActivationArgs act;
  act.kind = p.layer.activation.kind;
  act.swiglu_alpha = p.layer.activation.swiglu_alpha;
  act.swiglu_limit = p.layer.activation.swiglu_limit;
  act.bias = st.w13_bias.defined() ? st.w13_bias.ptr<float>() : nullptr;
  act.expert_offsets = offsets;
  act.num_experts = e;

  gemm::GroupedGemmArgs g1;
  g1.num_experts = e;
  g1.n = 2 * i;
  g1.k = h;
  g1.max_rows = rows;
  g1.expert_offsets = offsets;
  g1.a = indexed ? a_src : ws_at(workspace13, l.a);
  g1.lda = indexed ? h : 0;
  g1.row_index = indexed ? tokens : nullptr;
  g1.gated = gated_gemm1 ? &act : nullptr;
  g1.b = st.w13;
  g1.d = gated_gemm1 ? ws_at(workspace13, l.act) : workspace2.data;
  g1.a_scales = !fp8    ? nullptr
                 : indexed ? in.a1q.scales.ptr<const float>()
                           : reinterpret_cast<const float*>(ws_at(workspace13, l.a_scales));
  g1.b_scales = st.w13_scales;
  g1.workspace = ws_at(workspace13, l.gemm_ws);
  g1.workspace_bytes = gemm::grouped_gemm_workspace_bytes(type_, e);
  g1.stream = stream;
  g1.config = st.config;
  // PDL (the decode config; the others ignore it): GEMM1's previous kernel is the row gather or,
  // decode, the rounding of f32 input rows (a kernel only when the input is f32); GEMM2's is the
  // activation (decode: GEMM1). None of those writes the offsets or the weights. Right after the
  // permutation, which writes the offsets, GEMM1 must not overlap.
  const bool rounded = a_src != in.a1q.values.data;
  g1.overlap_previous = !decode || rounded;
  if (fused) {
    g1.expert_offsets = nullptr;
    g1.row_index = nullptr;
    g1.routing = gemm::decode_routing_gemm1(topk_ids, k, counters, h);
  }
  gemm::grouped_gemm(type_, g1);

  if (!gated_gemm1) {
    if (fp8) {
      gemm::gated_activation_quant_fp8_block(
          workspace2.data, ws_at(workspace13, l.act),
          reinterpret_cast<float*>(ws_at(workspace13, l.act_scales)), rows, i, used_rows, act,
          stream);
    } else {
      gemm::gated_activation_bf16(workspace2.data, ws_at(workspace13, l.act), rows, i, used_rows,
                                  act, stream);
    }
  }

  gemm::GroupedGemmArgs g2 = g1;
  g2.n = h;
  g2.k = i;
  g2.lda = 0;
  g2.row_index = nullptr;
  g2.gated = nullptr;
  g2.overlap_previous = true;
  g2.a = ws_at(workspace13, l.act);
  g2.b = st.w2;
  g2.d = ws_at(workspace13, l.out2);
  g2.a_scales = fp8 ? reinterpret_cast<const float*>(ws_at(workspace13, l.act_scales)) : nullptr;
  g2.b_scales = st.w2_scales;
  // Llama4 applies the router weight on the input: the prepare already folded it in.
  const bool weights_on_input = p.apply_router_weight_on_input();
  const float* topk_weights = weights_on_input ? nullptr : in.topk_weights.ptr<const float>();
  const float* bias2 = st.w2_bias.defined() ? st.w2_bias.ptr<float>() : nullptr;
  if (fused)
    g2.routing =
        gemm::decode_routing_gemm2(topk_ids, k, output.data, topk_weights, bias2, counters);
  gemm::grouped_gemm(type_, g2);
  if (!fused)
    detail::weighted_reduce_bf16(ws_at(workspace13, l.out2), prow, topk_weights, m, k, h,
                                 output.data, stream, bias2, topk_ids);
}

namespace detail {

Tensor expert_bias_to_device(const MoeProblem& problem, const Tensor& b, std::int64_t n,
                             const char* what) {
  if (!problem.layer.has_bias) return Tensor();
  const std::int64_t e = problem.layer.num_experts;
  MOEKIT_CHECK_ARG(b.dtype() == DType::kF32 && b.numel() == e * n, what,
                   "f32 [E, " + std::to_string(n) + "]", b.view().str());
  Tensor out(DType::kF32, Shape{e, n}, Device::cuda(0));
  copy(out, b);
  return out;
}

const void* round_input_rows(const TensorView& values, std::int64_t m, std::int64_t h,
                             void* scratch, StreamHandle stream) {
  if (values.dtype == DType::kBF16) return values.data;
  MOEKIT_CHECK_ARG(values.dtype == DType::kF32 && values.numel() >= m * h, "in.a1q.values",
                   "bf16 or f32 [M, H]", values.str());
  // RN-even with float_to_bf16 (codecs.hpp), the same rounding as the CPU's convert_rows.
  cuda::convert_rows(TensorView(values.data, DType::kF32, Shape{m, h}, values.device),
                     TensorView(scratch, DType::kBF16, Shape{m, h}, values.device), stream);
  return scratch;
}

}  // namespace detail

std::unique_ptr<ModularExperts> make_bf16_grouped_experts(const MoeProblem& problem) {
  return std::make_unique<GroupedGemmExperts>(problem, gemm::GroupedGemmType::kBF16);
}

}  // namespace moekit::cuda
