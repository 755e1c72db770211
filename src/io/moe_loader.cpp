// load_moe_layer: tensor naming detection, per-expert loaders (BF16, NVFP4 ModelOpt /
// compressed-tensors, FP8 block) and the gpt-oss fused MXFP4 loader.
#include "moekit/io/moe_loader.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "io/load_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/weights/prepare.hpp"

namespace moekit::io {

namespace {

using detail::fail_tensor;

// How a checkpoint stores the experts of one layer.
enum class ExpertLayout : std::uint8_t {
  kPerExpert,    // P.experts.{e}.{w1,w3,w2 | gate_proj,up_proj,down_proj}.<suffix>
  kFusedMxfp4,   // gpt-oss MXFP4: P.experts.{gate_up,down}_proj_{blocks,scales,bias}
  kFusedGptOss,  // gpt-oss bf16 as transformers writes it: gate_up_proj [E, H, 2I] (gate/up
                 // columns interleaved) (+ gate_up_proj_bias [E, 2I]), down_proj [E, I, H]
                 // (+ down_proj_bias [E, H])
  kFusedHalves,  // transformers 5 fused experts of other models (save_original_format=False):
                 // gate_up_proj [E, 2I, H] = [gate; up], down_proj [E, H, I]
};

struct Naming {
  std::string prefix;                 // model.layers.{L}.mlp | model.layers.{L}.block_sparse_moe
  std::string router;                 // prefix + ".gate" | prefix + ".router"
  ExpertLayout layout = ExpertLayout::kPerExpert;
  std::array<const char*, 3> proj{};  // gate, up, down projection names (per-expert layout)
};

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer); }

const char* value_suffix(CheckpointFormat f) {
  return f == CheckpointFormat::kCompressedTensorsNVFP4 ? "weight_packed" : "weight";
}

// Finds the router of layer L; nullopt when the layer has no MoE block.
std::optional<Naming> find_router(const Checkpoint& ck, int layer) {
  const std::string base = layer_prefix(layer);
  for (const char* block : {".block_sparse_moe", ".mlp"}) {
    for (const char* router : {".gate", ".router"}) {
      if (ck.contains(base + block + router + ".weight")) {
        Naming n;
        n.prefix = base + block;
        n.router = n.prefix + router;
        return n;
      }
    }
  }
  return std::nullopt;
}

Naming detect_naming(const Checkpoint& ck, int layer, CheckpointFormat format,
                     const std::string& model_type) {
  std::optional<Naming> found = find_router(ck, layer);
  if (!found) {
    const std::string b = layer_prefix(layer);
    MOEKIT_FAIL("checkpoint '", ck.dir(), "': layer ", layer, ": expected an MoE block, got no ",
                "router tensor (looked for ", b, ".block_sparse_moe.gate.weight, ", b,
                ".mlp.gate.weight, ", b, ".mlp.router.weight)");
  }
  Naming n = *found;
  const std::string e0 = n.prefix + ".experts.0.";
  const std::string suffix = value_suffix(format);
  if (ck.contains(n.prefix + ".experts.gate_up_proj_blocks")) {
    n.layout = ExpertLayout::kFusedMxfp4;
  } else if (ck.contains(e0 + "w1." + suffix)) {
    n.proj = {"w1", "w3", "w2"};
  } else if (ck.contains(e0 + "gate_proj." + suffix)) {
    n.proj = {"gate_proj", "up_proj", "down_proj"};
  } else if (ck.contains(n.prefix + ".experts.gate_up_proj")) {
    n.layout = model_type == "gpt_oss" ? ExpertLayout::kFusedGptOss : ExpertLayout::kFusedHalves;
    if (format != CheckpointFormat::kBF16)
      MOEKIT_FAIL("checkpoint '", ck.dir(), "': tensor '", n.prefix, ".experts.gate_up_proj': ",
                  "expected ", format == CheckpointFormat::kMXFP4
                                   ? "MXFP4 blocks (gate_up_proj_blocks)"
                                   : "per-expert quantized tensors",
                  " for format ", checkpoint_format_name(format),
                  ", got unquantized fused experts");
  } else {
    MOEKIT_FAIL("checkpoint '", ck.dir(), "': layer ", layer, ": expected expert tensors for ",
                "format ", checkpoint_format_name(format), ", got none (looked for ", e0, "w1.",
                suffix, ", ", e0, "gate_proj.", suffix, ", ", n.prefix,
                ".experts.gate_up_proj_blocks, ", n.prefix, ".experts.gate_up_proj)");
  }
  const bool mxfp4_layout = n.layout == ExpertLayout::kFusedMxfp4;
  if (mxfp4_layout != (format == CheckpointFormat::kMXFP4))
    MOEKIT_FAIL("checkpoint '", ck.dir(), "': layer ", layer, ": expected ",
                format == CheckpointFormat::kMXFP4 ? "fused MXFP4 experts (gate_up_proj_blocks)"
                                                   : "per-expert or fused unquantized tensors",
                " for format ", checkpoint_format_name(format), ", got the other layout");
  return n;
}

