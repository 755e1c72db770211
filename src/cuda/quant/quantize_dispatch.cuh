// Runtime -> compile-time dispatch for the quantize kernels: input dtype (bf16 / f16 / f32) and
// whether rows can be read with 16-byte vectors. Fails naming the offending dtype.
#pragma once

#include <cstdint>
#include <type_traits>

#include "moekit/core/dtype.hpp"
#include "moekit/core/error.hpp"

namespace moekit::cuda::quant_detail {

template <typename T>
struct TypeTag {
  using type = T;
};

// K % 8 == 0 and a 16-byte aligned base: every 8-element chunk is one (bf16/f16) or two (f32)
// aligned 16-byte loads.
inline bool can_vectorize(const void* base, DType dtype, std::int64_t k) {
  return k % 8 == 0 && reinterpret_cast<std::uintptr_t>(base) % 16 == 0 &&
         (dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32);
}

// fn(TypeTag<T>{}, std::integral_constant<bool, vec>{}).
template <typename Fn>
void dispatch_input(DType dtype, bool vec, Fn&& fn) {
  auto with_vec = [&](auto tag) {
    if (vec) {
      fn(tag, std::true_type{});
    } else {
      fn(tag, std::false_type{});
    }
  };
  switch (dtype) {
    case DType::kF32: with_vec(TypeTag<float>{}); return;
    case DType::kBF16: with_vec(TypeTag<bf16_t>{}); return;
    case DType::kF16: with_vec(TypeTag<f16_t>{}); return;
    default: break;
  }
  throw_arg_error("quantize(cuda)", "x.dtype", "f32, f16 or bf16", dtype_name(dtype));
}

}  // namespace moekit::cuda::quant_detail
