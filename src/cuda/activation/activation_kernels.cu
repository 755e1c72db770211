// The activation kernels: the public activation_cuda / activation_quantize_cuda
// (moekit/activation/activation_cuda.hpp) and the experts' activation between the grouped GEMMs
// (gated_activation.hpp). One loader per precision computes 8 outputs of a row from its gate / up
// columns (gated_math.cuh); the writers are shared:
//   activation_rows_kernel   bf16 / f32 rows (public op, experts' bf16 path), rows bounded by a
//                            host count or a device count (graph-capturable experts);
//   activation_fp8_group_kernel  e4m3 in 1x128 groups with their scales (experts' fp8 path: GEMM2's
//                            input), 16 lanes per group;
//   quantize_chunked         every quantize scheme (public fused op), the quantize op's kernels,
//                            so it writes exactly what quantize(activation(x)) writes.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>

#include "cuda/activation/gated_activation.hpp"
#include "cuda/activation/gated_math.cuh"
#include "cuda/permute/permute_checks.hpp"
#include "cuda/quant/quant_device.cuh"
#include "cuda/quant/quantize_dispatch.cuh"
#include "cuda/quant/quantize_launch.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/runtime/sorted_search.cuh"
#include "moekit/activation/activation_cuda.hpp"
#include "moekit/core/error.hpp"