QuantConfig quant_of(CheckpointFormat f) {
  QuantConfig q;
  switch (f) {
    case CheckpointFormat::kBF16:
      q.scheme = QuantScheme::kBF16;
      break;
    case CheckpointFormat::kModelOptNVFP4:
    case CheckpointFormat::kCompressedTensorsNVFP4:
      q.scheme = QuantScheme::kNVFP4;
      break;
    case CheckpointFormat::kMXFP4:
      q.scheme = QuantScheme::kMXFP4;
      break;
    case CheckpointFormat::kFP8Block:
      q.scheme = QuantScheme::kFP8Block128x128;
      break;
  }
  return q;
}

QuantizedTensor allocate(const Shape& shape, const QuantConfig& q) {
  QuantShapes s = infer_quant_shapes(shape, q);
  QuantizedTensor t;
  t.config = q;
  t.values = Tensor(s.value_dtype, s.values);
  if (s.scales.rank() > 0) t.scales = Tensor(s.scale_dtype, s.scales);
  if (s.has_global_scale) t.global_scale = Tensor(DType::kF32, s.global_scale);
  return t;
}

// Copies a [rows, row_bytes] checkpoint matrix into rows [row0, row0 + rows) of matrix e of a
// batched [E, R, row_bytes] destination.
void put_rows(const TensorView& src, const Tensor& dst, std::int64_t e, std::int64_t row0) {
  const std::int64_t r_total = dst.shape()[1];
  const std::size_t row_bytes = dst.nbytes() / static_cast<std::size_t>(dst.shape()[0] * r_total);
  auto* d = static_cast<std::uint8_t*>(dst.data()) +
            static_cast<std::size_t>(e * r_total + row0) * row_bytes;
  if (src.nbytes()) std::memcpy(d, src.data, src.nbytes());
}

// Element i of an f32 / bf16 / f16 view (possibly unaligned) as bf16 bits: bf16 copies, the others
// round to nearest even (a transformers model saved in float32 loads as the bf16 scheme).
std::uint16_t bf16_bits_at(const TensorView& v, std::int64_t i) {
  const auto* p = static_cast<const std::uint8_t*>(v.data);
  if (v.dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return float_to_bf16(f);
  }
  std::uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  return v.dtype == DType::kBF16 ? b : float_to_bf16(detail::half_bits_to_float(b));
}

