// Shared helpers of the moekit._C bindings: parsing of the small config vocabulary and the
// CUDA-stream handle.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>

#include "moekit/core/tensor.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit::py {

namespace nb = nanobind;

// Python passes a stream as an int (a cudaStream_t value; 0 = the legacy default stream).
inline StreamHandle stream_of(std::uintptr_t s) { return reinterpret_cast<StreamHandle>(s); }

// "cpu" -> host, "cuda" / "cuda:N" -> CUDA device N; ValueError naming `what` otherwise.
Device parse_device(const std::string& text, const char* what);

// QuantConfig from scheme / layout / rule strings (moekit::Error, a ValueError, when unknown).
QuantConfig quant_config(const std::string& scheme, const std::string& layout,
                         const std::string& rule);

// moekit runs its CUDA kernels on device 0.
void check_cuda_device_supported(const Device& d, const char* what);

void register_quant(nb::module_& m);
void register_layer(nb::module_& m);

}  // namespace moekit::py
