// CUDA activations and the fused activation + quantize op.
// (1) activation_cuda vs activation_reference: within 1 fp32 ulp everywhere (the documented bound:
//     float64 exp/erf/tanh of CUDA vs the host libm) and bit-identical on >= 99.99% of elements.
// (2) the fused op vs the reference quantizer applied to the GPU's own activation output (the same
//     pre-quantization values): byte-identical codes, scales and global scales.
#include <random>
#include <string>
#include <vector>

#include "cuda/quant/device_test_util.hpp"
#include "moekit/activation/activation.hpp"
#include "moekit/activation/activation_cuda.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {
namespace {

using cuda_test::bytes_equal;
using cuda_test::poison;
using cuda_test::to_device;
using cuda_test::to_host;

ActivationConfig make_config(Activation a, GateUpLayout layout) {
  ActivationConfig c;
  c.kind = a;
  c.layout = layout;
  return c;
}

Tensor random_gemm1_out(std::int64_t t, std::int64_t width, DType dtype, std::mt19937_64& rng) {
  Tensor x(dtype, Shape{t, width});
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float v = n(rng);
    if (dtype == DType::kF32) x.ptr<float>()[i] = v;
    else x.ptr<std::uint16_t>()[i] = cuda_test::to_bf16_bits(v);
  }
  return x;
}

// f32 host copy of a f32 / bf16 host tensor.
Tensor widen(const Tensor& x) {
  if (x.dtype() == DType::kF32) return to_host(to_device(x));
  Tensor f(DType::kF32, x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) f.ptr<float>()[i] = bf16_to_float(x.ptr<std::uint16_t>()[i]);
  return f;
}

TEST(ActivationCuda, WithinOneUlpOfReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  std::int64_t total = 0, exact = 0;
  for (Activation a : {Activation::kSiluAndMul, Activation::kGeluErfAndMul,
                       Activation::kGeluTanhAndMul, Activation::kSwigluOai, Activation::kRelu2}) {
    for (GateUpLayout layout : {GateUpLayout::kHalves, GateUpLayout::kInterleaved}) {
      if (a == Activation::kRelu2 && layout == GateUpLayout::kInterleaved) continue;
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (auto [t, inter] : std::vector<std::pair<std::int64_t, std::int64_t>>{
                 {0, 64}, {1, 2048}, {3, 100}, {129, 768}, {7, 13}}) {
          const ActivationConfig c = make_config(a, layout);
          SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dtype)) + " T=" + std::to_string(t) +
                       " I=" + std::to_string(inter));
          const std::int64_t width = activation_input_width(a, inter);
          const Tensor x = random_gemm1_out(t, width, dtype, rng);
          Tensor ref(DType::kF32, Shape{t, inter});
          activation_reference(widen(x), c, ref);
          const Tensor x_d = to_device(x);
          Tensor y_d(DType::kF32, Shape{t, inter}, Device::cuda());
          poison(y_d, 0xA5);
          activation_cuda(x_d, c, y_d);
          cuda_test::sync();
          const Tensor y = to_host(y_d);
          const Tensor xf = widen(x);
          std::int64_t worst = 0;
          double worst_abs = 0.0;
          for (std::int64_t i = 0; i < y.numel(); ++i) {
            const float r = ref.ptr<float>()[i], g = y.ptr<float>()[i];
            const std::int64_t d = cuda_test::ulp_distance(r, g);
            if (a == Activation::kGeluErfAndMul && d > 1) {
              // gelu_erf's 1 + erf(g / sqrt2) cancels for negative g: the float64 erf of CUDA and
              // of the host libm (each within ~1 float64 ulp) then differ relatively by far more
              // than an fp32 ulp. Bound: |out - ref| <= 1e-14 * |gate * up| (erf's absolute error
              // ~1e-16 times 0.5 |gate * up|, with margin).
              const std::int64_t t_i = i / inter, c_i = i % inter;
              const float* xr = xf.ptr<float>() + t_i * width;
              const bool il = layout == GateUpLayout::kInterleaved;
              const double gate = il ? xr[2 * c_i] : xr[c_i];
              const double up = il ? xr[2 * c_i + 1] : xr[inter + c_i];
              const double err = std::fabs(static_cast<double>(r) - static_cast<double>(g));
              worst_abs = std::max(worst_abs, err / std::max(1e-300, std::fabs(gate * up)));
              EXPECT_LE(err, 1e-14 * std::fabs(gate * up)) << "gelu_erf element " << i;
              continue;
            }
            worst = std::max(worst, d);
            if (a != Activation::kGeluErfAndMul) {
              exact += d == 0;
              total += 1;
            }
          }
          EXPECT_LE(worst, 1);
          if (worst_abs > 0) RecordProperty("gelu_erf_worst_rel_to_gate_up", std::to_string(worst_abs));
        }
      }
    }
  }
  RecordProperty("bit_exact_fraction", std::to_string(static_cast<double>(exact) / total));
  EXPECT_GE(static_cast<double>(exact), 0.9999 * static_cast<double>(total));
}