// put_rows for bf16 destinations from f32 / bf16 / f16 checkpoint matrices [rows, K].
void put_rows_bf16(const TensorView& src, const Tensor& dst, std::int64_t e, std::int64_t row0) {
  const std::int64_t r_total = dst.shape()[1], k = dst.shape()[2];
  auto* d = dst.ptr<std::uint16_t>() + (e * r_total + row0) * k;
  const std::int64_t n = src.numel();
  for (std::int64_t i = 0; i < n; ++i) d[i] = bf16_bits_at(src, i);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Calibrated input scales as found in the checkpoint (raw values, NaN = absent).
struct InputScales {
  std::vector<std::string> names13, names2;  // [E*2], [E]
  std::vector<float> raw13, raw2;
};

// Resolves raw checkpoint input scales into moekit's a13_scale / a2_scale (ENCODE, [E]).
Tensor resolve_input_scales(const Checkpoint& ck, const std::vector<std::string>& names,
                            const std::vector<float>& raw, bool raw_is_decode, int num_experts,
                            InputScalePolicy policy) {
  std::size_t present = 0;
  for (float v : raw) present += !std::isnan(v);
  if (present == 0 || policy == InputScalePolicy::kIgnore) return {};
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (std::isnan(raw[i]))
      fail_tensor(ck, names[i], "", "present (other experts have it)", "missing");
    if (!(std::isfinite(raw[i]) && raw[i] > 0.0f))
      fail_tensor(ck, names[i], "value", "a finite positive scale", raw[i]);
  }
  float chosen = raw[0];
  for (std::size_t i = 1; i < raw.size(); ++i) {
    if (policy == InputScalePolicy::kRequireEqual && !same_bits(raw[i], raw[0]))
      fail_tensor(ck, names[i], "value",
                  "equal to '" + names[0] + "' (" + std::to_string(raw[0]) +
                      ") since moekit uses one input scale per GEMM (load with "
                      "InputScalePolicy::kMax / --input-scales max to take the largest decode "
                      "scale, as vLLM does)",
                  raw[i]);
    // Largest decode scale == smallest encode scale.
    if (raw_is_decode ? raw[i] > chosen : raw[i] < chosen) chosen = raw[i];
  }
  Tensor out(DType::kF32, Shape{num_experts});
  const float encode = raw_is_decode ? 1.0f / chosen : chosen;
  for (int e = 0; e < num_experts; ++e) out.ptr<float>()[e] = encode;
  return out;
}

void load_per_expert(const Checkpoint& ck, const Naming& nm, CheckpointFormat format,
                     const MoeLayerConfig& cfg, const MoeLoadOptions& options, MoeWeights& w) {
  const int num_e = cfg.num_experts;
  const std::int64_t h = cfg.hidden_size, i = cfg.intermediate_size;
  const bool nvfp4 = format == CheckpointFormat::kModelOptNVFP4 ||
                     format == CheckpointFormat::kCompressedTensorsNVFP4;
  const bool modelopt = format == CheckpointFormat::kModelOptNVFP4;
  if (format == CheckpointFormat::kFP8Block && i % 128 != 0)
    MOEKIT_FAIL("checkpoint '", ck.dir(), "': intermediate_size: expected a multiple of 128 ",
                "(gate and up 128x128 scale tiles are stacked into one w13 matrix), got ", i);
  w.w13 = allocate(Shape{num_e, 2 * i, h}, w.quant);
  w.w2 = allocate(Shape{num_e, h, i}, w.quant);
  InputScales in;
  in.raw13.assign(static_cast<std::size_t>(2 * num_e), NAN);
  in.raw2.assign(static_cast<std::size_t>(num_e), NAN);
  in.names13.resize(in.raw13.size());
  in.names2.resize(in.raw2.size());
  for (int e = 0; e < num_e; ++e) {
    float gate_global = 0.0f;
    std::string gate_global_name;
    for (int j = 0; j < 3; ++j) {
      const std::string base = nm.prefix + ".experts." + std::to_string(e) + "." + nm.proj[j];
      const std::int64_t n = j < 2 ? i : h, k = j < 2 ? h : i;
      QuantizedTensor& dst = j < 2 ? w.w13 : w.w2;
      const std::int64_t row0 = j == 1 ? i : 0;
      if (format == CheckpointFormat::kBF16) {
        put_rows_bf16(detail::require_tensor(ck, base + ".weight",
                                             {DType::kBF16, DType::kF32, DType::kF16}, Shape{n, k}),
                      dst.values, e, row0);
      } else if (format == CheckpointFormat::kFP8Block) {
        put_rows(detail::require_tensor(ck, base + ".weight", {DType::kE4M3}, Shape{n, k}),
                 dst.values, e, row0);
        put_rows(detail::require_tensor(ck, base + ".weight_scale_inv", {DType::kF32},
                                        Shape{(n + 127) / 128, (k + 127) / 128}),
                 dst.scales, e, row0 / 128);
      } else {  // NVFP4
        put_rows(detail::require_tensor(ck, base + "." + value_suffix(format),
                                        {DType::kU8, DType::kE2M1x2}, Shape{n, k / 2}),
                 dst.values, e, row0);
        put_rows(
            detail::require_tensor(ck, base + ".weight_scale", {DType::kE4M3}, Shape{n, k / 16}),
            dst.scales, e, row0);
        const std::string gname = base + (modelopt ? ".weight_scale_2" : ".weight_global_scale");
        const float raw = detail::read_scalar(ck, gname);
        if (!(std::isfinite(raw) && raw > 0.0f))
          fail_tensor(ck, gname, "value", "a finite positive scale", raw);
        if (j == 0) {
          gate_global = raw;
          gate_global_name = gname;
        } else if (j == 1 && !same_bits(raw, gate_global)) {
          fail_tensor(ck, gname, "value",
                      "equal to '" + gate_global_name + "' (" + std::to_string(gate_global) +
                          ": gate and up share one global scale in moekit's w13)",
                      raw);
        }
        // moekit stores ENCODE global scales; ModelOpt's weight_scale_2 is the DECODE scale.
        if (j != 1) dst.global_scale.ptr<float>()[e] = modelopt ? 1.0f / raw : raw;
        const std::string iname = base + (modelopt ? ".input_scale" : ".input_global_scale");
        float ival = NAN;
        if (ck.contains(iname)) ival = detail::read_scalar(ck, iname);
        if (j < 2) {
          in.raw13[static_cast<std::size_t>(2 * e + j)] = ival;
          in.names13[static_cast<std::size_t>(2 * e + j)] = iname;
        } else {
          in.raw2[static_cast<std::size_t>(e)] = ival;
          in.names2[static_cast<std::size_t>(e)] = iname;
        }
      }
    }
  }
  if (nvfp4) {
    w.a13_scale =
        resolve_input_scales(ck, in.names13, in.raw13, modelopt, num_e, options.input_scales);
    w.a2_scale =
        resolve_input_scales(ck, in.names2, in.raw2, modelopt, num_e, options.input_scales);
  }
}

