// unpermute_reduce_cuda (include/moekit/permute/permute_cuda.hpp): the weighted top-k reduction
// back to [M, H]. One thread per (token, 8 columns); slots are visited in order j = 0..k-1 with
// p = RN(w * v) and acc = RN(acc + p) (__fmul_rn / __fadd_rn, never an FMA), exactly the CPU
// reference's arithmetic, so the result is bit-identical and independent of scheduling (no
// atomics).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/permute/permute_checks.hpp"
#include "cuda/quant/quant_device.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit {

namespace {

using cuda::quant_detail::kChunk;
using cuda::quant_detail::load_chunk;

template <typename TIn, bool kOutBf16, bool kVec>
__global__ void __launch_bounds__(256) unpermute_reduce_kernel(
    const TIn* __restrict__ y, const std::int32_t* __restrict__ source_row,
    const float* __restrict__ weights, void* __restrict__ out, std::int64_t m, int k,
    std::int64_t h) {
  const std::int64_t per_row = (h + kChunk - 1) / kChunk;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * per_row) return;
  const std::int64_t t = i / per_row;
  const std::int64_t col = (i - t * per_row) * kChunk;
  float acc[kChunk];
#pragma unroll
  for (int c = 0; c < kChunk; ++c) acc[c] = 0.0f;
  for (int j = 0; j < k; ++j) {
    const std::int32_t r = source_row[t * k + j];
    if (r < 0) continue;
    const float w = weights ? weights[t * k + j] : 1.0f;
    float v[kChunk];
    load_chunk<TIn, kVec>(y + static_cast<std::int64_t>(r) * h, col, h, v);
#pragma unroll
    for (int c = 0; c < kChunk; ++c) acc[c] = __fadd_rn(acc[c], __fmul_rn(w, v[c]));
  }
  if constexpr (kOutBf16) {
    auto* o = static_cast<std::uint16_t*>(out) + t * h + col;
    if constexpr (kVec) {
      uint4 p;
      p.x = float_to_bf16(acc[0]) | (static_cast<std::uint32_t>(float_to_bf16(acc[1])) << 16);
      p.y = float_to_bf16(acc[2]) | (static_cast<std::uint32_t>(float_to_bf16(acc[3])) << 16);
      p.z = float_to_bf16(acc[4]) | (static_cast<std::uint32_t>(float_to_bf16(acc[5])) << 16);
      p.w = float_to_bf16(acc[6]) | (static_cast<std::uint32_t>(float_to_bf16(acc[7])) << 16);
      *reinterpret_cast<uint4*>(o) = p;
    } else {
      for (int c = 0; c < kChunk && col + c < h; ++c) o[c] = float_to_bf16(acc[c]);
    }
  } else {
    float* o = static_cast<float*>(out) + t * h + col;
    if constexpr (kVec) {
      reinterpret_cast<float4*>(o)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      reinterpret_cast<float4*>(o)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
      for (int c = 0; c < kChunk && col + c < h; ++c) o[c] = acc[c];
    }
  }
}

template <typename TIn, bool kOutBf16>
void launch(const void* y, const std::int32_t* rows, const float* w, void* out, std::int64_t m,
            int k, std::int64_t h, bool vec, cudaStream_t s) {
  const std::int64_t threads = m * ((h + kChunk - 1) / kChunk);
  const unsigned int blocks = static_cast<unsigned int>((threads + 255) / 256);
  if (vec) {
    unpermute_reduce_kernel<TIn, kOutBf16, true>
        <<<blocks, 256, 0, s>>>(static_cast<const TIn*>(y), rows, w, out, m, k, h);
  } else {
    unpermute_reduce_kernel<TIn, kOutBf16, false>
        <<<blocks, 256, 0, s>>>(static_cast<const TIn*>(y), rows, w, out, m, k, h);
  }
}

}  // namespace

void unpermute_reduce_cuda(const TensorView& expert_out, const TensorView& source_row,
                           const TensorView& topk_weights, const TensorView& out,
                           StreamHandle stream) {
  using permute_detail::check_device;
  permute_detail::check_i32_device(source_row, "source_row", 2);
  const std::int64_t m = source_row.size(0);
  const int k = static_cast<int>(source_row.size(1));
  check_device(expert_out, "expert_out");
  MOEKIT_CHECK_ARG(expert_out.rank() >= 2, "expert_out rank", ">= 2", expert_out.rank());
  MOEKIT_CHECK_ARG(expert_out.dtype == DType::kF32 || expert_out.dtype == DType::kBF16,
                   "expert_out dtype", "f32 or bf16", dtype_name(expert_out.dtype));
  check_device(out, "out");
  MOEKIT_CHECK_ARG(out.rank() == 2, "out rank", 2, out.rank());
  MOEKIT_CHECK_ARG(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "out dtype",
                   "f32 or bf16", dtype_name(out.dtype));
  const std::int64_t h = expert_out.size(-1);
  MOEKIT_CHECK_ARG(out.size(0) == m && out.size(1) == h, "out shape", (Shape{m, h}.str()),
                   out.shape.str());
  const float* w = nullptr;
  if (topk_weights.defined()) {
    check_device(topk_weights, "topk_weights");
    MOEKIT_CHECK_ARG(topk_weights.dtype == DType::kF32, "topk_weights dtype", "f32",
                     dtype_name(topk_weights.dtype));
    MOEKIT_CHECK_ARG(topk_weights.shape == source_row.shape, "topk_weights shape",
                     source_row.shape.str(), topk_weights.shape.str());
    w = static_cast<const float*>(topk_weights.data);
  }
  if (m == 0 || h == 0) return;
  const bool vec = h % 8 == 0 &&
                   (reinterpret_cast<std::uintptr_t>(expert_out.data) |
                    reinterpret_cast<std::uintptr_t>(out.data)) % 16 == 0;
  const auto* rows = static_cast<const std::int32_t*>(source_row.data);
  auto s = static_cast<cudaStream_t>(stream);
  const bool in_bf16 = expert_out.dtype == DType::kBF16;
  const bool out_bf16 = out.dtype == DType::kBF16;
  if (in_bf16 && out_bf16) launch<bf16_t, true>(expert_out.data, rows, w, out.data, m, k, h, vec, s);
  else if (in_bf16) launch<bf16_t, false>(expert_out.data, rows, w, out.data, m, k, h, vec, s);
  else if (out_bf16) launch<float, true>(expert_out.data, rows, w, out.data, m, k, h, vec, s);
  else launch<float, false>(expert_out.data, rows, w, out.data, m, k, h, vec, s);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit
