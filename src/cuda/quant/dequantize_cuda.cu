// The CUDA dequantize op (moekit::cuda::dequantize): codes + scales -> f32 [B?, M, K], with the
// shared codecs (bit-identical to the CPU reference). One thread per 8 consecutive elements.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/quant/quant_device.cuh"
#include "cuda/quant/quantize_cuda.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"

namespace moekit::cuda {

namespace {

using quant_detail::kChunk;

struct DequantArgs {
  const void* values = nullptr;
  const void* scales = nullptr;
  const float* global_scale = nullptr;
  float* out = nullptr;
  std::int64_t batch = 1, rows = 0, k = 0, kb = 0;
  ScaleLayout layout = ScaleLayout::kLinear;
  QuantScheme scheme = QuantScheme::kBF16;
};

template <QuantScheme kScheme>
__device__ __forceinline__ float dequant_one(const DequantArgs& a, std::int64_t b, std::int64_t r,
                                             std::int64_t grow, std::int64_t col) {
  if constexpr (kScheme == QuantScheme::kBF16) {
    return bf16_to_float(static_cast<const std::uint16_t*>(a.values)[grow * a.k + col]);
  } else if constexpr (kScheme == QuantScheme::kNVFP4 || kScheme == QuantScheme::kNVFP4PerToken ||
                       kScheme == QuantScheme::kMXFP4) {
    const std::uint8_t byte = static_cast<const std::uint8_t*>(a.values)[(grow * a.k + col) / 2];
    const std::uint8_t code = (col & 1) ? (byte >> 4) : (byte & 0xF);
    constexpr int sfv = kScheme == QuantScheme::kMXFP4 ? 32 : 16;
    const std::uint8_t sf = static_cast<const std::uint8_t*>(
        a.scales)[quant_detail::batched_scale_offset(a.layout, b, r, col / sfv, a.rows, a.kb)];
    if constexpr (kScheme == QuantScheme::kMXFP4) {
      return mul_rn(e2m1_to_float(code), mx_dequantize_scale(sf));
    } else {
      const float gs = a.global_scale[kScheme == QuantScheme::kNVFP4 ? b : grow];
      return nvfp4_dequantize_element(code, sf, gs);
    }
  } else {
    const float q = e4m3_to_float(static_cast<const std::uint8_t*>(a.values)[grow * a.k + col]);
    const auto* fs = static_cast<const float*>(a.scales);
    if constexpr (kScheme == QuantScheme::kMXFP8) {
      const std::uint8_t sf = static_cast<const std::uint8_t*>(
          a.scales)[quant_detail::batched_scale_offset(a.layout, b, r, col / 32, a.rows, a.kb)];
      return mul_rn(q, mx_dequantize_scale(sf));
    } else if constexpr (kScheme == QuantScheme::kFP8PerTensor) {
      return mul_rn(q, fs[b]);
    } else if constexpr (kScheme == QuantScheme::kFP8PerToken) {
      return mul_rn(q, fs[grow]);
    } else if constexpr (kScheme == QuantScheme::kFP8Block1x128) {
      return mul_rn(q, fs[grow * a.kb + col / 128]);
    } else {
      const std::int64_t tiles_r = (a.rows + 127) / 128;
      return mul_rn(q, fs[(b * tiles_r + r / 128) * a.kb + col / 128]);
    }
  }
}

template <QuantScheme kScheme>
__global__ void __launch_bounds__(256) dequantize_kernel(DequantArgs a) {
  const std::int64_t per_row = (a.k + kChunk - 1) / kChunk;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.batch * a.rows * per_row) return;
  const std::int64_t grow = i / per_row;
  const std::int64_t col = (i % per_row) * kChunk;
  const std::int64_t b = grow / a.rows;
  const std::int64_t r = grow % a.rows;
  float v[kChunk];
#pragma unroll
  for (int j = 0; j < kChunk; ++j) v[j] = col + j < a.k ? dequant_one<kScheme>(a, b, r, grow, col + j) : 0.0f;
  float* out = a.out + grow * a.k + col;
  if (col + kChunk <= a.k && a.k % 4 == 0) {
    reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    for (int j = 0; j < kChunk && col + j < a.k; ++j) out[j] = v[j];
  }
}

}  // namespace

void dequantize(const QuantizedView& q, const TensorView& out, StreamHandle stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  DequantArgs a;
  a.values = q.values.data;
  a.scales = q.scales.data;
  a.global_scale = static_cast<const float*>(q.global_scale.data);
  a.out = static_cast<float*>(out.data);
  a.batch = out.rank() == 3 ? out.size(0) : 1;
  a.rows = out.size(-2);
  a.k = out.size(-1);
  a.layout = q.config.layout;
  a.scheme = q.config.scheme;
  const int sfv = scale_block_size(a.scheme);
  a.kb = sfv > 0 ? (a.k + sfv - 1) / sfv : 0;
  const std::int64_t threads = a.batch * a.rows * ((a.k + kChunk - 1) / kChunk);
  if (threads == 0) return;
  MOEKIT_CHECK(reinterpret_cast<std::uintptr_t>(out.data) % 16 == 0,
               "dequantize(cuda): out must be 16-byte aligned");
  const unsigned int blocks = static_cast<unsigned int>((threads + 255) / 256);
  switch (a.scheme) {
#define MOEKIT_DEQUANT_CASE(S) \
  case S: dequantize_kernel<S><<<blocks, 256, 0, stream>>>(a); break;
    MOEKIT_DEQUANT_CASE(QuantScheme::kBF16)
    MOEKIT_DEQUANT_CASE(QuantScheme::kFP8PerTensor)
    MOEKIT_DEQUANT_CASE(QuantScheme::kFP8PerToken)
    MOEKIT_DEQUANT_CASE(QuantScheme::kFP8Block1x128)
    MOEKIT_DEQUANT_CASE(QuantScheme::kFP8Block128x128)
    MOEKIT_DEQUANT_CASE(QuantScheme::kMXFP8)
    MOEKIT_DEQUANT_CASE(QuantScheme::kNVFP4)
    MOEKIT_DEQUANT_CASE(QuantScheme::kNVFP4PerToken)
    MOEKIT_DEQUANT_CASE(QuantScheme::kMXFP4)
#undef MOEKIT_DEQUANT_CASE
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda
