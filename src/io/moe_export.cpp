// export_moe_layer and quantize_for_checkpoint: MoeWeights -> checkpoint tensors of a format.
#include "moekit/io/moe_export.hpp"

#include <cmath>
#include <cstring>

#include "io/load_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/weights/prepare.hpp"

namespace moekit::io {

namespace {

// Rows [row0, row0 + rows) of matrix e of a batched [E, R, ...] tensor, as an owning
// [rows, ...] tensor (trailing dims kept).
Tensor slice_rows(const Tensor& t, std::int64_t e, std::int64_t row0, std::int64_t rows) {
  std::vector<std::int64_t> dims = t.shape().vec();
  const std::int64_t r_total = dims[1];
  const std::size_t row_bytes =
      t.nbytes() / static_cast<std::size_t>(dims[0] * (r_total ? r_total : 1));
  dims.erase(dims.begin());
  dims[0] = rows;
  Tensor out(t.dtype(), Shape(dims));
  const auto* src = static_cast<const std::uint8_t*>(t.data()) +
                    static_cast<std::size_t>(e * r_total + row0) * row_bytes;
  if (out.nbytes()) std::memcpy(out.data(), src, out.nbytes());
  return out;
}

Tensor scalar_f32(float v, bool rank1) {
  Tensor t(DType::kF32, rank1 ? Shape{1} : Shape{});
  t.ptr<float>()[0] = v;
  return t;
}

// A DECODE scale d with fl(1 / d) == encode bit for bit (what the loader computes).
float decode_for(float encode, const std::string& name) {
  MOEKIT_CHECK(std::isfinite(encode) && encode > 0.0f, "export_moe_layer: tensor '", name,
               "': expected a finite positive encode scale, got ", encode);
  const float d0 = 1.0f / encode;
  float lo = d0, hi = d0;
  for (int step = 0; step < 4; ++step) {
    for (float d : {lo, hi}) {
      const float back = 1.0f / d;
      if (std::memcmp(&back, &encode, sizeof(float)) == 0) return d;
    }
    lo = std::nextafter(lo, 0.0f);
    hi = std::nextafter(hi, INFINITY);
  }
  MOEKIT_FAIL("export_moe_layer: tensor '", name, "': expected an encode scale that is the fp32 ",
              "reciprocal of some decode scale, got ", encode,
              " (quantize with gs = 1 / decode, as quantize_for_checkpoint does)");
}

QuantScheme scheme_of(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kBF16:
      return QuantScheme::kBF16;
    case CheckpointFormat::kModelOptNVFP4:
    case CheckpointFormat::kCompressedTensorsNVFP4:
      return QuantScheme::kNVFP4;
    case CheckpointFormat::kMXFP4:
      return QuantScheme::kMXFP4;
    case CheckpointFormat::kFP8Block:
      return QuantScheme::kFP8Block128x128;
  }
  return QuantScheme::kBF16;
}

}  // namespace

std::vector<NamedTensor> named_views(const std::vector<ExportedTensor>& tensors) {
  std::vector<NamedTensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back({t.name, t.tensor.view(), t.dtype});
  return out;
}

