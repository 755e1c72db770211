// Private helpers of the checkpoint loaders: checked tensor lookup and dtype conversions. Tensor
// data in a mapping may be unaligned, so everything is read through memcpy.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "moekit/core/error.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/io/checkpoint.hpp"

namespace moekit::io::detail {

// "checkpoint '<dir>': tensor '<name>' <field>: expected <e>, got <a>".
template <typename E, typename A>
[[noreturn]] void fail_tensor(const Checkpoint& ck, const std::string& name,
                              const std::string& field, const E& expected, const A& actual) {
  throw_arg_error(("checkpoint '" + ck.dir() + "'").c_str(),
                  "tensor '" + name + "'" + (field.empty() ? "" : " " + field), expected, actual);
}

// The tensor `name`, checked for presence, dtype (one of `dtypes`), shape and NaN / Inf values
// (check_finite).
TensorView require_tensor(const Checkpoint& ck, const std::string& name,
                          std::initializer_list<DType> dtypes, const Shape& shape);
// Like require_tensor but returns an absent view when the tensor is not there.
TensorView optional_tensor(const Checkpoint& ck, const std::string& name,
                           std::initializer_list<DType> dtypes, const Shape& shape);
// Throws "checkpoint '<dir>': tensor '<name>' contains 3 NaN values, first at [17, 2]" when the
// view holds NaN or Inf (non_finite.hpp).
void check_finite(const Checkpoint& ck, const std::string& name, const TensorView& v);
// A scalar (shape [] or [1]) f32/bf16/f16 tensor as a float.
float read_scalar(const Checkpoint& ck, const std::string& name);

// Converts n elements of an f32/bf16/f16 view (possibly unaligned) to f32.
void to_f32(const TensorView& src, float* dst);
// An owning f32 copy of an f32/bf16/f16 view.
Tensor to_f32_tensor(const TensorView& src);
// An owning copy of any view (same dtype and shape).
Tensor clone(const TensorView& src);

float half_bits_to_float(std::uint16_t h);

}  // namespace moekit::io::detail
