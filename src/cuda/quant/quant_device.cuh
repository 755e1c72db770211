// Device helpers shared by the CUDA quantize / dequantize / activation-quantize kernels: vector
// loads of 8 input elements (bf16 / f16 / f32) as fp32, scale-byte addressing for every layout, and
// warp reductions over the lanes that share one scale block. The scalar math is the shared
// moekit/quant/codecs.hpp (one source with the CPU reference), so the bits match by construction.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moekit/core/dtype.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/quant/layout.hpp"

namespace moekit::cuda::quant_detail {

// Each thread owns one chunk of 8 consecutive elements of a row (16 bytes of bf16/f16, 32 of f32).
constexpr int kChunk = 8;

template <typename T>
struct InputTraits;
template <>
struct InputTraits<float> {
  static constexpr DType kDType = DType::kF32;
  __device__ static float to_float(float v) { return v; }
};
template <>
struct InputTraits<bf16_t> {
  static constexpr DType kDType = DType::kBF16;
  __device__ static float to_float(bf16_t v) { return bf16_to_float(v.bits); }
};
template <>
struct InputTraits<f16_t> {
  static constexpr DType kDType = DType::kF16;
  __device__ static float to_float(f16_t v) { return f16_to_float(v.bits); }
};

// Loads elements [col, col + 8) of `row` as fp32. kVec: the chunk is whole and 16-byte aligned
// (K % 8 == 0 and an aligned base), so it is one or two 16-byte loads; otherwise element loads
// guarded by `k`, with missing elements read as 0 (0 never changes an absmax).
template <typename T, bool kVec>
__device__ __forceinline__ void load_chunk(const T* __restrict__ row, std::int64_t col,
                                           std::int64_t k, float (&v)[kChunk]) {
  if constexpr (kVec) {
    if constexpr (sizeof(T) == 2) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(row + col));
      const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = InputTraits<T>::to_float(T{static_cast<std::uint16_t>(w[i] & 0xFFFFu)});
        v[2 * i + 1] = InputTraits<T>::to_float(T{static_cast<std::uint16_t>(w[i] >> 16)});
      }
    } else {
      const float4 a = __ldg(reinterpret_cast<const float4*>(row + col));
      const float4 b = __ldg(reinterpret_cast<const float4*>(row + col + 4));
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      v[i] = col + i < k ? InputTraits<T>::to_float(row[col + i]) : 0.0f;
  }
}

// Max over the kLanes consecutive lanes of one scale group (kLanes divides 32, groups aligned).
// The max is exact, so the reduction order cannot change the bits.
template <int kLanes>
__device__ __forceinline__ float group_max(float m) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    const float o = __shfl_xor_sync(0xFFFFFFFFu, m, offset);
    m = o > m ? o : m;
  }
  return m;
}

// max |v[i]| ignoring NaN, from +0: absmax_accumulate's result (fmaxf returns the non-NaN
// operand; the max is exact), one FMNMX per element.
__device__ __forceinline__ float chunk_absmax(const float (&v)[kChunk]) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < kChunk; ++i) m = fmaxf(m, fabsf(v[i]));
  return m;
}

// 8 fp4 codes -> 4 bytes, element 2j in the low nibble (formats.md section 1).
__device__ __forceinline__ std::uint32_t pack_fp4x8(const std::uint8_t (&c)[kChunk]) {
  std::uint32_t w = 0;
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i)
    w |= static_cast<std::uint32_t>(pack_e2m1x2(c[2 * i], c[2 * i + 1])) << (8 * i);
  return w;
}

__device__ __forceinline__ uint2 pack_u8x8(const std::uint8_t (&c)[kChunk]) {
  uint2 w{0u, 0u};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w.x |= static_cast<std::uint32_t>(c[i]) << (8 * i);
    w.y |= static_cast<std::uint32_t>(c[i + 4]) << (8 * i);
  }
  return w;
}

// Byte offset of block scale (r, c) of matrix b in a [B, rows, Kb] block-scale buffer laid out
// as `layout` (each matrix padded to scale_padded_rows x scale_padded_cols).
__device__ __forceinline__ std::int64_t batched_scale_offset(ScaleLayout layout, std::int64_t b,
                                                             std::int64_t r, std::int64_t c,
                                                             std::int64_t rows, std::int64_t kb) {
  const std::int64_t per_matrix = scale_padded_rows(layout, rows) * scale_padded_cols(layout, kb);
  return b * per_matrix + scale_offset(layout, r, c, kb);
}

// The row part of batched_scale_offset (matrix b, row r); add scale_col_offset(layout, c).
__device__ __forceinline__ std::int64_t batched_scale_row_offset(ScaleLayout layout, std::int64_t b,
                                                                 std::int64_t r, std::int64_t rows,
                                                                 std::int64_t kb) {
  const std::int64_t per_matrix = scale_padded_rows(layout, rows) * scale_padded_cols(layout, kb);
  return b * per_matrix + scale_row_offset(layout, r, kb);
}

// Atomic max of a non-negative float held as its bit pattern: non-negative fp32 values order like
// their unsigned bits, and max is order-independent, so the result is deterministic.
__device__ __forceinline__ void atomic_max_nonneg(float* addr, float v) {
  atomicMax(reinterpret_cast<unsigned int*>(addr), __float_as_uint(v));
}

}  // namespace moekit::cuda::quant_detail