std::vector<ExportedTensor> export_moe_layer(const MoeWeights& w, const RouterWeights& router,
                                             CheckpointFormat format, int layer,
                                             ExpertNaming naming) {
  w.validate();
  MOEKIT_CHECK_ARG(w.device().is_host(), "weights device", "host", w.device().str());
  MOEKIT_CHECK_ARG(w.gated, "weights.gated", "true (gate and up projections)", "false");
  MOEKIT_CHECK_ARG(w.quant.scheme == scheme_of(format), "weights.quant.scheme",
                   scheme_name(scheme_of(format)), scheme_name(w.quant.scheme));
  MOEKIT_CHECK_ARG(!has_block_scales(w.quant.scheme) || w.quant.layout == ScaleLayout::kLinear,
                   "weights.quant.layout", "linear", layout_name(w.quant.layout));
  const std::int64_t num_e = w.num_experts, h = w.hidden_size, i = w.intermediate_size;
  const std::string prefix = "model.layers." + std::to_string(layer) +
                             (naming == ExpertNaming::kMixtral ? ".block_sparse_moe" : ".mlp");
  std::vector<ExportedTensor> out;

  if (format == CheckpointFormat::kMXFP4) {
    const std::string p = prefix + ".experts.";
    // moekit halves -> gpt-oss even/odd interleave; 16-byte blocks of 32 values along K.
    Tensor v13 = interleave_gate_up(w.w13.values);
    Tensor s13 = interleave_gate_up(w.w13.scales);
    TensorView b13(v13.data(), DType::kU8, Shape{num_e, 2 * i, h / 32, 16});
    out.push_back({p + "gate_up_proj_blocks", detail::clone(b13), "U8"});
    out.push_back({p + "gate_up_proj_scales", std::move(s13), "U8"});
    TensorView b2(w.w2.values.data(), DType::kU8, Shape{num_e, h, i / 32, 16});
    out.push_back({p + "down_proj_blocks", detail::clone(b2), "U8"});
    out.push_back({p + "down_proj_scales", detail::clone(w.w2.scales), "U8"});
    if (w.w13_bias.defined()) {
      out.push_back({p + "gate_up_proj_bias", interleave_gate_up(w.w13_bias), ""});
      out.push_back({p + "down_proj_bias", detail::clone(w.w2_bias), ""});
    }
  } else {
    MOEKIT_CHECK_ARG(!w.w13_bias.defined(), "weights.w13_bias",
                     "absent (per-expert checkpoint formats have no expert biases)", "present");
    MOEKIT_CHECK_ARG(format != CheckpointFormat::kFP8Block || i % 128 == 0,
                     "weights.intermediate_size", "a multiple of 128 for fp8_block", i);
    const bool modelopt = format == CheckpointFormat::kModelOptNVFP4;
    const char* const mixtral[] = {"w1", "w3", "w2"};
    const char* const qwen[] = {"gate_proj", "up_proj", "down_proj"};
    for (std::int64_t e = 0; e < num_e; ++e) {
      for (int j = 0; j < 3; ++j) {
        const std::string base = prefix + ".experts." + std::to_string(e) + "." +
                                 (naming == ExpertNaming::kMixtral ? mixtral[j] : qwen[j]);
        const QuantizedTensor& q = j < 2 ? w.w13 : w.w2;
        const std::int64_t n = j < 2 ? i : h, row0 = j == 1 ? i : 0;
        Tensor values = slice_rows(q.values, e, row0, n);
        if (format == CheckpointFormat::kBF16) {
          out.push_back({base + ".weight", std::move(values), ""});
        } else if (format == CheckpointFormat::kFP8Block) {
          out.push_back({base + ".weight", std::move(values), ""});
          out.push_back({base + ".weight_scale_inv",
                         slice_rows(q.scales, e, row0 / 128, n / 128 + (n % 128 != 0)), ""});
        } else {  // NVFP4
          out.push_back(
              {base + (modelopt ? ".weight" : ".weight_packed"), std::move(values), "U8"});
          out.push_back({base + ".weight_scale", slice_rows(q.scales, e, row0, n), ""});
          const float gs = q.global_scale.ptr<const float>()[e];
          if (modelopt)
            out.push_back({base + ".weight_scale_2",
                           scalar_f32(decode_for(gs, base + ".weight_scale_2"), false), ""});
          else
            out.push_back({base + ".weight_global_scale", scalar_f32(gs, true), ""});
          const Tensor& a = j < 2 ? w.a13_scale : w.a2_scale;
          if (a.defined()) {
            const float enc = a.ptr<const float>()[e];
            if (modelopt)
              out.push_back({base + ".input_scale",
                             scalar_f32(decode_for(enc, base + ".input_scale"), false), ""});
            else
              out.push_back({base + ".input_global_scale", scalar_f32(enc, true), ""});
          }
        }
      }
    }
  }

  const std::string r = prefix + (naming == ExpertNaming::kGptOss ? ".router" : ".gate");
  MOEKIT_CHECK_ARG(router.weight.defined(), "router.weight", "present", "missing");
  out.push_back({r + ".weight", detail::clone(router.weight), ""});
  if (router.bias.defined()) out.push_back({r + ".bias", detail::clone(router.bias), ""});
  if (router.correction_bias.defined())
    out.push_back({r + ".e_score_correction_bias", detail::clone(router.correction_bias), ""});
  return out;
}

