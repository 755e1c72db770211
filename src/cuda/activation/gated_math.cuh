// The activations on the GPU, element by element, in two precisions:
//   fast (fp32): the experts' activation between the GEMMs and the W4A16 / decode / wgmma GEMM
//     epilogues. kEpi 1: SiLU-and-mul silu(g) * u; kEpi 2: SwiGLU-OAI g' = min(g, limit),
//     u' = clamp(u, -limit, limit), g' * sigmoid(alpha * g') * (u' + 1) (gpt-oss). __expf: fast
//     exponential (max 2 ulp + the argument's rounding); the GPU layers' bounds cover it
//     (tests/cuda/layer/cuda_layer_test.cpp).
//   exact (float64): the public activation ops (moekit/activation/activation_cuda.hpp):
//     activation_scalar() of activation.hpp operation by operation (RN, never contracted), every
//     kind, rounded once to fp32: within 1 fp32 ulp of the CPU reference.
// The clamps are fminf / fmaxf (fmin / fmax), like the reference's std::fmin / std::fmax: a NaN
// gate or up becomes the bound it is clamped to.
#pragma once

#include <cuda_runtime.h>

#include "moekit/activation/activation.hpp"

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

// The exact path's constants (tanh_c and inv_sqrt2 computed on the host as the reference does).
struct ExactActivation {
  Activation kind = Activation::kSiluAndMul;
  double alpha = 1.702, limit = 7.0;
  double tanh_c = 0.0;     // sqrt(2/pi)
  double inv_sqrt2 = 0.0;  // 1 / sqrt(2)
};

__device__ __forceinline__ double activation_f64(const ExactActivation& p, double g, double u) {
  switch (p.kind) {
    case Activation::kSiluAndMul:
      return __dmul_rn(__ddiv_rn(g, __dadd_rn(1.0, exp(-g))), u);
    case Activation::kGeluErfAndMul: {
      const double e = erf(__dmul_rn(g, p.inv_sqrt2));
      return __dmul_rn(__dmul_rn(__dmul_rn(0.5, g), __dadd_rn(1.0, e)), u);
    }
    case Activation::kGeluTanhAndMul: {
      const double cube = __dmul_rn(__dmul_rn(__dmul_rn(0.044715, g), g), g);
      const double t = tanh(__dmul_rn(p.tanh_c, __dadd_rn(g, cube)));
      return __dmul_rn(__dmul_rn(__dmul_rn(0.5, g), __dadd_rn(1.0, t)), u);
    }
    case Activation::kSwigluOai: {
      const double glu = fmin(g, p.limit);
      const double lin = fmax(-p.limit, fmin(u, p.limit));
      const double sig = __ddiv_rn(glu, __dadd_rn(1.0, exp(__dmul_rn(-p.alpha, glu))));
      return __dmul_rn(sig, __dadd_rn(lin, 1.0));
    }
    case Activation::kRelu2: {
      const double r = g > 0.0 ? g : 0.0;
      return __dmul_rn(r, r);
    }
  }
  return 0.0;
}

}  // namespace moekit::cuda
