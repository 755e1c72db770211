// NaN / Inf counting (non_finite.hpp). Classified on the bits, so the scan is exact for every
// format and reads unaligned data through memcpy.
#include "io/non_finite.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "moekit/core/parallel.hpp"

namespace moekit::io::detail {

namespace {

enum class Kind { kFinite, kNaN, kInf };

// Exponent all ones: mantissa 0 is Inf, else NaN (IEEE formats).
template <typename Bits>
Kind ieee_kind(Bits bits, Bits exponent_mask, Bits mantissa_mask) {
  if ((bits & exponent_mask) != exponent_mask) return Kind::kFinite;
  return (bits & mantissa_mask) ? Kind::kNaN : Kind::kInf;
}

Kind kind_at(const std::uint8_t* p, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF32: {
      std::uint32_t b;
      std::memcpy(&b, p + 4 * i, 4);
      return ieee_kind<std::uint32_t>(b, 0x7F800000u, 0x007FFFFFu);
    }
    case DType::kF16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return ieee_kind<std::uint16_t>(b, 0x7C00u, 0x03FFu);
    }
    case DType::kBF16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return ieee_kind<std::uint16_t>(b, 0x7F80u, 0x007Fu);
    }
    case DType::kE4M3:
      return (p[i] & 0x7F) == 0x7F ? Kind::kNaN : Kind::kFinite;
    case DType::kE8M0:
      return p[i] == 0xFF ? Kind::kNaN : Kind::kFinite;
    default:
      return Kind::kFinite;
  }
}

bool has_special_values(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kE4M3 ||
         d == DType::kE8M0;
}

// "[17, 2]" for flat index 34 of a [M, 16] tensor.
std::string index_str(const Shape& shape, std::int64_t flat) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(shape.rank()), 0);
  for (int d = shape.rank() - 1; d >= 0; --d) {
    const std::int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[static_cast<std::size_t>(d)] = flat % n;
    flat /= n;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

std::string plural(std::int64_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? " value" : " values");
}

}  // namespace

NonFiniteCount count_non_finite(const TensorView& v) {
  NonFiniteCount total;
  if (!has_special_values(v.dtype) || v.numel() == 0 || !v.data) return total;
  const auto* p = static_cast<const std::uint8_t*>(v.data);
  std::mutex m;
  parallel_for(v.numel(), 1 << 20, [&](std::int64_t b, std::int64_t e) {
    NonFiniteCount c;
    for (std::int64_t i = b; i < e; ++i) {
      const Kind k = kind_at(p, v.dtype, i);
      if (k == Kind::kNaN && c.nan++ == 0) c.first_nan = i;
      if (k == Kind::kInf && c.inf++ == 0) c.first_inf = i;
    }
    if (!c.any()) return;
    std::lock_guard<std::mutex> lock(m);
    auto first = [](std::int64_t a, std::int64_t x) { return a < 0 ? x : x < 0 ? a : std::min(a, x); };
    total.first_nan = first(total.first_nan, c.first_nan);
    total.first_inf = first(total.first_inf, c.first_inf);
    total.nan += c.nan;
    total.inf += c.inf;
  });
  return total;
}

std::string non_finite_message(const TensorView& v) {
  const NonFiniteCount c = count_non_finite(v);
  if (!c.any()) return {};
  std::string s = "contains ";
  if (c.nan) s += plural(c.nan, "NaN") + ", first at " + index_str(v.shape, c.first_nan);
  if (c.nan && c.inf) s += ", and ";
  if (c.inf) s += plural(c.inf, "Inf") + ", first at " + index_str(v.shape, c.first_inf);
  return s;
}

}  // namespace moekit::io::detail