MoeWeights quantize_for_checkpoint(const MoeWeights& master, CheckpointFormat format,
                                   const InputAmax* input_amax) {
  master.validate();
  MOEKIT_CHECK_ARG(master.quant.scheme == QuantScheme::kBF16, "master.quant.scheme", "bf16",
                   scheme_name(master.quant.scheme));
  MoeWeights out;
  out.num_experts = master.num_experts;
  out.hidden_size = master.hidden_size;
  out.intermediate_size = master.intermediate_size;
  out.gated = master.gated;
  out.quant.scheme = scheme_of(format);
  out.quant.layout = ScaleLayout::kLinear;
  out.quant.rule = ScaleRule::kRceil;
  if (master.w13_bias.defined()) out.w13_bias = detail::clone(master.w13_bias);
  if (master.w2_bias.defined()) out.w2_bias = detail::clone(master.w2_bias);
  if (format == CheckpointFormat::kBF16) {
    out.w13.config = out.w2.config = out.quant;
    out.w13.values = detail::clone(master.w13.values);
    out.w2.values = detail::clone(master.w2.values);
    return out;
  }
  const bool modelopt = format == CheckpointFormat::kModelOptNVFP4;
  auto quantize_batch = [&](const Tensor& x) {
    if (!modelopt) return quantize(x.view(), out.quant);
    // ModelOpt: weight_scale_2 = amax / 2688 per expert, encode gs = 1 / weight_scale_2.
    const std::int64_t b = x.shape()[0], per = x.numel() / (b ? b : 1);
    Tensor gs(DType::kF32, Shape{b});
    std::vector<float> row(static_cast<std::size_t>(per));
    for (std::int64_t e = 0; e < b; ++e) {
      TensorView m(static_cast<std::uint8_t*>(x.data()) + e * per * 2, DType::kBF16, Shape{per});
      detail::to_f32(m, row.data());
      float amax = 0.0f;
      for (float v : row) amax = std::fmax(amax, std::fabs(v));
      const float decode = amax > 0.0f ? amax / 2688.0f : 1.0f;
      gs.ptr<float>()[e] = 1.0f / decode;
    }
    return quantize(x.view(), out.quant, gs.view());
  };
  out.w13 = quantize_batch(master.w13.values);
  out.w2 = quantize_batch(master.w2.values);
  if (input_amax && (format == CheckpointFormat::kModelOptNVFP4 ||
                     format == CheckpointFormat::kCompressedTensorsNVFP4)) {
    for (auto [amax, dst] : {std::pair{input_amax->amax13, &out.a13_scale},
                             std::pair{input_amax->amax2, &out.a2_scale}}) {
      MOEKIT_CHECK_ARG(std::isfinite(amax) && amax > 0.0f, "input amax", "finite and > 0", amax);
      // ModelOpt: input_scale = amax / 2688 (decode), moekit keeps 1 / it; compressed-tensors
      // stores the encode scale 2688 / amax directly.
      const float enc = modelopt ? 1.0f / (amax / 2688.0f) : 2688.0f / amax;
      *dst = Tensor(DType::kF32, Shape{out.num_experts});
      for (int e = 0; e < out.num_experts; ++e) dst->ptr<float>()[e] = enc;
    }
  }
  return out;
}

}  // namespace moekit::io
