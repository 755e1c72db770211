// The safetensors dtype table (huggingface/safetensors: safetensors/src/tensor.rs, Dtype).
#pragma once

#include <optional>
#include <string_view>

#include "moekit/core/dtype.hpp"

namespace moekit::io::detail {

struct StDtype {
  std::string_view name;
  int bits;                    // per element
  std::optional<DType> dtype;  // moekit's type, if any
};

// nullptr for names safetensors does not define.
const StDtype* find_st_dtype(std::string_view name);
// "one of BOOL|U8|..." for error messages.
std::string_view known_st_dtype_names();
std::string_view supported_st_dtype_names();  // those with a moekit DType

}  // namespace moekit::io::detail
