// The gated activations of the GPU experts in fp32: the W4A16 / decode GEMM epilogues and the
// activation kernels between the grouped GEMMs evaluate the same expressions.
//   kEpi 1: SiLU-and-mul      silu(g) * u
//   kEpi 2: SwiGLU-OAI        g' = min(g, limit), u' = clamp(u, -limit, limit),
//                             g' * sigmoid(alpha * g') * (u' + 1)   (gpt-oss)
// __expf: fast exponential (max 2 ulp + the argument's rounding); the reference is float64
// (activation.hpp), the GPU layers' bounds cover it (tests/cuda/layer/cuda_layer_test.cpp).
// The clamps are fminf / fmaxf, like the reference's std::fmin / std::fmax: a NaN gate or up
// becomes the bound it is clamped to.
#pragma once

#include <cuda_runtime.h>

namespace moekit::cuda {

__device__ __forceinline__ float silu_f32(float x) { return x / (1.0f + __expf(-x)); }

template <int kEpi>  // 1 silu-and-mul, 2 swiglu-oai
__device__ __forceinline__ float gated_f32(float g, float u, float alpha, float limit) {
  static_assert(kEpi == 1 || kEpi == 2, "gated activation kind");
  if constexpr (kEpi == 1) {
    return silu_f32(g) * u;
  } else {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return g / (1.0f + __expf(-alpha * g)) * (u + 1.0f);
  }
}

}  // namespace moekit::cuda