namespace moekit::cuda {
namespace {

using quant_detail::kChunk;
using quant_detail::load_chunk;

constexpr int kThreads = 256;

// ---- Loaders: 8 outputs (row, col .. col + 7) of an activation ---------------------------------

// The exact path (public op): every kind, gate/up halves or interleaved, f32 or bf16 input.
template <typename T, bool kVec>
struct ExactLoader {
  // Compute-bound (the float64 formula): one row per step of the quantize kernel keeps its
  // registers, hence its occupancy, where the plain loader takes several rows for bytes in flight.
  static constexpr int kRowsPerStep = 1;
  const T* in;
  std::int64_t inter, width;
  bool interleaved;
  ExactActivation p;
  __device__ __forceinline__ void operator()(std::int64_t row, std::int64_t col,
                                             float (&v)[kChunk]) const {
    const T* x = in + row * width;
    float g[kChunk], u[kChunk];
    const bool gated = p.kind != Activation::kRelu2;
    if (!gated) {
      load_chunk<T, kVec>(x, col, inter, g);
    } else if (interleaved) {
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
      v[i] = __double2float_rn(activation_f64(p, g[i], gated ? static_cast<double>(u[i]) : 1.0));
  }
};

__device__ __forceinline__ void load_bf16x8(const __nv_bfloat16* p, float (&v)[kChunk]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < kChunk / 2; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// The fast path (experts): bf16 [R, 2I] gate | up halves (+ GEMM1's per-expert bias, the row's
// expert found by a binary search of expert_offsets: rows are sorted by expert), gated_f32.
template <int kEpi, bool kBias>
struct FastLoader {
  const __nv_bfloat16* in;
  long long inter;
  float alpha, limit;
  const float* bias;   // [E, 2I] or null
  const int* offsets;  // [E + 1]
  int num_experts;
  __device__ __forceinline__ void operator()(long long r, long long c, float (&y)[kChunk]) const {
    float g[kChunk], u[kChunk];
    load_bf16x8(in + r * 2 * inter + c, g);
    load_bf16x8(in + r * 2 * inter + inter + c, u);
    if constexpr (kBias) {
      const float* b = bias + last_at_most(offsets, num_experts, r) * 2 * inter;
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        g[j] += b[c + j];
        u[j] += b[inter + c + j];
      }
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j) y[j] = gated_f32<kEpi>(g[j], u[j], alpha, limit);
  }
};

// ---- Writers -------------------------------------------------------------------------------------

__device__ __forceinline__ long long bounded_rows(long long max_rows, const int* num_rows) {
  return num_rows != nullptr ? min(static_cast<long long>(max(*num_rows, 0)), max_rows) : max_rows;
}

// out [rows, inter] bf16 / f32, 8 columns per step (kVec: inter % 8 == 0, 16-byte rows).
template <typename Loader, typename TOut, bool kVec>
__global__ void __launch_bounds__(kThreads)
    activation_rows_kernel(Loader load, TOut* __restrict__ out, long long max_rows,
                           long long inter, const int* __restrict__ num_rows) {
  const long long rows = bounded_rows(max_rows, num_rows);
  const long long vecs_per_row = (inter + kChunk - 1) / kChunk;
  const long long total = rows * vecs_per_row;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / vecs_per_row;
    const long long c = (i - r * vecs_per_row) * kChunk;
    float y[kChunk];
    load(r, c, y);
    TOut* o = out + r * inter + c;
    if constexpr (kVec && std::is_same_v<TOut, __nv_bfloat16>) {
      uint4 raw;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
      for (int j = 0; j < kChunk / 2; ++j) h[j] = __floats2bfloat162_rn(y[2 * j], y[2 * j + 1]);
      *reinterpret_cast<uint4*>(o) = raw;
    } else if constexpr (kVec) {
      reinterpret_cast<float4*>(o)[0] = make_float4(y[0], y[1], y[2], y[3]);
      reinterpret_cast<float4*>(o)[1] = make_float4(y[4], y[5], y[6], y[7]);
    } else {
      for (int j = 0; j < kChunk && c + j < inter; ++j) {
        if constexpr (std::is_same_v<TOut, __nv_bfloat16>) o[j] = __float2bfloat16_rn(y[j]);
        else o[j] = y[j];
      }
    }
  }
}

// e4m3 [rows, inter] in 1x128 groups (s = max(amax, 1e-10) / 448, q = e4m3(x / s), formats.md
// section 5) and their scales f32 [rows, inter / 128]: 16 lanes per group (8 values each), amax by
// shuffles within the 16 lanes. inter % 128 == 0.
template <typename Loader>
__global__ void __launch_bounds__(kThreads)
    activation_fp8_group_kernel(Loader load, __nv_fp8_e4m3* __restrict__ out,
                                float* __restrict__ scales, long long max_rows, long long inter,
                                const int* __restrict__ num_rows) {
  const long long rows = bounded_rows(max_rows, num_rows);
  const long long vecs_per_row = inter / kChunk;
  const long long total = rows * vecs_per_row;  // a multiple of 16: groups never straddle warps
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long begin = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  // Every lane of a 16-lane group runs the same number of iterations (total % 16 == 0 and the
  // grid stride is a multiple of 16), so the shuffles below always see their whole group.
  for (long long i = begin; i < total; i += stride) {
    const long long r = i / vecs_per_row;
    const long long c = (i - r * vecs_per_row) * kChunk;
    float y[kChunk];
    load(r, c, y);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) amax = fmaxf(amax, fabsf(y[j]));
    const unsigned half_mask = 0xffffu << (threadIdx.x & 16);  // this 16-lane group only
#pragma unroll
    for (int off = 8; off >= 1; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(half_mask, amax, off, 16));
    const float s = fmaxf(amax, 1e-10f) / 448.0f;
    unsigned long long packed = 0;
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const float q = fminf(fmaxf(__fdiv_rn(y[j], s), -448.0f), 448.0f);
      const __nv_fp8_storage_t b = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
      packed |= static_cast<unsigned long long>(b) << (8 * j);
    }
    *reinterpret_cast<unsigned long long*>(out + r * inter + c) = packed;
    if ((threadIdx.x & 15) == 0) scales[r * (inter / 128) + c / 128] = s;
  }
}

// Grid-stride launches: at most 16 CTAs per SM.
unsigned grid_for(long long rows, long long inter) {
  const int sms = current_device_multiprocessors();
  const long long work = rows * ((inter + kChunk - 1) / kChunk);
  const long long blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max(1ll, std::min(blocks, static_cast<long long>(sms) * 16)));
}

