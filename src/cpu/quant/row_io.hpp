// Internal helpers of the CPU quantizers: reading input rows as fp32, amax reductions, and the
// row-parallel loop over a [B, M, K] problem.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "moekit/core/parallel.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::cpu {

// Converts n elements of a f32 / f16 / bf16 buffer starting at element `offset` to fp32 (exact).
inline void load_f32(const TensorView& x, std::int64_t offset, std::int64_t n, float* dst) {
  switch (x.dtype) {
    case DType::kF32: {
      const float* src = x.ptr<const float>() + offset;
      std::copy(src, src + n, dst);
      break;
    }
    case DType::kBF16: {
      const std::uint16_t* src = x.ptr<const std::uint16_t>() + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
      break;
    }
    case DType::kF16: {
      const std::uint16_t* src = x.ptr<const std::uint16_t>() + offset;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_float(src[i]);
      break;
    }
    default:
      break;  // rejected by the argument checks
  }
}

// NaN-ignoring max |v| (= folding absmax_accumulate), computed on the bit patterns so that the
// loop vectorizes: for non-negative non-NaN floats the integer order is the float order.
inline float absmax(const float* v, std::int64_t n) {
  std::uint32_t m = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t u = f32_to_bits(v[i]) & 0x7FFFFFFFu;
    u = u > 0x7F800000u ? 0u : u;
    m = u > m ? u : m;
  }
  return bits_to_f32(m);
}

// The 256 e4m3 codes as fp32 (exact), for the dequantizers.
inline const float* e4m3_values() {
  static const auto table = [] {
    std::vector<float> t(256);
    for (int c = 0; c < 256; ++c)
      t[static_cast<std::size_t>(c)] = e4m3_to_float(static_cast<std::uint8_t>(c));
    return t;
  }();
  return table.data();
}

// Rows per parallel chunk so that a chunk is ~64K elements.
inline std::int64_t row_grain(std::int64_t cols) {
  return std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(cols, 1));
}

// Calls fn(row_index, row_fp32) for each of the `rows` rows of `cols` elements (row i starts at
// element i * cols of x), in parallel, with a per-thread fp32 row buffer.
template <typename Fn>
void for_each_row(const TensorView& x, std::int64_t rows, std::int64_t cols, Fn&& fn) {
  parallel_for(rows, row_grain(cols), [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> buf(static_cast<std::size_t>(cols));
    for (std::int64_t i = begin; i < end; ++i) {
      load_f32(x, i * cols, cols, buf.data());
      fn(i, static_cast<const float*>(buf.data()));
    }
  });
}

// Per-row NaN-ignoring max |x| of `rows` rows of `cols` elements: [rows] f32.
inline std::vector<float> row_amax(const TensorView& x, std::int64_t rows, std::int64_t cols) {
  std::vector<float> out(static_cast<std::size_t>(rows));
  for_each_row(x, rows, cols, [&](std::int64_t i, const float* row) {
    out[static_cast<std::size_t>(i)] = absmax(row, cols);
  });
  return out;
}

// Per-matrix amax of a [batch, rows, cols] input: [batch] f32.
inline std::vector<float> matrix_amax(const TensorView& x, std::int64_t batch, std::int64_t rows,
                                      std::int64_t cols) {
  const std::vector<float> per_row = row_amax(x, batch * rows, cols);
  std::vector<float> out(static_cast<std::size_t>(batch), 0.0f);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t r = 0; r < rows; ++r) {
      out[static_cast<std::size_t>(b)] = absmax_accumulate(
          out[static_cast<std::size_t>(b)], per_row[static_cast<std::size_t>(b * rows + r)]);
    }
  }
  return out;
}

}  // namespace moekit::cpu
