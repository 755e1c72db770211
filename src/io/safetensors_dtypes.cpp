#include "io/safetensors_dtypes.hpp"

#include <array>

#include "moekit/core/error.hpp"
#include "moekit/io/safetensors.hpp"

namespace moekit::io {
namespace detail {

namespace {
constexpr std::array<StDtype, 20> kTable{{
    {"BOOL", 8, std::nullopt},    {"F4", 4, DType::kE2M1x2},    {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt}, {"U8", 8, DType::kU8},        {"I8", 8, std::nullopt},
    {"F8_E5M2", 8, std::nullopt}, {"F8_E4M3", 8, DType::kE4M3}, {"F8_E8M0", 8, DType::kE8M0},
    {"I16", 16, std::nullopt},    {"U16", 16, std::nullopt},    {"F16", 16, DType::kF16},
    {"BF16", 16, DType::kBF16},   {"I32", 32, DType::kI32},     {"U32", 32, std::nullopt},
    {"F32", 32, DType::kF32},     {"F64", 64, std::nullopt},    {"I64", 64, DType::kI64},
    {"U64", 64, std::nullopt},    {"C64", 64, std::nullopt},
}};
}  // namespace

const StDtype* find_st_dtype(std::string_view name) {
  for (const auto& d : kTable)
    if (d.name == name) return &d;
  return nullptr;
}

std::string_view known_st_dtype_names() {
  return "one of BOOL|F4|F6_E2M3|F6_E3M2|U8|I8|F8_E5M2|F8_E4M3|F8_E8M0|I16|U16|F16|BF16|I32|U32|"
         "F32|F64|I64|U64|C64";
}
std::string_view supported_st_dtype_names() { return "F4|U8|F8_E4M3|F8_E8M0|F16|BF16|I32|F32|I64"; }

}  // namespace detail

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  const detail::StDtype* d = detail::find_st_dtype(name);
  return d ? d->dtype : std::nullopt;
}

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kE4M3:
      return "F8_E4M3";
    case DType::kE8M0:
      return "F8_E8M0";
    case DType::kE2M1x2:
      return "U8";
    case DType::kU8:
      return "U8";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
  }
  MOEKIT_FAIL("safetensors_dtype_name: dtype: expected a moekit DType, got ", static_cast<int>(t));
}

}  // namespace moekit::io
