// CPU reference backend of the quantize op: dispatch by scheme, and the bf16 "quantization"
// (a conversion, RN-even).
#include "cpu/quant/quantize_cpu.hpp"

#include <algorithm>

#include "cpu/quant/row_io.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::cpu {

namespace {

void convert_to_bf16(const TensorView& x, const TensorView& values) {
  const std::int64_t n = x.numel();
  std::uint16_t* dst = values.ptr<std::uint16_t>();
  if (x.dtype == DType::kBF16) {
    // Identity, bit for bit (NaN payloads included).
    std::copy(x.ptr<const std::uint16_t>(), x.ptr<const std::uint16_t>() + n, dst);
    return;
  }
  parallel_for(n, 1 << 16, [&](std::int64_t begin, std::int64_t end) {
    if (x.dtype == DType::kF32) {
      const float* src = x.ptr<const float>();
      for (std::int64_t i = begin; i < end; ++i) dst[i] = float_to_bf16(src[i]);
    } else {
      const std::uint16_t* src = x.ptr<const std::uint16_t>();
      for (std::int64_t i = begin; i < end; ++i) dst[i] = float_to_bf16(f16_to_float(src[i]));
    }
  });
}

}  // namespace

void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              const TensorView& static_scale) {
  if (config.scheme == QuantScheme::kBF16) {
    convert_to_bf16(x, out.values);
  } else if (has_block_scales(config.scheme)) {
    quantize_block_scaled(x, config, out, static_scale);
  } else {
    quantize_fp8(x, config, out, static_scale);
  }
}

void dequantize(const QuantizedView& q, const TensorView& out) {
  if (q.config.scheme == QuantScheme::kBF16) {
    const std::uint16_t* src = q.values.ptr<const std::uint16_t>();
    float* dst = out.ptr<float>();
    parallel_for(out.numel(), 1 << 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) dst[i] = bf16_to_float(src[i]);
    });
  } else if (has_block_scales(q.config.scheme)) {
    dequantize_block_scaled(q, out);
  } else {
    dequantize_fp8(q, out);
  }
}

}  // namespace moekit::cpu
