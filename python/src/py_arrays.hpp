// DLPack arrays <-> moekit TensorViews for the Python extension (moekit._C).
//
// Every array argument arrives as a Python object (a DLPack capsule, an object with __dlpack__, or
// a buffer-protocol object such as a numpy array) and is imported zero-copy with nanobind's
// ndarray caster. The checks here turn every mismatch into a ValueError / TypeError that names the
// argument, the expected and the actual value; nothing reaches the C++ library unchecked.
//
// Dtypes: float32/float16/bfloat16/int32/int64/uint8 map to the moekit DType of the same name.
// Byte types (float8_e4m3fn, float8_e8m0fnu, packed fp4) arrive either with their DLPack code or as
// uint8 (numpy has no such types): the expected dtype of the argument decides. uint16 is read as
// raw bfloat16 bits wherever bfloat16 is accepted (numpy has no bfloat16 either).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "moekit/core/tensor.hpp"

namespace moekit::py {

namespace nb = nanobind;

using Array = nb::ndarray<nb::ro>;

// A DLPack import kept alive together with its TensorView.
struct ArrayArg {
  Array array;
  TensorView view;
  bool bf16_bits = false;  // arrived as uint16 (raw bfloat16 bits)
  bool defined() const { return view.defined(); }
};

// Imports `obj` (None -> absent when optional). Throws TypeError when it is not an array, and
// ValueError for an unsupported dtype or device, a rank above 6 or a non-contiguous layout.
ArrayArg import_array(nb::handle obj, const char* name, bool optional = false);

// "bfloat16", "float8_e4m3fn", ... for messages (what the caller's framework calls the dtype).
std::string dtype_label(DType t);
// "cpu" / "cuda:0".
std::string device_label(const Device& d);

// ValueError("<name>: expected <expected>, got <actual>").
[[noreturn]] void value_error(const std::string& name, const std::string& expected,
                              const std::string& actual);
[[noreturn]] void type_error(const std::string& name, const std::string& expected,
                             const std::string& actual);

// Checks the view's dtype against `allowed` (byte types also accept u8, bf16 also accepts uint16
// bits) and rewrites view.dtype to the matching allowed dtype. ValueError otherwise.
void expect_dtype(ArrayArg& a, const char* name, std::initializer_list<DType> allowed);
// Checks the shape; -1 in `shape` matches any extent.
void expect_shape(const ArrayArg& a, const char* name, const std::vector<std::int64_t>& shape);
void expect_rank(const ArrayArg& a, const char* name, int rank);
void expect_device(const ArrayArg& a, const char* name, const Device& device);

std::string shape_label(const Shape& s);
std::string shape_label(const std::vector<std::int64_t>& s);  // -1 printed as '*'

// An owning array of `dtype` and `shape` on `device` (host or CUDA), for frameworks whose own
// allocator moekit cannot reach; the caller imports it with its from_dlpack. Byte types are
// exported as uint8, bfloat16 as DLPack bfloat16.
nb::object empty_array(const std::vector<std::int64_t>& shape, DType dtype, Device device,
                       bool bf16_as_uint16 = false);
// The data pointer of an array made by empty_array.
void* owned_array_data(nb::handle obj);
void register_owned_array(nb::module_& m);

}  // namespace moekit::py