// ---- The experts' entry points -----------------------------------------------------------------

void check_rows(const void* gate_up, const void* out, std::int64_t max_rows,
                const std::int32_t* num_rows) {
  MOEKIT_CHECK_ARG(gate_up != nullptr, "gate_up", "a device pointer", "null");
  MOEKIT_CHECK_ARG(out != nullptr, "out", "a device pointer", "null");
  MOEKIT_CHECK_ARG(num_rows != nullptr, "num_rows", "a device pointer", "null");
  MOEKIT_CHECK_ARG(max_rows >= 0, "max_rows", ">= 0", max_rows);
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(gate_up) % 16 == 0, "gate_up",
                   "16-byte aligned", gate_up);
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(out) % 16 == 0, "out", "16-byte aligned",
                   out);
}

void check_act(const GatedActivationArgs& act, const char* where) {
  if (act.kind != Activation::kSiluAndMul && act.kind != Activation::kSwigluOai)
    throw_arg_error(where, "act.kind", "silu or swiglu_oai", activation_name(act.kind));
  if (act.kind == Activation::kSwigluOai) {
    if (!std::isfinite(act.swiglu_alpha))
      throw_arg_error(where, "act.swiglu_alpha", "finite", act.swiglu_alpha);
    if (!(std::isfinite(act.swiglu_limit) && act.swiglu_limit > 0.0f))
      throw_arg_error(where, "act.swiglu_limit", "finite and > 0", act.swiglu_limit);
  }
  if (act.bias != nullptr && act.expert_offsets == nullptr)
    throw_arg_error(where, "act.expert_offsets", "a device pointer (with act.bias)", "null");
  if (act.bias != nullptr && act.num_experts < 1)
    throw_arg_error(where, "act.num_experts", ">= 1 (with act.bias)", act.num_experts);
}

// Runs fn(FastLoader<kEpi, kBias>{...}) for the runtime kind and bias.
template <typename Fn>
void with_fast_loader(const void* gate_up, std::int64_t inter, const GatedActivationArgs& act,
                      Fn&& fn) {
  auto make = [&](auto epi, auto bias) {
    constexpr int kEpi = decltype(epi)::value;
    constexpr bool kBias = decltype(bias)::value;
    fn(FastLoader<kEpi, kBias>{static_cast<const __nv_bfloat16*>(gate_up), inter,
                               act.swiglu_alpha, act.swiglu_limit, act.bias, act.expert_offsets,
                               act.num_experts});
  };
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  using Yes = std::true_type;
  using No = std::false_type;
  const bool swiglu = act.kind == Activation::kSwigluOai, bias = act.bias != nullptr;
  if (swiglu && bias) make(Two{}, Yes{});
  else if (swiglu) make(Two{}, No{});
  else if (bias) make(One{}, Yes{});
  else make(One{}, No{});
}

}  // namespace

void gated_activation_bf16(const void* gate_up, void* out, std::int64_t max_rows,
                           std::int64_t intermediate, const std::int32_t* num_rows,
                           const GatedActivationArgs& act, StreamHandle stream) {
  check_rows(gate_up, out, max_rows, num_rows);
  MOEKIT_CHECK_ARG(intermediate > 0 && intermediate % 8 == 0, "intermediate",
                   "a positive multiple of 8", intermediate);
  check_act(act, "gated_activation_bf16");
  if (max_rows == 0) return;
  with_fast_loader(gate_up, intermediate, act, [&](auto load) {
    activation_rows_kernel<decltype(load), __nv_bfloat16, true>
        <<<grid_for(max_rows, intermediate), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            load, static_cast<__nv_bfloat16*>(out), max_rows, intermediate, num_rows);
  });
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void gated_activation_quant_fp8_block(const void* gate_up, void* out_values, float* out_scales,
                                      std::int64_t max_rows, std::int64_t intermediate,
                                      const std::int32_t* num_rows,
                                      const GatedActivationArgs& act, StreamHandle stream) {
  check_rows(gate_up, out_values, max_rows, num_rows);
  MOEKIT_CHECK_ARG(out_scales != nullptr, "out_scales", "a device pointer", "null");
  MOEKIT_CHECK_ARG(intermediate > 0 && intermediate % 128 == 0, "intermediate",
                   "a positive multiple of 128", intermediate);
  check_act(act, "gated_activation_quant_fp8_block");
  if (max_rows == 0) return;
  with_fast_loader(gate_up, intermediate, act, [&](auto load) {
    activation_fp8_group_kernel<decltype(load)>
        <<<grid_for(max_rows, intermediate), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
            load, static_cast<__nv_fp8_e4m3*>(out_values), out_scales, max_rows, intermediate,
            num_rows);
  });
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda

