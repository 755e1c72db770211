// Internal host helpers shared by the CPU reference (routing, activation, MoE layer): bf16 <-> f32
// (bit-exact, round-to-nearest-even) and reading f32/bf16 matrices as f32.
#pragma once

#include <cstdint>
#include <cstring>

#include "moekit/core/error.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::detail {

inline float bf16_bits_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Round-to-nearest-even; NaN stays a (quiet) NaN.
inline std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// Checks that `t` is a host, contiguous, rank-2 f32 or bf16 matrix.
inline void check_host_matrix_f32_or_bf16(const TensorView& t, const char* where,
                                          const char* name) {
  if (!(t.rank() == 2)) throw_arg_error(where, std::string(name) + " rank", 2, t.rank());
  if (!(t.dtype == DType::kF32 || t.dtype == DType::kBF16))
    throw_arg_error(where, std::string(name) + " dtype", "f32 or bf16", dtype_name(t.dtype));
  if (!t.device.is_host())
    throw_arg_error(where, std::string(name) + " device", "host", t.device.str());
  if (!t.is_contiguous())
    throw_arg_error(where, std::string(name) + " layout", "contiguous", "strided");
}

// Copies `n` elements starting at element `offset` of an f32 or bf16 tensor into dst.
inline void load_f32(const TensorView& t, std::int64_t offset, std::int64_t n, float* dst) {
  if (t.dtype == DType::kF32) {
    std::memcpy(dst, t.ptr<const float>() + offset, static_cast<std::size_t>(n) * sizeof(float));
  } else {
    const auto* src = t.ptr<const std::uint16_t>() + offset;
    for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
  }
}

}  // namespace moekit::detail
