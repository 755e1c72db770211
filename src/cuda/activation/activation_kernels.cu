// activation_cuda and activation_quantize_cuda (include/moekit/activation/activation_cuda.hpp).
// The activation is a chunk loader (8 outputs from GEMM1's gate/up columns, float64 math) plugged
// into the same chunk-quantize kernels as the plain quantize op, so the fused op writes exactly
// what quantize(activation(x)) writes, without the [T, I] intermediate in memory.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "cuda/permute/permute_checks.hpp"
#include "cuda/quant/quant_device.cuh"
#include "cuda/quant/quantize_dispatch.cuh"
#include "cuda/quant/quantize_launch.cuh"
#include "moekit/activation/activation_cuda.hpp"
#include "moekit/core/error.hpp"

namespace moekit {

namespace {

using cuda::quant_detail::kChunk;
using cuda::quant_detail::load_chunk;

struct ActParams {
  Activation kind = Activation::kSiluAndMul;
  bool interleaved = false;
  double alpha = 1.702, limit = 7.0;
  double tanh_c = 0.0;     // sqrt(2/pi), computed on the host exactly as the reference does
  double inv_sqrt2 = 0.0;  // 1 / sqrt(2), likewise
};

// activation_scalar() of activation.hpp, operation by operation (RN, never contracted).
__device__ __forceinline__ double act_scalar(const ActParams& p, double g, double u) {
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

// 8 activation outputs (row, col .. col+7) of an [rows, width] GEMM1 output.
template <typename T, bool kVec>
struct ActLoader {
  // Compute-bound (the float64 activation formula): one row per step of the quantize kernel keeps
  // its registers, hence its occupancy, where the plain loader takes several rows for bytes in
  // flight.
  static constexpr int kRowsPerStep = 1;
  const T* in;
  std::int64_t inter, width;
  ActParams p;
  __device__ __forceinline__ void operator()(std::int64_t row, std::int64_t col,
                                             float (&v)[kChunk]) const {
    const T* x = in + row * width;
    float g[kChunk], u[kChunk];
    const bool gated = p.kind != Activation::kRelu2;
    if (!gated) {
      load_chunk<T, kVec>(x, col, inter, g);
    } else if (p.interleaved) {
      float a[kChunk], b[kChunk];
      load_chunk<T, kVec>(x, 2 * col, width, a);
      load_chunk<T, kVec>(x, 2 * col + kChunk, width, b);
#pragma unroll
      for (int i = 0; i < kChunk / 2; ++i) {
        g[i] = a[2 * i], u[i] = a[2 * i + 1];
        g[i + kChunk / 2] = b[2 * i], u[i + kChunk / 2] = b[2 * i + 1];
      }
    } else {
      load_chunk<T, kVec>(x, col, inter, g);
      load_chunk<T, kVec>(x + inter, col, inter, u);
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      v[i] = __double2float_rn(act_scalar(p, g[i], gated ? static_cast<double>(u[i]) : 1.0));
  }
};

template <typename Loader, bool kOutBf16>
__global__ void __launch_bounds__(256) activation_kernel(Loader load, void* out, std::int64_t rows,
                                                         std::int64_t inter) {
  const std::int64_t per_row = (inter + kChunk - 1) / kChunk;
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * per_row) return;
  const std::int64_t r = i / per_row;
  const std::int64_t col = (i - r * per_row) * kChunk;
  float v[kChunk];
  load(r, col, v);
  for (int c = 0; c < kChunk && col + c < inter; ++c) {
    if constexpr (kOutBf16) {
      static_cast<std::uint16_t*>(out)[r * inter + col + c] = float_to_bf16(v[c]);
    } else {
      static_cast<float*>(out)[r * inter + col + c] = v[c];
    }
  }
}

struct Problem {
  std::int64_t rows = 0, width = 0, inter = 0;
  ActParams p;
  bool vec = false;
};

Problem check_and_describe(const TensorView& in, const ActivationConfig& config) {
  config.validate();
  permute_detail::check_device(in, "in");
  MOEKIT_CHECK_ARG(in.rank() == 2, "in rank", 2, in.rank());
  MOEKIT_CHECK_ARG(in.dtype == DType::kF32 || in.dtype == DType::kBF16, "in dtype", "f32 or bf16",
                   dtype_name(in.dtype));
  Problem pr;
  pr.rows = in.size(0);
  pr.width = in.size(1);
  const bool gated = is_gated(config.kind);
  if (gated) {
    MOEKIT_CHECK_ARG(pr.width % 2 == 0, "in.shape[1]",
                     std::string("even (gate and up) for ") + std::string(activation_name(config.kind)),
                     pr.width);
  }
  pr.inter = gated ? pr.width / 2 : pr.width;
  pr.p.kind = config.kind;
  pr.p.interleaved = config.layout == GateUpLayout::kInterleaved;
  pr.p.alpha = config.swiglu_alpha;
  pr.p.limit = config.swiglu_limit;
  pr.p.tanh_c = std::sqrt(2.0 / std::numbers::pi);
  pr.p.inv_sqrt2 = 1.0 / std::numbers::sqrt2;
  pr.vec = pr.inter % kChunk == 0 && reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0;
  return pr;
}

template <typename Fn>
void with_loader(const TensorView& in, const Problem& pr, Fn&& fn) {
  auto go = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (pr.vec) {
      fn(ActLoader<T, true>{static_cast<const T*>(in.data), pr.inter, pr.width, pr.p});
    } else {
      fn(ActLoader<T, false>{static_cast<const T*>(in.data), pr.inter, pr.width, pr.p});
    }
  };
  if (in.dtype == DType::kBF16) {
    go(cuda::quant_detail::TypeTag<bf16_t>{});
  } else {
    go(cuda::quant_detail::TypeTag<float>{});
  }
}

}  // namespace

void activation_cuda(const TensorView& in, const ActivationConfig& config, const TensorView& out,
                     StreamHandle stream) {
  const Problem pr = check_and_describe(in, config);
  permute_detail::check_device(out, "out");
  MOEKIT_CHECK_ARG(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "out dtype",
                   "f32 or bf16", dtype_name(out.dtype));
  const Shape expected{pr.rows, pr.inter};
  MOEKIT_CHECK_ARG(out.shape == expected, "out shape", expected.str(), out.shape.str());
  const std::int64_t threads = pr.rows * ((pr.inter + kChunk - 1) / kChunk);
  if (threads == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = cuda::quant_detail::blocks_for(threads);
  with_loader(in, pr, [&](auto load) {
    if (out.dtype == DType::kBF16) {
      activation_kernel<decltype(load), true><<<blocks, 256, 0, s>>>(load, out.data, pr.rows, pr.inter);
    } else {
      activation_kernel<decltype(load), false><<<blocks, 256, 0, s>>>(load, out.data, pr.rows, pr.inter);
    }
  });
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void activation_quantize_cuda(const TensorView& in, const ActivationConfig& config,
                              const QuantConfig& quant, const QuantizedView& out,
                              const TensorView& static_scale, StreamHandle stream) {
  const Problem pr = check_and_describe(in, config);
  const QuantShapes shapes = infer_quant_shapes(Shape{pr.rows, pr.inter}, quant);
  permute_detail::check_device(out.values, "out.values");
  MOEKIT_CHECK_ARG(out.values.shape == shapes.values && out.values.dtype == shapes.value_dtype,
                   "out.values", std::string(dtype_name(shapes.value_dtype)) + shapes.values.str(),
                   out.values.str());
  if (shapes.scales.rank() > 0) {
    permute_detail::check_device(out.scales, "out.scales");
    MOEKIT_CHECK_ARG(out.scales.shape == shapes.scales && out.scales.dtype == shapes.scale_dtype,
                     "out.scales", std::string(dtype_name(shapes.scale_dtype)) + shapes.scales.str(),
                     out.scales.str());
  }
  if (shapes.has_global_scale) {
    permute_detail::check_device(out.global_scale, "out.global_scale");
    MOEKIT_CHECK_ARG(out.global_scale.shape == shapes.global_scale, "out.global_scale shape",
                     shapes.global_scale.str(), out.global_scale.shape.str());
  }
  if (static_scale.defined()) {
    permute_detail::check_device(static_scale, "static_scale");
    MOEKIT_CHECK_ARG(static_scale.dtype == DType::kF32 && static_scale.numel() == 1, "static_scale",
                     "f32 [1]", static_scale.str());
  }
  auto s = static_cast<cudaStream_t>(stream);
  auto a = cuda::quant_detail::make_quant_args(1, pr.rows, pr.inter, quant, out);
  bool handled = false;
  with_loader(in, pr, [&](auto load) {
    handled = cuda::quant_detail::quantize_chunked(
        a, quant.scheme, load, out, static_scale.defined() ? static_scale.data : nullptr, s);
  });
  MOEKIT_CHECK_ARG(handled, "quant.scheme",
                   "bf16, fp8_tensor, fp8_1x128, mxfp8, mxfp4 or nvfp4 for the fused activation",
                   scheme_name(quant.scheme));
}

}  // namespace moekit
