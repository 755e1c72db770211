// The weighted top-k reduce (weighted_reduce.hpp) and the public unpermute_reduce_cuda
// (moekit/permute/permute_cuda.hpp). A thread owns 8 consecutive columns of one token; a CTA covers
// kReduceThreads * 8 columns of one token (blockIdx.x = t * slices + slice), so a decode-size M
// still spreads over several SMs. The sum: topk_reduce8_acc (topk_reduce.cuh), bit-identical to the
// CPU reference and independent of scheduling (no atomics).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/finalize/topk_reduce.cuh"
#include "cuda/finalize/weighted_reduce.hpp"
#include "cuda/permute/permute_checks.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit::cuda {
namespace {

constexpr int kReduceThreads = 128;

// kVec: H % 8 == 0 and 16-byte aligned rows (else element by element, the last chunk partial).
template <typename TIn, typename TOut, bool kBias, bool kVec>
__global__ void __launch_bounds__(kReduceThreads)
    weighted_reduce_kernel(const TIn* __restrict__ expert_out, const int* __restrict__ source_row,
                           const float* __restrict__ topk_weights, int top_k, long long hidden,
                           long long slices, TOut* __restrict__ out,
                           const float* __restrict__ bias, const int* __restrict__ topk_ids) {
  const long long t = blockIdx.x / slices;
  const long long c = ((blockIdx.x % slices) * kReduceThreads + threadIdx.x) * 8ll;
  if (c >= hidden) return;
  const int cols = hidden - c < 8 ? static_cast<int>(hidden - c) : 8;
  float acc[8];
  topk_reduce8_acc<kBias, false, TIn, kVec>(expert_out, hidden, source_row, topk_weights, top_k,
                                            t, c, cols, bias, hidden, topk_ids, acc);
  TOut* o = out + t * hidden + c;
  if constexpr (std::is_same_v<TOut, __nv_bfloat16>) {
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(o) = pack_bf16x8(acc);
    } else {
      for (int i = 0; i < cols; ++i) o[i] = __float2bfloat16_rn(acc[i]);
    }
  } else if constexpr (kVec) {
    reinterpret_cast<float4*>(o)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    reinterpret_cast<float4*>(o)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  } else {
    for (int i = 0; i < cols; ++i) o[i] = acc[i];
  }
}

template <typename TIn, typename TOut>
void launch(const WeightedReduceArgs& a, bool vec, unsigned blocks, long long slices,
            cudaStream_t s) {
  auto kernel = a.bias != nullptr ? weighted_reduce_kernel<TIn, TOut, true, true>
                : vec             ? weighted_reduce_kernel<TIn, TOut, false, true>
                                  : weighted_reduce_kernel<TIn, TOut, false, false>;
  kernel<<<blocks, kReduceThreads, 0, s>>>(
      static_cast<const TIn*>(a.expert_out), a.source_row, a.topk_weights, a.top_k, a.hidden,
      slices, static_cast<TOut*>(a.out), a.bias, a.topk_ids);
}

}  // namespace