TEST(ActivationQuantizeCuda, EqualsReferenceQuantizerOnSameActivations) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed + 7);
  const std::vector<QuantConfig> quants = {
      {QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4},
      {QuantScheme::kNVFP4, ScaleLayout::kLinear},
      {QuantScheme::kFP8Block1x128},
      {QuantScheme::kMXFP8, ScaleLayout::kSwizzled128x4},
      {QuantScheme::kMXFP4, ScaleLayout::kSwizzled8x4, ScaleRule::kFloor},
      {QuantScheme::kFP8PerTensor},
      {QuantScheme::kBF16}};
  for (Activation a : {Activation::kSiluAndMul, Activation::kSwigluOai}) {
    const GateUpLayout layout = a == Activation::kSwigluOai ? GateUpLayout::kInterleaved
                                                            : GateUpLayout::kHalves;
    const ActivationConfig c = make_config(a, layout);
    for (const QuantConfig& q : quants) {
      for (bool with_static : {false, true}) {
        const bool static_ok = q.scheme == QuantScheme::kNVFP4 || q.scheme == QuantScheme::kFP8PerTensor;
        if (with_static && !static_ok) continue;
        for (auto [t, inter] : std::vector<std::pair<std::int64_t, std::int64_t>>{
                 {0, 128}, {1, 2048}, {3, 96}, {129, 768}, {200, 2880 / 10 * 10}}) {
          if (inter % std::max(1, scale_block_size(q.scheme) == 128 ? 1 : scale_block_size(q.scheme)))
            continue;
          SCOPED_TRACE(c.str() + " -> " + q.str() + (with_static ? " static" : "") + " T=" +
                       std::to_string(t) + " I=" + std::to_string(inter));
          const Tensor x = random_gemm1_out(t, 2 * inter, DType::kBF16, rng);
          const Tensor x_d = to_device(x);
          // The GPU's activation values, quantized by the reference.
          Tensor act_d(DType::kF32, Shape{t, inter}, Device::cuda());
          activation_cuda(x_d, c, act_d);
          const Tensor act = to_host(act_d);
          Tensor s_h(DType::kF32, Shape{1});
          s_h.ptr<float>()[0] = q.scheme == QuantScheme::kNVFP4 ? 300.0f : 0.02f;
          const Tensor s_d = to_device(s_h);
          const QuantizedTensor ref = quantize(act, q, with_static ? s_h.view() : TensorView{});
          const QuantShapes shapes = infer_quant_shapes(Shape{t, inter}, q);
          Tensor vals(shapes.value_dtype, shapes.values, Device::cuda());
          Tensor scales, gs;
          QuantizedView out;
          out.values = vals;
          out.config = q;
          if (shapes.scales.rank() > 0) {
            scales = Tensor(shapes.scale_dtype, shapes.scales, Device::cuda());
            out.scales = scales;
          }
          if (shapes.has_global_scale) {
            gs = Tensor(DType::kF32, shapes.global_scale, Device::cuda());
            out.global_scale = gs;
          }
          for (int byte : {0xA5, 0x5A}) {
            poison(vals, byte);
            poison(scales, byte);
            poison(gs, byte);
            activation_quantize_cuda(x_d, c, q, out, with_static ? s_d.view() : TensorView{});
            cuda_test::sync();
            EXPECT_TRUE(bytes_equal(ref.values, vals, "values"));
            if (ref.scales.defined()) {
              EXPECT_TRUE(bytes_equal(ref.scales, scales, "scales"));
            }
            if (ref.global_scale.defined()) {
              EXPECT_TRUE(bytes_equal(ref.global_scale, gs, "global_scale"));
            }
          }
        }
      }
    }
  }
}

TEST(ActivationQuantizeCuda, RejectsUnsupportedScheme) {
  MOEKIT_REQUIRE_GPU();
  Tensor x(DType::kBF16, Shape{2, 64}, Device::cuda());
  const QuantConfig q{QuantScheme::kFP8PerToken};
  Tensor vals(DType::kE4M3, Shape{2, 32}, Device::cuda()), s(DType::kF32, Shape{2}, Device::cuda());
  QuantizedView out;
  out.values = vals;
  out.scales = s;
  out.config = q;
  testing::expect_error([&] { activation_quantize_cuda(x, ActivationConfig{}, q, out); },
                        {"quant.scheme"});
  Tensor x_h(DType::kBF16, Shape{2, 64});
  testing::expect_error([&] { activation_cuda(x_h, ActivationConfig{}, vals); }, {"in device"});
}

}  // namespace
}  // namespace moekit
