// The gated activation between the grouped GEMMs: [R, 2I] bf16 (gate | up halves, optionally plus
// GEMM1's per-expert bias) -> SiLU-and-mul or SwiGLU-OAI -> [R, I] bf16, and the fp8 variant that
// also quantizes the result into 1x128 groups for the fp8 block GEMM2.
// Memory-bound: each thread moves 16-byte vectors (8 bf16); only rows < *num_rows (read on the
// device, so the kernels are graph-capturable with data-dependent row counts) are touched. With a
// bias, a row's expert comes from a binary search of expert_offsets (rows are sorted by expert).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/activation/gated_math.cuh"
#include "cuda/gemm/sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/sorted_search.cuh"
#include "cuda/runtime/current_device.hpp"
#include "moekit/gemm/grouped_gemm.hpp"

namespace moekit::gemm {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // bf16 per 16-byte access

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&v)[kVec]) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// What a kernel needs of GatedActivationArgs (kEpi: gated_math.cuh's kind).
struct ActDevice {
  float alpha, limit;
  const float* bias;  // [E, 2I] or null
  const int* offsets;  // [E + 1]
  int num_experts;
};

// y[j] = act(gate[j] (+ bias), up[j] (+ bias)) for the 8 columns c..c+7 of row r.
template <int kEpi, bool kBias>
__device__ __forceinline__ void gated8(const __nv_bfloat16* __restrict__ in, const ActDevice& a,
                                       long long r, long long c, long long inter,
                                       float (&y)[kVec]) {
  float g[kVec], u[kVec];
  load8(in + r * 2 * inter + c, g);
  load8(in + r * 2 * inter + inter + c, u);
  if constexpr (kBias) {
    const float* b = a.bias + cuda::last_at_most(a.offsets, a.num_experts, r) * 2 * inter;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      g[j] += b[c + j];
      u[j] += b[inter + c + j];
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) y[j] = cuda::gated_f32<kEpi>(g[j], u[j], a.alpha, a.limit);
}

template <int kEpi, bool kBias>
__global__ void gated_activation_bf16_kernel(const __nv_bfloat16* __restrict__ in,
                                             __nv_bfloat16* __restrict__ out, long long max_rows,
                                             long long inter, const int* __restrict__ num_rows,
                                             ActDevice a) {
  const long long rows = min(static_cast<long long>(max(*num_rows, 0)), max_rows);
  const long long vecs_per_row = inter / kVec;
  const long long total = rows * vecs_per_row;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / vecs_per_row;
    const long long c = (i - r * vecs_per_row) * kVec;
    float y[kVec];
    gated8<kEpi, kBias>(in, a, r, c, inter, y);
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < kVec / 2; ++j) h[j] = __floats2bfloat162_rn(y[2 * j], y[2 * j + 1]);
    *reinterpret_cast<uint4*>(out + r * inter + c) = raw;
  }
}

// 16 threads per 128-wide group (8 values each): amax by shuffles within the 16 lanes.
template <int kEpi, bool kBias>
__global__ void gated_activation_quant_fp8_kernel(const __nv_bfloat16* __restrict__ in,
                                                  __nv_fp8_e4m3* __restrict__ out,
                                                  float* __restrict__ scales, long long max_rows,
                                                  long long inter,
                                                  const int* __restrict__ num_rows, ActDevice a) {
  const long long rows = min(static_cast<long long>(max(*num_rows, 0)), max_rows);
  const long long vecs_per_row = inter / kVec;
  const long long total = rows * vecs_per_row;  // a multiple of 16: groups never straddle warps
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long begin = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  // Every lane of a 16-lane group runs the same number of iterations (total % 16 == 0 and the
  // grid stride is a multiple of 16), so the shuffles below always see their whole group.
  for (long long i = begin; i < total; i += stride) {
    const long long r = i / vecs_per_row;
    const long long c = (i - r * vecs_per_row) * kVec;
    float y[kVec];
    gated8<kEpi, kBias>(in, a, r, c, inter, y);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kVec; ++j) amax = fmaxf(amax, fabsf(y[j]));
    const unsigned half_mask = 0xffffu << (threadIdx.x & 16);  // this 16-lane group only
#pragma unroll
    for (int off = 8; off >= 1; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(half_mask, amax, off, 16));
    const float s = fmaxf(amax, 1e-10f) / 448.0f;
    unsigned long long packed = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const float q = fminf(fmaxf(__fdiv_rn(y[j], s), -448.0f), 448.0f);
      const __nv_fp8_storage_t b = __nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3);
      packed |= static_cast<unsigned long long>(b) << (8 * j);
    }
    *reinterpret_cast<unsigned long long*>(out + r * inter + c) = packed;
    if ((threadIdx.x & 15) == 0) scales[r * (inter / 128) + c / 128] = s;
  }
}

int grid_for(long long max_rows, long long inter) {
  const int sms = cuda::current_device_multiprocessors();
  const long long work = max_rows * (inter / kVec);
  const long long blocks = (work + kThreads - 1) / kThreads;
  return static_cast<int>(std::max(1ll, std::min(blocks, static_cast<long long>(sms) * 16)));
}