// Reinterprets a checkpoint view (any byte type) as `dtype` with `shape` (same byte count).
TensorView as(const TensorView& v, DType dtype, const Shape& shape) {
  return TensorView(v.data, dtype, shape);
}

void load_gpt_oss_fused(const Checkpoint& ck, const Naming& nm, const MoeLayerConfig& cfg,
                        MoeWeights& w) {
  const std::int64_t e = cfg.num_experts, h = cfg.hidden_size, i = cfg.intermediate_size;
  if (h % 32 != 0 || i % 32 != 0)
    MOEKIT_FAIL("checkpoint '", ck.dir(), "': hidden_size / intermediate_size: expected multiples ",
                "of 32 for MXFP4, got ", h, " / ", i);
  const std::string p = nm.prefix + ".experts.";
  auto blocks13 = detail::require_tensor(ck, p + "gate_up_proj_blocks", {DType::kU8},
                                         Shape{e, 2 * i, h / 32, 16});
  auto scales13 = detail::require_tensor(ck, p + "gate_up_proj_scales", {DType::kU8, DType::kE8M0},
                                         Shape{e, 2 * i, h / 32});
  auto bias13 = detail::optional_tensor(ck, p + "gate_up_proj_bias",
                                        {DType::kBF16, DType::kF32, DType::kF16}, Shape{e, 2 * i});
  auto blocks2 =
      detail::require_tensor(ck, p + "down_proj_blocks", {DType::kU8}, Shape{e, h, i / 32, 16});
  auto scales2 = detail::require_tensor(ck, p + "down_proj_scales", {DType::kU8, DType::kE8M0},
                                        Shape{e, h, i / 32});
  auto bias2 = detail::optional_tensor(ck, p + "down_proj_bias",
                                       {DType::kBF16, DType::kF32, DType::kF16}, Shape{e, h});
  if (bias13.defined() != bias2.defined())
    fail_tensor(ck, p + (bias13.defined() ? "down_proj_bias" : "gate_up_proj_bias"), "",
                "present (the other projection has a bias)", "missing");
  // The checkpoint interleaves gate (even rows) and up (odd rows); moekit holds halves.
  w.w13.config = w.w2.config = w.quant;
  // Scales stored as u8 are e8m0: 0xFF is their NaN.
  detail::check_finite(ck, p + "gate_up_proj_scales", as(scales13, DType::kE8M0, scales13.shape));
  detail::check_finite(ck, p + "down_proj_scales", as(scales2, DType::kE8M0, scales2.shape));
  w.w13.values = deinterleave_gate_up(as(blocks13, DType::kE2M1x2, Shape{e, 2 * i, h / 2}));
  w.w13.scales = deinterleave_gate_up(as(scales13, DType::kE8M0, Shape{e, 2 * i, h / 32}));
  w.w2.values = detail::clone(as(blocks2, DType::kE2M1x2, Shape{e, h, i / 2}));
  w.w2.scales = detail::clone(as(scales2, DType::kE8M0, Shape{e, h, i / 32}));
  if (bias13.defined()) {
    w.w13_bias = deinterleave_gate_up(detail::to_f32_tensor(bias13));
    w.w2_bias = detail::to_f32_tensor(bias2);
  }
}

