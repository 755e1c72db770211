// NaN / Inf in a tensor, counted and located, so that an input carrying them is reported as such
// ("tensor 'hidden_states' contains 3 NaN values, first at [17, 2]") before anything runs on it,
// instead of surfacing as a failed check or garbage output downstream.
#pragma once

#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"

namespace moekit::io::detail {

struct NonFiniteCount {
  std::int64_t nan = 0, inf = 0;
  std::int64_t first_nan = -1, first_inf = -1;  // flat element indices, -1 when none
  bool any() const { return nan + inf > 0; }
};

// f32, f16, bf16 (NaN, +-Inf), e4m3 (NaN codes 0x7F/0xFF; it has no Inf), e8m0 (NaN code 0xFF).
// Other dtypes (integers, packed e2m1, which has neither) count nothing. The view may be
// unaligned (a mapped file). Host only.
NonFiniteCount count_non_finite(const TensorView& v);

// "" when the tensor is finite, else "contains 3 NaN values, first at [17, 2]" (and / or the
// Inf values).
std::string non_finite_message(const TensorView& v);

}  // namespace moekit::io::detail