void weighted_reduce(const WeightedReduceArgs& a, StreamHandle stream) {
  MOEKIT_CHECK_ARG(a.hidden > 0, "hidden", "> 0", a.hidden);
  MOEKIT_CHECK_ARG(a.top_k >= 1, "top_k", ">= 1", a.top_k);
  MOEKIT_CHECK_ARG(a.in_dtype == DType::kBF16 || a.in_dtype == DType::kF32, "expert_out dtype",
                   "bf16 or f32", dtype_name(a.in_dtype));
  MOEKIT_CHECK_ARG(a.out_dtype == DType::kBF16 || a.out_dtype == DType::kF32, "out dtype",
                   "bf16 or f32", dtype_name(a.out_dtype));
  const auto aligned16 = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  };
  const bool vec = a.hidden % 8 == 0 && aligned16(a.expert_out) && aligned16(a.out);
  if (a.bias != nullptr) {
    MOEKIT_CHECK_ARG(a.topk_ids != nullptr, "topk_ids", "a device pointer (with bias)", "null");
    MOEKIT_CHECK_ARG(aligned16(a.bias), "bias", "16-byte aligned", a.bias);
    MOEKIT_CHECK_ARG(vec, "hidden", "a multiple of 8 with 16-byte aligned rows (with bias)",
                     a.hidden);
  }
  if (a.num_tokens == 0) return;
  const long long slices = (a.hidden / 8 + (a.hidden % 8 != 0) + kReduceThreads - 1) / kReduceThreads;
  MOEKIT_CHECK_ARG(a.num_tokens * slices < (std::int64_t{1} << 31), "num_tokens",
                   ::moekit::detail::concat("< 2^31 / ", slices, " (CTAs of the reduce)"),
                   a.num_tokens);
  const auto blocks = static_cast<unsigned>(a.num_tokens * slices);
  auto s = static_cast<cudaStream_t>(stream);
  const bool in_bf16 = a.in_dtype == DType::kBF16, out_bf16 = a.out_dtype == DType::kBF16;
  if (in_bf16 && out_bf16) launch<__nv_bfloat16, __nv_bfloat16>(a, vec, blocks, slices, s);
  else if (in_bf16) launch<__nv_bfloat16, float>(a, vec, blocks, slices, s);
  else if (out_bf16) launch<float, __nv_bfloat16>(a, vec, blocks, slices, s);
  else launch<float, float>(a, vec, blocks, slices, s);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda

namespace moekit {

void unpermute_reduce_cuda(const TensorView& expert_out, const TensorView& source_row,
                           const TensorView& topk_weights, const TensorView& out,
                           StreamHandle stream) {
  using permute_detail::check_device;
  permute_detail::check_i32_device(source_row, "source_row", 2);
  const std::int64_t m = source_row.size(0);
  const int k = static_cast<int>(source_row.size(1));
  check_device(expert_out, "expert_out");
  MOEKIT_CHECK_ARG(expert_out.rank() >= 2, "expert_out rank", ">= 2", expert_out.rank());
  check_device(out, "out");
  MOEKIT_CHECK_ARG(out.rank() == 2, "out rank", 2, out.rank());
  const std::int64_t h = expert_out.size(-1);
  MOEKIT_CHECK_ARG(out.size(0) == m && out.size(1) == h, "out shape", (Shape{m, h}.str()),
                   out.shape.str());
  cuda::WeightedReduceArgs a;
  if (topk_weights.defined()) {
    check_device(topk_weights, "topk_weights");
    MOEKIT_CHECK_ARG(topk_weights.dtype == DType::kF32, "topk_weights dtype", "f32",
                     dtype_name(topk_weights.dtype));
    MOEKIT_CHECK_ARG(topk_weights.shape == source_row.shape, "topk_weights shape",
                     source_row.shape.str(), topk_weights.shape.str());
    a.topk_weights = static_cast<const float*>(topk_weights.data);
  }
  if (m == 0 || h == 0 || k == 0) {
    MOEKIT_CHECK_ARG(expert_out.dtype == DType::kF32 || expert_out.dtype == DType::kBF16,
                     "expert_out dtype", "f32 or bf16", dtype_name(expert_out.dtype));
    MOEKIT_CHECK_ARG(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "out dtype",
                     "f32 or bf16", dtype_name(out.dtype));
    if (m > 0 && h > 0) {  // no slot: every output +0.0
      MOEKIT_CUDA_CHECK(cudaMemsetAsync(out.data, 0, out.nbytes(),
                                        static_cast<cudaStream_t>(stream)));
    }
    return;
  }
  a.expert_out = expert_out.data;
  a.in_dtype = expert_out.dtype;
  a.source_row = static_cast<const std::int32_t*>(source_row.data);
  a.num_tokens = m;
  a.top_k = k;
  a.hidden = h;
  a.out = out.data;
  a.out_dtype = out.dtype;
  cuda::weighted_reduce(a, stream);
}

}  // namespace moekit