// Unquantized fused experts (ExpertLayout::kFusedGptOss / kFusedHalves) into bf16 MoeWeights.
void load_fused_unquantized(const Checkpoint& ck, const Naming& nm, const MoeLayerConfig& cfg,
                            MoeWeights& w) {
  const std::int64_t e = cfg.num_experts, h = cfg.hidden_size, i = cfg.intermediate_size;
  const bool gpt_oss = nm.layout == ExpertLayout::kFusedGptOss;
  const std::string p = nm.prefix + ".experts.";
  const std::initializer_list<DType> floats = {DType::kBF16, DType::kF32, DType::kF16};
  // gpt-oss keeps the input dimension first ([E, K, N], x @ W); the others [E, N, K] (F.linear).
  const TensorView w13 = detail::require_tensor(ck, p + "gate_up_proj", floats,
                                                gpt_oss ? Shape{e, h, 2 * i} : Shape{e, 2 * i, h});
  const TensorView w2 = detail::require_tensor(ck, p + "down_proj", floats,
                                               gpt_oss ? Shape{e, i, h} : Shape{e, h, i});
  w.w13.config = w.w2.config = w.quant;
  w.w13.values = Tensor(DType::kBF16, Shape{e, 2 * i, h});
  w.w2.values = Tensor(DType::kBF16, Shape{e, h, i});
  // [E, A, B] source (transposed: element (x, b, a)) -> [E, A, B] bf16.
  auto convert = [](const TensorView& src, Tensor& dst, bool transposed) {
    const std::int64_t ne = dst.shape()[0], a = dst.shape()[1], b = dst.shape()[2];
    auto* d = dst.ptr<std::uint16_t>();
    for (std::int64_t x = 0; x < ne; ++x)
      for (std::int64_t r = 0; r < a; ++r)
        for (std::int64_t c = 0; c < b; ++c)
          d[(x * a + r) * b + c] =
              bf16_bits_at(src, transposed ? (x * b + c) * a + r : (x * a + r) * b + c);
  };
  convert(w13, w.w13.values, gpt_oss);
  convert(w2, w.w2.values, gpt_oss);
  const TensorView b13 = detail::optional_tensor(ck, p + "gate_up_proj_bias", floats, Shape{e, 2 * i});
  const TensorView b2 = detail::optional_tensor(ck, p + "down_proj_bias", floats, Shape{e, h});
  if (b13.defined() != b2.defined())
    fail_tensor(ck, p + (b13.defined() ? "down_proj_bias" : "gate_up_proj_bias"), "",
                "present (the other projection has a bias)", "missing");
  if (b13.defined()) {
    w.w13_bias = detail::to_f32_tensor(b13);
    w.w2_bias = detail::to_f32_tensor(b2);
  }
  if (gpt_oss) {  // gate at even, up at odd columns of gate_up_proj (and its bias): to halves
    w.w13.values = deinterleave_gate_up(w.w13.values);
    if (w.w13_bias.defined()) w.w13_bias = deinterleave_gate_up(w.w13_bias);
  }
}

