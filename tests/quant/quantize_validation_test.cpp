// Argument validation of quantize / dequantize: each check throws moekit::Error naming the
// argument, the expected and the actual value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "moekit/quant/quantize.hpp"
#include "quant/quant_test_util.hpp"

namespace moekit {
namespace {

using quant_test::expect_error;

// Correctly shaped host outputs for x_shape / config.
struct Outputs {
  Tensor values, scales, global;
  QuantizedView view(const QuantConfig& c) const {
    return {values.view(), scales.view(), global.view(), c};
  }
};
Outputs outputs_for(const Shape& x, const QuantConfig& c) {
  const QuantShapes s = infer_quant_shapes(x, c);
  Outputs o;
  o.values = Tensor::zeros(s.value_dtype, s.values);
  if (s.scales.rank() > 0) o.scales = Tensor::zeros(s.scale_dtype, s.scales);
  if (s.has_global_scale) o.global = Tensor::zeros(DType::kF32, s.global_scale);
  return o;
}

const QuantConfig kNv{QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4};

TEST(QuantizeValidation, InputTensor) {
  const Outputs o = outputs_for(Shape{4, 32}, kNv);
  expect_error(
      [&] {
        quantize(Tensor::zeros(DType::kI32, Shape{4, 32}), kNv, o.view(kNv));
      },
      {"quantize", "x.dtype", "f32, f16 or bf16", "i32"});
  Tensor big = Tensor::zeros(DType::kF32, Shape{4, 64});
  const TensorView strided(big.data(), DType::kF32, Shape{4, 32}, Shape{64, 1}, Device::host());
  expect_error([&] { quantize(strided, kNv, o.view(kNv)); }, {"x", "contiguous", "[64, 1]"});
  expect_error([&] { quantize(Tensor::zeros(DType::kF32, Shape{128}), kNv, o.view(kNv)); },
               {"x.shape", "[M, K] or [B, M, K]", "[128]"});
  expect_error(
      [&] {
        quantize(Tensor::zeros(DType::kF32, Shape{4, 40}), kNv, o.view(kNv));
      },
      {"K", "multiple of 16", "40"});
  const TensorView on_gpu(reinterpret_cast<void*>(0x1000), DType::kF32, Shape{4, 32},
                          Device::cuda(0));
  expect_error([&] { quantize(on_gpu, kNv, o.view(kNv)); },
               {"x.device", "host tensor (backend reference)", "cuda:0"});
}

TEST(QuantizeValidation, OutputTensors) {
  const Tensor x = Tensor::zeros(DType::kBF16, Shape{4, 32});
  Outputs o = outputs_for(x.shape(), kNv);
  // values: wrong shape, wrong dtype, absent.
  QuantizedView v = o.view(kNv);
  Tensor wrong_values = Tensor::zeros(DType::kE2M1x2, Shape{4, 32});
  v.values = wrong_values;
  expect_error([&] { quantize(x, kNv, v); },
               {"out.values.shape", "[4, 16]", "[4, 32]", "infer_quant_shapes"});
  Tensor wrong_dtype = Tensor::zeros(DType::kU8, Shape{4, 16});
  v.values = wrong_dtype;
  expect_error([&] { quantize(x, kNv, v); }, {"out.values.dtype", "e2m1x2", "u8"});
  v = o.view(kNv);
  v.values = TensorView();
  expect_error([&] { quantize(x, kNv, v); }, {"out.values", "absent"});
  // scales: linear-shaped buffer for a swizzled config.
  v = o.view(kNv);
  Tensor linear_scales = Tensor::zeros(DType::kE4M3, Shape{4, 2});
  v.scales = linear_scales;
  expect_error([&] { quantize(x, kNv, v); }, {"out.scales.shape", "[128, 4]", "[4, 2]"});
  Tensor e8 = Tensor::zeros(DType::kE8M0, Shape{128, 4});
  v.scales = e8;
  expect_error([&] { quantize(x, kNv, v); }, {"out.scales.dtype", "e4m3", "e8m0"});
  // global scale missing.
  v = o.view(kNv);
  v.global_scale = TensorView();
  expect_error([&] { quantize(x, kNv, v); }, {"out.global_scale", "absent"});
}

TEST(QuantizeValidation, StaticScale) {
  const Tensor x = Tensor::zeros(DType::kF32, Shape{2, 4, 32});
  const Outputs o = outputs_for(x.shape(), kNv);
  Tensor s(DType::kF32, Shape{2});
  s.ptr<float>()[0] = 1.0f;
  s.ptr<float>()[1] = std::numeric_limits<float>::infinity();
  expect_error([&] { quantize(x, kNv, o.view(kNv), QuantBackend::kReference, s); },
               {"static_scale[1]", "finite", "inf"});
  s.ptr<float>()[1] = 0.0f;
  expect_error([&] { quantize(x, kNv, o.view(kNv), QuantBackend::kReference, s); },
               {"static_scale[1]", "> 0"});
  s.ptr<float>()[1] = std::nanf("");
  expect_error([&] { quantize(x, kNv, o.view(kNv), QuantBackend::kReference, s); },
               {"static_scale[1]", "nan"});
  const Tensor one = Tensor::zeros(DType::kF32, Shape{1});
  expect_error([&] { quantize(x, kNv, o.view(kNv), QuantBackend::kReference, one); },
               {"static_scale.shape", "[2]", "[1]"});
  const QuantConfig mx{QuantScheme::kMXFP4};
  const Outputs om = outputs_for(x.shape(), mx);
  expect_error([&] { quantize(x, mx, om.view(mx), QuantBackend::kReference, one); },
               {"static_scale", "nvfp4 and fp8_tensor", "mxfp4"});
  // A valid static scale is copied to the global scale.
  s.ptr<float>()[1] = 0.5f;
  quantize(x, kNv, o.view(kNv), QuantBackend::kReference, s);
  EXPECT_EQ(o.global.ptr<float>()[0], 1.0f);
  EXPECT_EQ(o.global.ptr<float>()[1], 0.5f);
}

TEST(QuantizeValidation, Backend) {
  const Tensor x = Tensor::zeros(DType::kF32, Shape{4, 32});
  const Outputs o = outputs_for(x.shape(), kNv);
#if MOEKIT_WITH_CUDA
  // Host tensors handed to the cuda backend are refused before any launch.
  expect_error([&] { quantize(x, kNv, o.view(kNv), QuantBackend::kCuda); },
               {"x.device", "CUDA tensor (backend cuda)", "host"});
#else
  const TensorView gx(reinterpret_cast<void*>(0x1000), DType::kF32, Shape{4, 32}, Device::cuda(0));
  const TensorView gv(reinterpret_cast<void*>(0x2000), DType::kE2M1x2, Shape{4, 16},
                      Device::cuda(0));
  const TensorView gs(reinterpret_cast<void*>(0x3000), DType::kE4M3, Shape{128, 4},
                      Device::cuda(0));
  const TensorView gg(reinterpret_cast<void*>(0x4000), DType::kF32, Shape{1}, Device::cuda(0));
  expect_error(
      [&] {
        quantize(gx, kNv, {gv, gs, gg, kNv}, QuantBackend::kCuda);
      },
      {"backend", "built without CUDA", "cuda"});
#endif
}

TEST(QuantizeValidation, Dequantize) {
  const Tensor x = Tensor::zeros(DType::kF32, Shape{4, 32});
  const QuantizedTensor q = quantize(x, kNv);
  expect_error(
      [&] {
        dequantize(q.view(), Tensor(DType::kBF16, Shape{4, 32}));
      },
      {"dequantize", "out.dtype", "f32", "bf16"});
  expect_error(
      [&] {
        dequantize(q.view(), Tensor(DType::kF32, Shape{4, 64}));
      },
      {"q.values.shape", "[4, 32]", "[4, 16]"});
  expect_error(
      [&] {
        dequantize(q.view(), Tensor(DType::kF32, Shape{4, 24}));
      },
      {"dequantize", "multiple of 16"});
  QuantizedView wrong = q.view();
  wrong.config.layout = ScaleLayout::kLinear;
  expect_error(
      [&] {
        dequantize(wrong, Tensor(DType::kF32, Shape{4, 32}));
      },
      {"q.scales.shape", "[4, 2]", "[128, 4]"});
  wrong = q.view();
  wrong.global_scale = TensorView();
  expect_error([&] { dequantize(wrong); }, {"q.global_scale", "absent"});
}

}  // namespace
}  // namespace moekit
