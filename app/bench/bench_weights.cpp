// The expert weights of `moekit bench` (see bench_weights.hpp).
#include "bench/bench_weights.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "bench/bench_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::bench {
namespace {

Tensor device_tensor(DType t, Shape s) { return Tensor(t, s, Device::cuda(0)); }

bool wanted(const std::vector<QuantScheme>& schemes, QuantScheme s) {
  return std::find(schemes.begin(), schemes.end(), s) != schemes.end();
}

// Device copy of an optional device tensor (the biases every scheme carries).
Tensor clone(const Tensor& t) {
  if (!t.defined()) return Tensor();
  Tensor c = device_tensor(t.dtype(), t.shape());
  copy(c, t);
  return c;
}

MoeWeights shell(const MoeWeights& master, QuantScheme scheme) {
  MoeWeights w;
  w.num_experts = master.num_experts;
  w.hidden_size = master.hidden_size;
  w.intermediate_size = master.intermediate_size;
  w.gated = master.gated;
  w.quant.scheme = scheme;  // block scales LINEAR, MX rule RCEIL (QuantConfig defaults)
  w.w13_bias = clone(master.w13_bias);
  w.w2_bias = clone(master.w2_bias);
  return w;
}

// bf16 [E, N, K] (device) -> QuantizedTensor of `config` on the device, with the CUDA quantize op
// (batched: NVFP4's global scale is one per expert, [E]).
QuantizedTensor quantize_on_device(const Tensor& bf16, const QuantConfig& config,
                                   StreamHandle stream) {
  const QuantShapes s = infer_quant_shapes(bf16.shape(), config);
  QuantizedTensor q;
  q.config = config;
  q.values = device_tensor(s.value_dtype, s.values);
  if (s.scales.rank() > 0) q.scales = device_tensor(s.scale_dtype, s.scales);
  if (s.has_global_scale) q.global_scale = device_tensor(DType::kF32, s.global_scale);
  quantize(bf16.view(), config, q.view(), QuantBackend::kCuda, {}, stream);
  return q;
}

}  // namespace

const MoeWeights& BenchWeights::get(QuantScheme scheme) const {
  switch (scheme) {
    case QuantScheme::kBF16:
      return master;
    case QuantScheme::kFP8Block128x128:
      return fp8_block;
    case QuantScheme::kNVFP4:
      return nvfp4;
    case QuantScheme::kMXFP4:
      return mxfp4;
    default:
      break;
  }
  throw_arg_error("bench", "weight scheme", "bf16, fp8_block, nvfp4 or mxfp4",
                  std::string(scheme_name(scheme)));
}

BenchWeights make_bench_weights(const MoeLayerConfig& config,
                                const std::vector<QuantScheme>& schemes, std::uint64_t seed,
                                StreamHandle stream) {
  const int e = config.num_experts;
  const std::int64_t h = config.hidden_size, i = config.intermediate_size;
  auto s = static_cast<cudaStream_t>(stream);
  BenchWeights bw;
  MoeWeights& wb = bw.master;
  wb.num_experts = e, wb.hidden_size = h, wb.intermediate_size = i;
  wb.w13.values = device_tensor(DType::kBF16, Shape{e, 2 * i, h});
  wb.w2.values = device_tensor(DType::kBF16, Shape{e, h, i});
  fill_random_bf16(wb.w13.values.data(), static_cast<std::size_t>(wb.w13.values.numel()),
                   seed + 1, std::sqrt(3.0f / static_cast<float>(h)), stream);
  fill_random_bf16(wb.w2.values.data(), static_cast<std::size_t>(wb.w2.values.numel()), seed + 2,
                   std::sqrt(3.0f / static_cast<float>(i)), stream);
  if (config.has_bias) {
    wb.w13_bias = device_tensor(DType::kF32, Shape{e, 2 * i});
    wb.w2_bias = device_tensor(DType::kF32, Shape{e, h});
    fill_random_f32(wb.w13_bias.ptr<float>(), static_cast<std::size_t>(e * 2 * i), seed + 4,
                    -0.1f, 0.1f, stream);
    fill_random_f32(wb.w2_bias.ptr<float>(), static_cast<std::size_t>(e * h), seed + 5, -0.1f,
                    0.1f, stream);
  }
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));  // copy() of the biases below is synchronous

  if (wanted(schemes, QuantScheme::kFP8Block128x128) && h % 128 == 0 && i % 128 == 0) {
    MoeWeights& wq = bw.fp8_block;
    wq = shell(wb, QuantScheme::kFP8Block128x128);
    wq.w13.values = device_tensor(DType::kE4M3, Shape{e, 2 * i, h});
    wq.w2.values = device_tensor(DType::kE4M3, Shape{e, h, i});
    wq.w13.scales = device_tensor(DType::kF32, Shape{e, (2 * i + 127) / 128, h / 128});
    wq.w2.scales = device_tensor(DType::kF32, Shape{e, (h + 127) / 128, i / 128});
    quantize_weight_fp8_block(wb.w13.values.data(), e, 2 * i, h, wq.w13.values.data(),
                              wq.w13.scales.ptr<float>(), stream);
    quantize_weight_fp8_block(wb.w2.values.data(), e, h, i, wq.w2.values.data(),
                              wq.w2.scales.ptr<float>(), stream);
  }
  for (QuantScheme q : {QuantScheme::kNVFP4, QuantScheme::kMXFP4}) {
    const std::int64_t block = scale_block_size(q);
    if (!wanted(schemes, q) || h % block != 0 || i % block != 0) continue;
    MoeWeights& wq = q == QuantScheme::kNVFP4 ? bw.nvfp4 : bw.mxfp4;
    wq = shell(wb, q);
    wq.w13 = quantize_on_device(wb.w13.values, wq.quant, stream);
    wq.w2 = quantize_on_device(wb.w2.values, wq.quant, stream);
  }
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
  return bw;
}

}  // namespace moekit::bench