void load_router(const Checkpoint& ck, const Naming& nm, MoeLayerConfig& cfg, RouterWeights& r) {
  const std::int64_t e = cfg.num_experts, h = cfg.hidden_size;
  auto weight = detail::require_tensor(ck, nm.router + ".weight",
                                       {DType::kBF16, DType::kF32, DType::kF16}, Shape{e, h});
  r.weight = weight.dtype == DType::kF16 ? detail::to_f32_tensor(weight) : detail::clone(weight);
  auto bias = detail::optional_tensor(ck, nm.router + ".bias",
                                      {DType::kBF16, DType::kF32, DType::kF16}, Shape{e});
  if (bias.defined()) r.bias = detail::to_f32_tensor(bias);
  auto corr = detail::optional_tensor(ck, nm.router + ".e_score_correction_bias",
                                      {DType::kF32, DType::kBF16, DType::kF16}, Shape{e});
  if (corr.defined()) r.correction_bias = detail::to_f32_tensor(corr);
  if (routing_uses_bias(cfg.routing.method) && !corr.defined())
    fail_tensor(ck, nm.router + ".e_score_correction_bias", "",
                "present (routing " + std::string(routing_method_name(cfg.routing.method)) +
                    " uses a correction bias)",
                "missing");
  cfg.has_router_bias = r.bias.defined();
}

}  // namespace

std::vector<int> moe_layer_indices(const Checkpoint& checkpoint, const CheckpointInfo& info) {
  std::vector<int> out;
  for (int l = 0; l < info.num_hidden_layers; ++l)
    if (find_router(checkpoint, l)) out.push_back(l);
  return out;
}

MoeLayer load_moe_layer(const Checkpoint& ck, const CheckpointInfo& info, int layer,
                        const MoeLoadOptions& options) {
  MOEKIT_CHECK_ARG(layer >= 0 && layer < info.num_hidden_layers, "layer",
                   "in [0, " + std::to_string(info.num_hidden_layers) + ")", layer);
  const Naming nm = detect_naming(ck, layer, info.format, info.model_type);
  MoeLayer out;
  out.layer_index = layer;
  out.format = info.format;
  out.config = info.layer;
  MoeWeights& w = out.weights;
  w.num_experts = out.config.num_experts;
  w.hidden_size = out.config.hidden_size;
  w.intermediate_size = out.config.intermediate_size;
  w.quant = quant_of(info.format);
  w.gated = is_gated(out.config.activation.kind);
  MOEKIT_CHECK(w.gated, "checkpoint '", ck.dir(), "': activation: expected a gated activation ",
               "(gate and up projections), got ", activation_name(out.config.activation.kind));
  switch (nm.layout) {
    case ExpertLayout::kFusedMxfp4:
      load_gpt_oss_fused(ck, nm, out.config, w);
      break;
    case ExpertLayout::kFusedGptOss:
    case ExpertLayout::kFusedHalves:
      load_fused_unquantized(ck, nm, out.config, w);
      break;
    case ExpertLayout::kPerExpert:
      load_per_expert(ck, nm, info.format, out.config, options, w);
      break;
  }
  out.config.has_bias = w.w13_bias.defined();
  load_router(ck, nm, out.config, out.router);
  try {
    w.validate();
  } catch (const Error& e) {
    MOEKIT_FAIL("checkpoint '", ck.dir(), "': layer ", layer,
                ": loaded weights are inconsistent: ", e.what());
  }
  return out;
}

MoeLayer load_moe_layer(const std::string& dir, int layer, const MoeLoadOptions& options) {
  CheckpointInfo info = read_checkpoint_info(dir);
  Checkpoint ck = Checkpoint::open(dir);
  return load_moe_layer(ck, info, layer, options);
}

}  // namespace moekit::io
