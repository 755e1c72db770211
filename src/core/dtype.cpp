#include "moekit/core/dtype.hpp"

#include <string>

#include "moekit/core/error.hpp"

namespace moekit {

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kE4M3, DType::kE8M0, DType::kE2M1x2,
                  DType::kU8, DType::kI32, DType::kI64}) {
    if (dtype_name(t) == name) return t;
  }
  throw_arg_error("parse_dtype", "dtype", "one of f32|f16|bf16|e4m3|e8m0|e2m1x2|u8|i32|i64",
                  std::string(name));
}

}  // namespace moekit
