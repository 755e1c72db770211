// Absmax of 2-byte inputs on their packed bits, and the flat per-matrix absmax pre-pass that uses
// it (the computed-gs NVFP4 / FP8 per-tensor paths read the whole input once for it).
//
// On |x| (x & 0x7FFF7FFF), max.bf16x2 / max.f16x2 return the non-NaN operand and the max of exact
// values is exact, so starting from +0 the packed max is absmax_accumulate's value (NaN ignored,
// infinities kept), two elements per instruction and no conversion per element.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quant/quant_device.cuh"

namespace moekit::cuda::quant_detail {

// f16 bits -> fp32, the bits of codecs.hpp f16_to_float: the hardware conversion (exact for
// numbers and infinities), with NaN rebuilt as the codec does (sign | Inf | payload << 13) so that
// NaN inputs encode exactly like the reference.
__device__ __forceinline__ float f16_bits_to_float(std::uint32_t h) {
  const float f = __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
  return (h & 0x7C00u) == 0x7C00u
             ? __uint_as_float(((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13))
             : f;
}

// m = packed max(m, |w|) of the two 2-byte values in w.
template <typename T>
__device__ __forceinline__ void packed_absmax(std::uint32_t& m, std::uint32_t w) {
  const std::uint32_t a = w & 0x7FFF7FFFu;  // |x|, both halves
  if constexpr (InputTraits<T>::kDType == DType::kBF16) {
    asm("max.bf16x2 %0, %0, %1;" : "+r"(m) : "r"(a));
  } else {
    asm("max.f16x2 %0, %0, %1;" : "+r"(m) : "r"(a));
  }
}
template <typename T>
__device__ __forceinline__ void packed_absmax(std::uint32_t& m, const uint4& w) {
  packed_absmax<T>(m, w.x);
  packed_absmax<T>(m, w.y);
  packed_absmax<T>(m, w.z);
  packed_absmax<T>(m, w.w);
}

// The larger half of a packed max as fp32 (exact).
template <typename T>
__device__ __forceinline__ float packed_absmax_value(std::uint32_t m) {
  if constexpr (InputTraits<T>::kDType == DType::kBF16) {
    return fmaxf(__uint_as_float(m << 16), __uint_as_float(m & 0xFFFF0000u));
  } else {
    return fmaxf(f16_bits_to_float(m & 0xFFFFu), f16_bits_to_float(m >> 16));
  }
}

constexpr int kFlatAbsmaxThreads = 256;
constexpr int kFlatAbsmaxLoads = 4;  // 16-byte loads in flight per thread and step

// amax[b] = max(amax[b], absmax of matrix b) for a [B, n] 2-byte input with n % 8 == 0 and a
// 16-byte aligned base (a matrix's rows are contiguous: one flat array). CTA blockIdx.x of matrix
// blockIdx.y reads 16-byte words blockIdx.x * 256 * 4 + threadIdx.x + 256 * j (j < 4), then the
// same gridDim.x * 1024 words further; one atomic per CTA (amax pre-zeroed).
template <typename T>
__global__ void __launch_bounds__(kFlatAbsmaxThreads) flat_absmax_kernel(const T* x, std::int64_t n,
                                                                           float* amax) {
  const auto* w = reinterpret_cast<const uint4*>(x + static_cast<std::int64_t>(blockIdx.y) * n);
  const std::int64_t words = n / 8;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kFlatAbsmaxThreads * kFlatAbsmaxLoads;
  std::uint32_t m = 0u;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kFlatAbsmaxThreads * kFlatAbsmaxLoads +
                           threadIdx.x;
       base < words; base += step) {
    uint4 v[kFlatAbsmaxLoads];
#pragma unroll
    for (int j = 0; j < kFlatAbsmaxLoads; ++j) {
      const std::int64_t i = base + static_cast<std::int64_t>(j) * kFlatAbsmaxThreads;
      v[j] = i < words ? __ldg(w + i) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < kFlatAbsmaxLoads; ++j) packed_absmax<T>(m, v[j]);
  }
  float r = group_max<32>(packed_absmax_value<T>(m));
  __shared__ float warp_max[kFlatAbsmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = r;
  __syncthreads();
  if (threadIdx.x < 32) {
    r = threadIdx.x < kFlatAbsmaxThreads / 32 ? warp_max[threadIdx.x] : 0.0f;
    r = group_max<32>(r);
    if (threadIdx.x == 0 && r > 0.0f) atomic_max_nonneg(amax + blockIdx.y, r);
  }
}

}  // namespace moekit::cuda::quant_detail
