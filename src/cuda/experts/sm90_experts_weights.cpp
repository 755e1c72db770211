// The SM90 grouped experts' weight preparation (sm90_experts_weights.hpp).
#include "cuda/experts/sm90_experts_weights.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/experts/sm90_grouped_experts.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"
#include "cuda/gemm/w4a8/sm90_w4a8_weight_layout.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"

namespace moekit::cuda {
namespace {

// A host copy of t when it lives on a device; an undefined Tensor when t is already on the host.
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

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The tensor itself when it is on the device (used in place: it must outlive the experts), else a
// device copy kept in `owned`.
const void* on_device(const Tensor& t, Tensor& owned) {
  MOEKIT_CHECK_ARG(t.view().is_contiguous(), "weights", "contiguous tensors", t.view().str());
  if (t.device().is_cuda()) return t.data();
  owned = to_device(t);
  return owned.data();
}

// An expert bias of the checkpoint (f32 [E, n]) on the device; empty when the layer has none.
Tensor bias_to_device(const MoeProblem& p, const Tensor& b, std::int64_t n, const char* what) {
  if (!p.layer.has_bias) return Tensor();
  const std::int64_t e = p.num_local_experts();
  MOEKIT_CHECK_ARG(b.dtype() == DType::kF32 && b.numel() == e * n, what,
                   "f32 [E, " + std::to_string(n) + "]", b.view().str());
  return to_device(b);
}

// The 4-bit weights of one matrix as host bytes, checked: codes e2m1x2 [E, n, k/2] and scales
// `scale_dtype` [E, n, k/sfv] (linear).
struct Fp4HostBytes {
  Tensor values_copy, scales_copy;
  const std::uint8_t* codes = nullptr;
  const std::uint8_t* scales = nullptr;
};
Fp4HostBytes fp4_host_bytes(const QuantizedTensor& q, std::int64_t e, std::int64_t n,
                            std::int64_t k, std::int64_t sfv, DType scale_dtype,
                            const char* what) {
  const Shape vs{e, n, k / 2}, ss{e, n, k / sfv};
  MOEKIT_CHECK_ARG(q.values.dtype() == DType::kE2M1x2 && q.values.shape() == vs,
                   std::string("weights.") + what + ".values", "e2m1x2" + vs.str(),
                   q.values.view().str());
  MOEKIT_CHECK_ARG(q.scales.dtype() == scale_dtype && q.scales.shape() == ss,
                   std::string("weights.") + what + ".scales",
                   std::string(dtype_name(scale_dtype)) + ss.str(), q.scales.view().str());
  Fp4HostBytes h;
  h.values_copy = host_copy_if_device(q.values);
  h.scales_copy = host_copy_if_device(q.scales);
  h.codes = (h.values_copy.defined() ? h.values_copy : q.values).ptr<std::uint8_t>();
  h.scales = (h.scales_copy.defined() ? h.scales_copy : q.scales).ptr<std::uint8_t>();
  return h;
}

void prepare_bf16_fp8(bool fp8, const QuantizedTensor& q, std::int64_t e, std::int64_t n,
                      std::int64_t k, const char* what, Sm90Matrix& out) {
  const DType vt = fp8 ? DType::kE4M3 : DType::kBF16;
  const Shape s{e, n, k};
  MOEKIT_CHECK_ARG(q.values.dtype() == vt && q.values.shape() == s,
                   std::string("weights.") + what + ".values", std::string(dtype_name(vt)) + s.str(),
                   q.values.view().str());
  out.values = on_device(q.values, out.values_owned);
  if (!fp8) return;
  const Shape ss{e, (n + 127) / 128, k / 128};
  MOEKIT_CHECK_ARG(q.scales.dtype() == DType::kF32 && q.scales.shape() == ss,
                   std::string("weights.") + what + ".scales", "f32" + ss.str(),
                   q.scales.view().str());
  out.scales = on_device(q.scales, out.scales_owned);
}

void prepare_w4a16(QuantScheme format, const QuantizedTensor& q, std::int64_t e, std::int64_t n,
                   std::int64_t k, bool gated, const char* what, Sm90Matrix& out) {
  const std::int64_t sfv = scale_block_size(format);
  const DType sdt = format == QuantScheme::kNVFP4 ? DType::kE4M3 : DType::kE8M0;
  const Fp4HostBytes h = fp4_host_bytes(q, e, n, k, sfv, sdt, what);
  Tensor codes(DType::kU8, Shape{e * n * k / 2}), scales(DType::kU8, Shape{e * n * k / sfv});
  w4a16_shuffle_per_expert(format, e, n, k, gated, h.codes, h.scales, codes.ptr<std::uint8_t>(),
                           scales.ptr<std::uint8_t>());
  out.values_owned = to_device(codes);
  out.scales_owned = to_device(scales);
  out.values = out.values_owned.data();
  out.scales = out.scales_owned.data();
  if (format != QuantScheme::kNVFP4) return;
  MOEKIT_CHECK_ARG(q.global_scale.dtype() == DType::kF32 && q.global_scale.numel() == e,
                   std::string("weights.") + what + ".global_scale", "f32 [E]",
                   q.global_scale.view().str());
  const Tensor hg = host_copy_if_device(q.global_scale);
  const float* gs = (hg.defined() ? hg : q.global_scale).ptr<float>();
  Tensor alpha(DType::kF32, Shape{e});
  for (std::int64_t x = 0; x < e; ++x) alpha.ptr<float>()[x] = 1.0f / gs[x];
  out.expert_scale = to_device(alpha);
}

void prepare_w4a8(const QuantizedTensor& q, std::int64_t e, std::int64_t n, std::int64_t k,
                  bool gated, const char* what, const std::string& experts, Sm90Matrix& out) {
  const Fp4HostBytes h = fp4_host_bytes(q, e, n, k, 32, DType::kE8M0, what);
  Tensor codes(DType::kU8, Shape{e * n * k / 2}), scales(DType::kU8, Shape{e * n * k / 32});
  Tensor row_scale(DType::kF32, Shape{e * n});
  // One expert per task (the layout is expert-major); the first failing expert's reason.
  std::vector<std::string> why(static_cast<std::size_t>(e));
  const std::int64_t cb = n * k / 2, sb = n * k / 32;
  parallel_for(e, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t x = begin; x < end; ++x)
      why[static_cast<std::size_t>(x)] = gemm::w4a8_prepare_weights(
          1, n, k, gated, h.codes + x * cb, h.scales + x * sb, codes.ptr<std::uint8_t>() + x * cb,
          scales.ptr<std::uint8_t>() + x * sb, row_scale.ptr<float>() + x * n, x);
  });
  for (const std::string& r : why) {
    MOEKIT_CHECK(r.empty(), experts, ": weights.", what,
                 " are not exactly representable as e4m3 (", r,
                 "); run them with bf16 activations (cuda_w4a16_grouped)");
  }
  out.values_owned = to_device(codes);
  out.scales_owned = to_device(scales);
  out.values = out.values_owned.data();
  out.scales = out.scales_owned.data();
  out.row_scale = to_device(row_scale);
}

}  // namespace

void w4a16_shuffle_per_expert(QuantScheme format, std::int64_t num_experts, std::int64_t n,
                              std::int64_t k, bool gated, const std::uint8_t* codes,
                              const std::uint8_t* scales, std::uint8_t* out_codes,
                              std::uint8_t* out_scales) {
  // Both layouts are expert-major ([E][...] with n*k/2 code bytes and n*k/sfv scale bytes per
  // expert, see sm90_w4a16_weight_shuffle.cpp), so expert x is the one-expert shuffle of its slice.
  const std::int64_t code_bytes = n * k / 2, scale_bytes = n * k / scale_block_size(format);
  parallel_for(num_experts, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t x = begin; x < end; ++x)
      gemm::w4a16_shuffle_weights(format, 1, n, k, gated, codes + x * code_bytes,
                                  scales + x * scale_bytes, out_codes + x * code_bytes,
                                  out_scales + x * scale_bytes);
  });
}

Sm90Weights prepare_sm90_weights(gemm::GemmScheme scheme, const MoeProblem& p,
                                 const MoeWeights& w, const std::string& what) {
  using gemm::GemmScheme;
  const std::int64_t e = p.num_local_experts(), h = p.layer.hidden_size,
                     i = p.layer.intermediate_size;
  Sm90Weights out;
  switch (scheme) {
    case GemmScheme::kBF16:
    case GemmScheme::kFP8Block: {
      const bool fp8 = scheme == GemmScheme::kFP8Block;
      prepare_bf16_fp8(fp8, w.w13, e, 2 * i, h, "w13", out.w13);
      prepare_bf16_fp8(fp8, w.w2, e, h, i, "w2", out.w2);
      break;
    }
    case GemmScheme::kW4A16NVFP4:
    case GemmScheme::kW4A16MXFP4: {
      MOEKIT_CHECK_ARG(w.quant.scheme == p.weight_quant.scheme, "weights.quant",
                       scheme_name(p.weight_quant.scheme), scheme_name(w.quant.scheme));
      MOEKIT_CHECK_ARG(w.quant.layout == ScaleLayout::kLinear, "weights.quant.layout", "linear",
                       layout_name(w.quant.layout));
      const QuantScheme f = p.weight_quant.scheme;
      prepare_w4a16(f, w.w13, e, 2 * i, h, true, "w13", out.w13);
      prepare_w4a16(f, w.w2, e, h, i, false, "w2", out.w2);
      break;
    }
    case GemmScheme::kW4A8MXFP4:
      MOEKIT_CHECK_ARG(w.quant.scheme == QuantScheme::kMXFP4, "weights.quant", "mxfp4",
                       scheme_name(w.quant.scheme));
      MOEKIT_CHECK_ARG(w.quant.layout == ScaleLayout::kLinear, "weights.quant.layout", "linear",
                       layout_name(w.quant.layout));
      prepare_w4a8(w.w13, e, 2 * i, h, true, "w13", what, out.w13);
      prepare_w4a8(w.w2, e, h, i, false, "w2", what, out.w2);
      break;
  }
  // Biases (gpt-oss): GEMM1's in its epilogue or the activation kernel, GEMM2's in its epilogue
  // (4-bit) or the weighted reduce (bf16 / fp8).
  out.w13_bias = bias_to_device(p, w.w13_bias, 2 * i, "weights.w13_bias");
  out.w2_bias = bias_to_device(p, w.w2_bias, h, "weights.w2_bias");
  const bool by_expert_id = scheme == GemmScheme::kBF16 || scheme == GemmScheme::kFP8Block;
  if (by_expert_id && p.layer.has_bias && !p.parallel.expert_map.empty()) {
    const std::int64_t e_global = static_cast<std::int64_t>(p.parallel.expert_map.size());
    Tensor global = Tensor::zeros(DType::kF32, Shape{e_global, h});
    const Tensor host = host_copy_if_device(w.w2_bias);
    const float* local = (host.defined() ? host : w.w2_bias).ptr<const float>();
    for (std::int64_t g = 0; g < e_global; ++g) {
      const std::int32_t x = p.parallel.expert_map[static_cast<std::size_t>(g)];
      if (x >= 0 && x < e)
        std::copy(local + x * h, local + (x + 1) * h, global.ptr<float>() + g * h);
    }
    out.w2_bias_global = to_device(global);
  }
  out.aligned16 = aligned16(out.w13.values) && aligned16(out.w2.values) && h % 8 == 0 && i % 8 == 0;
  return out;
}

}  // namespace moekit::cuda
