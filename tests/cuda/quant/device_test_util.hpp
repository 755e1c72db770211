// Helpers for the CUDA kernel tests (quant, routing, permute, finalize, activation): host <-> device
// tensors, output poisoning, byte comparison, ulp distance, and a logged seed.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.hpp"
#include "framework/seed_util.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::cuda_test {

using moekit::testing::test_seed;

// Device copy of a host tensor (same dtype and shape).
inline Tensor to_device(const TensorView& host) {
  Tensor d(host.dtype, host.shape, Device::cuda());
  copy(d.view(), host);
  return d;
}

inline Tensor to_host(const TensorView& dev) {
  Tensor h(dev.dtype, dev.shape);
  copy(h.view(), dev);
  return h;
}

// Fills a device tensor's bytes with `byte` (the poison that every kernel must overwrite).
inline void poison(const TensorView& t, int byte) {
  if (t.defined() && t.nbytes() > 0) {
    ASSERT_EQ(cudaMemset(t.data, byte, t.nbytes()), cudaSuccess);
  }
}

inline void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

// Byte-for-byte equality of a host reference and a device result; reports the first mismatch.
inline ::testing::AssertionResult bytes_equal(const TensorView& ref, const TensorView& dev,
                                              const std::string& what) {
  if (ref.nbytes() != dev.nbytes()) {
    return ::testing::AssertionFailure() << what << ": size " << ref.nbytes() << " vs "
                                         << dev.nbytes();
  }
  Tensor h = to_host(dev);
  const auto* a = static_cast<const std::uint8_t*>(ref.data);
  const auto* b = static_cast<const std::uint8_t*>(h.data());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < ref.nbytes(); ++i) {
    if (a[i] != b[i]) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << ref.nbytes() << " bytes differ; first at byte "
         << first << " (ref 0x" << std::hex << int(a[first]) << ", cuda 0x" << int(b[first]) << ")";
}

inline std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Distance in units in the last place between two finite floats of the same sign (or zeros).
inline std::int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) {
    const std::int64_t u = f32_bits(f);
    return (u & 0x80000000) ? -(u & 0x7FFFFFFF) : u;
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

// A random fp32 value with magnitudes spread over ~2^-12 .. 2^12 (never all zeros).
inline float spread_value(std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-12, 12);
  return std::ldexp(n(rng), e(rng));
}

inline std::uint16_t to_bf16_bits(float f) {
  std::uint32_t u = f32_bits(f);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

}  // namespace moekit::cuda_test