void check_common(const void* gate_up, const void* out, std::int64_t max_rows,
                  std::int64_t intermediate, const std::int32_t* num_rows) {
  MOEKIT_CHECK_ARG(gate_up != nullptr, "gate_up", "a device pointer", "null");
  MOEKIT_CHECK_ARG(out != nullptr, "out", "a device pointer", "null");
  MOEKIT_CHECK_ARG(num_rows != nullptr, "num_rows", "a device pointer", "null");
  MOEKIT_CHECK_ARG(max_rows >= 0, "max_rows", ">= 0", max_rows);
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(gate_up) % 16 == 0, "gate_up",
                   "16-byte aligned", gate_up);
  MOEKIT_CHECK_ARG(reinterpret_cast<std::uintptr_t>(out) % 16 == 0, "out", "16-byte aligned",
                   out);
}

ActDevice check_act(const GatedActivationArgs& act, const char* where) {
  detail::check_gated_activation(act, where, "act");
  if (act.bias != nullptr && act.expert_offsets == nullptr)
    throw_arg_error(where, "act.expert_offsets", "a device pointer (with act.bias)", "null");
  if (act.bias != nullptr && act.num_experts < 1)
    throw_arg_error(where, "act.num_experts", ">= 1 (with act.bias)", act.num_experts);
  return {act.swiglu_alpha, act.swiglu_limit, act.bias, act.expert_offsets, act.num_experts};
}

// Launches kernel<kEpi, kBias> for the runtime kind and bias.
template <template <int, bool> class K, typename... Args>
void dispatch(const GatedActivationArgs& act, Args&&... args) {
  const bool swiglu = act.kind == Activation::kSwigluOai, bias = act.bias != nullptr;
  if (swiglu && bias) K<2, true>::launch(args...);
  else if (swiglu) K<2, false>::launch(args...);
  else if (bias) K<1, true>::launch(args...);
  else K<1, false>::launch(args...);
}

template <int kEpi, bool kBias>
struct LaunchBf16 {
  static void launch(const void* gate_up, void* out, std::int64_t max_rows, std::int64_t inter,
                     const std::int32_t* num_rows, const ActDevice& a, cudaStream_t s) {
    gated_activation_bf16_kernel<kEpi, kBias><<<grid_for(max_rows, inter), kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(gate_up), static_cast<__nv_bfloat16*>(out), max_rows,
        inter, num_rows, a);
  }
};

template <int kEpi, bool kBias>
struct LaunchFp8 {
  static void launch(const void* gate_up, void* out_values, float* out_scales,
                     std::int64_t max_rows, std::int64_t inter, const std::int32_t* num_rows,
                     const ActDevice& a, cudaStream_t s) {
    gated_activation_quant_fp8_kernel<kEpi, kBias><<<grid_for(max_rows, inter), kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(gate_up), static_cast<__nv_fp8_e4m3*>(out_values),
        out_scales, max_rows, inter, num_rows, a);
  }
};

}  // namespace

void gated_activation_bf16(const void* gate_up, void* out, std::int64_t max_rows,
                           std::int64_t intermediate, const std::int32_t* num_rows,
                           const GatedActivationArgs& act, StreamHandle stream) {
  check_common(gate_up, out, max_rows, intermediate, num_rows);
  MOEKIT_CHECK_ARG(intermediate > 0 && intermediate % 8 == 0, "intermediate",
                   "a positive multiple of 8", intermediate);
  const ActDevice a = check_act(act, "gated_activation_bf16");
  if (max_rows == 0) return;
  dispatch<LaunchBf16>(act, gate_up, out, max_rows, intermediate, num_rows, a,
                       static_cast<cudaStream_t>(stream));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void gated_activation_quant_fp8_block(const void* gate_up, void* out_values, float* out_scales,
                                      std::int64_t max_rows, std::int64_t intermediate,
                                      const std::int32_t* num_rows,
                                      const GatedActivationArgs& act, StreamHandle stream) {
  check_common(gate_up, out_values, max_rows, intermediate, num_rows);
  MOEKIT_CHECK_ARG(out_scales != nullptr, "out_scales", "a device pointer", "null");
  MOEKIT_CHECK_ARG(intermediate > 0 && intermediate % 128 == 0, "intermediate",
                   "a positive multiple of 128", intermediate);
  const ActDevice a = check_act(act, "gated_activation_quant_fp8_block");
  if (max_rows == 0) return;
  dispatch<LaunchFp8>(act, gate_up, out_values, out_scales, max_rows, intermediate, num_rows, a,
                      static_cast<cudaStream_t>(stream));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void silu_and_mul_bf16(const void* gate_up, void* out, std::int64_t max_rows,
                       std::int64_t intermediate, const std::int32_t* num_rows,
                       StreamHandle stream) {
  gated_activation_bf16(gate_up, out, max_rows, intermediate, num_rows, GatedActivationArgs{},
                        stream);
}

void silu_and_mul_quant_fp8_block(const void* gate_up, void* out_values, float* out_scales,
                                  std::int64_t max_rows, std::int64_t intermediate,
                                  const std::int32_t* num_rows, StreamHandle stream) {
  gated_activation_quant_fp8_block(gate_up, out_values, out_scales, max_rows, intermediate,
                                   num_rows, GatedActivationArgs{}, stream);
}

}  // namespace moekit::gemm
