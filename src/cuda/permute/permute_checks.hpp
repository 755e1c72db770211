// Internal: argument checks shared by the CUDA permute / finalize launchers (device tensors).
#pragma once

#include <cstdint>
#include <string>

#include "moekit/core/error.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::permute_detail {

inline void check_device(const TensorView& t, const std::string& name) {
  MOEKIT_CHECK_ARG(t.defined(), name, "a tensor", "absent");
  MOEKIT_CHECK_ARG(t.device.is_cuda(), name + " device", "cuda", t.device.str());
  MOEKIT_CHECK_ARG(t.is_contiguous(), name + " layout", "contiguous", "strided");
}

inline void check_i32_device(const TensorView& t, const std::string& name, int rank) {
  check_device(t, name);
  MOEKIT_CHECK_ARG(t.dtype == DType::kI32, name + " dtype", "i32", dtype_name(t.dtype));
  MOEKIT_CHECK_ARG(t.rank() == rank, name + " rank", rank, t.rank());
}

// Bytes of one row (all dims after the first `lead` ones).
inline std::int64_t row_bytes(const TensorView& t, int lead) {
  std::int64_t n = 1;
  for (int d = lead; d < t.rank(); ++d) n *= t.size(d);
  return n * static_cast<std::int64_t>(dtype_size(t.dtype));
}

// out has src's dtype and trailing dims, with `out_lead` leading dims in place of src's first.
inline void check_rows_compatible(const TensorView& src, const TensorView& out, int out_lead,
                                  const char* out_name) {
  check_device(src, "src");
  MOEKIT_CHECK_ARG(src.rank() >= 1, "src rank", ">= 1", src.rank());
  check_device(out, out_name);
  MOEKIT_CHECK_ARG(out.dtype == src.dtype, std::string(out_name) + " dtype", dtype_name(src.dtype),
                   dtype_name(out.dtype));
  MOEKIT_CHECK_ARG(out.rank() == src.rank() - 1 + out_lead, std::string(out_name) + " rank",
                   src.rank() - 1 + out_lead, out.rank());
  for (int d = 1; d < src.rank(); ++d) {
    MOEKIT_CHECK_ARG(out.size(d - 1 + out_lead) == src.size(d), std::string(out_name) + " shape",
                     "trailing dims of src " + src.shape.str(), out.shape.str());
  }
}

}  // namespace moekit::permute_detail