// ---- The public ops ----------------------------------------------------------------------------

namespace moekit {
namespace {

using cuda::quant_detail::kChunk;

struct Problem {
  std::int64_t rows = 0, width = 0, inter = 0;
  cuda::ExactActivation p;
  bool interleaved = false;
  bool vec = false;  // 16-byte loads of the input
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
                     std::string("even (gate and up) for ") +
                         std::string(activation_name(config.kind)),
                     pr.width);
  }
  pr.inter = gated ? pr.width / 2 : pr.width;
  pr.p.kind = config.kind;
  pr.interleaved = config.layout == GateUpLayout::kInterleaved;
  pr.p.alpha = config.swiglu_alpha;
  pr.p.limit = config.swiglu_limit;
  pr.p.tanh_c = std::sqrt(2.0 / std::numbers::pi);
  pr.p.inv_sqrt2 = 1.0 / std::numbers::sqrt2;
  pr.vec = pr.inter % kChunk == 0 && reinterpret_cast<std::uintptr_t>(in.data) % 16 == 0;
  return pr;
}

template <typename Fn>
void with_exact_loader(const TensorView& in, const Problem& pr, Fn&& fn) {
  auto go = [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* x = static_cast<const T*>(in.data);
    if (pr.vec) {
      fn(cuda::ExactLoader<T, true>{x, pr.inter, pr.width, pr.interleaved, pr.p});
    } else {
      fn(cuda::ExactLoader<T, false>{x, pr.inter, pr.width, pr.interleaved, pr.p});
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
  if (pr.rows * pr.inter == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const bool vec_out = pr.vec && reinterpret_cast<std::uintptr_t>(out.data) % 16 == 0;
  const unsigned grid = cuda::grid_for(pr.rows, pr.inter);
  with_exact_loader(in, pr, [&](auto load) {
    using L = decltype(load);
    auto run = [&](auto* o) {
      using TOut = std::remove_pointer_t<decltype(o)>;
      if (vec_out)
        cuda::activation_rows_kernel<L, TOut, true>
            <<<grid, cuda::kThreads, 0, s>>>(load, o, pr.rows, pr.inter, nullptr);
      else
        cuda::activation_rows_kernel<L, TOut, false>
            <<<grid, cuda::kThreads, 0, s>>>(load, o, pr.rows, pr.inter, nullptr);
    };
    if (out.dtype == DType::kBF16) run(static_cast<__nv_bfloat16*>(out.data));
    else run(static_cast<float*>(out.data));
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
  with_exact_loader(in, pr, [&](auto load) {
    handled = cuda::quant_detail::quantize_chunked(
        a, quant.scheme, load, out, static_scale.defined() ? static_scale.data : nullptr, s);
  });
  MOEKIT_CHECK_ARG(handled, "quant.scheme",
                   "bf16, fp8_tensor, fp8_1x128, mxfp8, mxfp4 or nvfp4 for the fused activation",
                   scheme_name(quant.scheme));
}

}  // namespace moekit
