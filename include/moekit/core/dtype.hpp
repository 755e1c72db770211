// Element types moekit moves around. Packed FP4 (e2m1x2) stores two values per byte: element 2j in
// the low nibble, 2j+1 in the high nibble (docs/formats.md section 1); tensors of it are shaped in
// bytes, e.g. a [M, K] FP4 matrix is an e2m1x2 tensor of shape [M, K/2].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moekit {

enum class DType : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kE4M3,    // float8 e4m3fn
  kE8M0,    // unsigned power-of-two scale, bias 127
  kE2M1x2,  // two packed FP4 e2m1 values per byte
  kU8,
  kI32,
  kI64,
};

// Bytes per stored element (per byte-pair for e2m1x2, i.e. 1).
constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kE4M3: return 1;
    case DType::kE8M0: return 1;
    case DType::kE2M1x2: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kE4M3: return "e4m3";
    case DType::kE8M0: return "e8m0";
    case DType::kE2M1x2: return "e2m1x2";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

// Parses "f32", "bf16", ...; throws moekit::Error naming the accepted names otherwise.
DType parse_dtype(std::string_view name);

// Storage types. bf16 and f16 are kept as raw 16-bit patterns on the host side.
struct bf16_t {
  std::uint16_t bits;
};
struct f16_t {
  std::uint16_t bits;
};

}  // namespace moekit
