// Device helpers of the grouped-GEMM experts: permutation by expert, row gather, weighted top-k
// reduction. All asynchronous and graph-capturable; row counts are read on the device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/experts/bf16_experts.hpp"
#include "cuda/runtime/cuda_check.hpp"

namespace moekit::cuda::detail {
namespace {

constexpr int kPermuteThreads = 1024;
constexpr int kPermuteSmallThreads = 128;

// One block of kThreads (1024; 128 when the assignments fit one chunk of 128: decode sizes, where
// the block's barriers and per-warp loops cost more than its width brings).
// Pass 1: histogram (shared atomics) -> exclusive scan -> expert_offsets.
// Pass 2: chunks of kThreads assignments in ascending order; within a chunk a lane's rank among
// the earlier lanes with the same expert comes from __match_any_sync (own warp) plus per-warp
// counts of the earlier warps, so positions are ascending in a inside each expert (permute.hpp
// order). sorted_tokens (optional): the token a / top_k of each sorted assignment.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    permute_kernel(const int* __restrict__ topk_ids, int num_assign, int num_experts,
                   int* __restrict__ offsets, int* __restrict__ sorted_ids,
                   int* __restrict__ permuted_row, int top_k, int* __restrict__ sorted_tokens) {
  constexpr int kWarps = kThreads / 32;
  extern __shared__ int smem[];
  int* hist = smem;                      // [E]
  int* running = hist + num_experts;     // [E]
  int* warp_cnt = running + num_experts;  // [kWarps][E]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < num_experts * (kWarps + 1); i += kThreads) {
    if (i < num_experts) hist[i] = 0;
    else warp_cnt[i - num_experts] = 0;
  }
  __syncthreads();
  for (int a = tid; a < num_assign; a += kThreads) {
    const int e = topk_ids[a];
    if (e >= 0 && e < num_experts) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  if (warp == 0) {  // exclusive scan, 32 experts per step
    int carry = 0;
    for (int base = 0; base < num_experts; base += 32) {
      const int e = base + lane;
      const int v = e < num_experts ? hist[e] : 0;
      int incl = v;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += y;
      }
      if (e < num_experts) {
        offsets[e] = carry + incl - v;
        running[e] = carry + incl - v;
      }
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) offsets[num_experts] = carry;
  }
  __syncthreads();
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int base = 0; base < num_assign; base += kThreads) {
    const int a = base + tid;
    const int e = a < num_assign ? topk_ids[a] : -1;
    const bool valid = e >= 0 && e < num_experts;
    const unsigned peers = __match_any_sync(0xffffffffu, valid ? e : num_experts + lane);
    const int rank = __popc(peers & lanes_below);
    if (valid && rank == 0) warp_cnt[warp * num_experts + e] = __popc(peers);
    __syncthreads();
    if (valid) {
      int pos = running[e] + rank;
      for (int w = 0; w < warp; ++w) pos += warp_cnt[w * num_experts + e];
      sorted_ids[pos] = a;
      if (sorted_tokens != nullptr) sorted_tokens[pos] = a / top_k;
      permuted_row[a] = pos;
    } else if (a < num_assign) {
      permuted_row[a] = -1;
    }
    // The next chunk's base positions (none after the last chunk: decode sizes are one chunk).
    if (base + kThreads >= num_assign) break;
    __syncthreads();
    for (int x = tid; x < num_experts; x += kThreads) {
      int s = 0;
      for (int w = 0; w < kWarps; ++w) {
        s += warp_cnt[w * num_experts + x];
        warp_cnt[w * num_experts + x] = 0;
      }
      running[x] += s;
    }
    __syncthreads();
  }
}

template <typename Vec>
__global__ void gather_rows_kernel(const char* __restrict__ src, long long row_bytes,
                                   const int* __restrict__ sorted_ids, int top_k,
                                   long long max_rows, const int* __restrict__ num_rows,
                                   char* __restrict__ out) {
  const long long rows = min(static_cast<long long>(max(*num_rows, 0)), max_rows);
  const long long vecs = row_bytes / static_cast<long long>(sizeof(Vec));
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const int a = sorted_ids[r];
    const Vec* s = reinterpret_cast<const Vec*>(src + static_cast<long long>(a / top_k) * row_bytes);
    Vec* d = reinterpret_cast<Vec*>(out + r * row_bytes);
    for (long long i = threadIdx.x; i < vecs; i += blockDim.x) d[i] = s[i];
  }
}

// out[t, c .. c+7] for one token t and 8 columns (16 bytes of bf16) per thread; a CTA covers
// kReduceThreads * 8 columns of one token (blockIdx.x = t * slices + slice), so a decode-size M
// still spreads over several SMs. Slots in order, kReduceUnroll at a time with all their loads
// issued first (the latency chain of a slot loop was the cost at small M); separate multiply and
// add (no FMA), the sum in slot order: unpermute_reduce's arithmetic.
// kBias: GEMM2's per-expert bias is added to each slot's row before its weight (bias [E, H],
// slot j's expert topk_ids[t, j]).
constexpr int kReduceThreads = 128;
constexpr int kReduceUnroll = 4;
template <bool kBias>
__global__ void __launch_bounds__(kReduceThreads)
    weighted_reduce_kernel(const __nv_bfloat16* __restrict__ expert_out,
                           const int* __restrict__ permuted_row,
                           const float* __restrict__ topk_weights, int top_k, long long hidden,
                           long long slices, __nv_bfloat16* __restrict__ out,
                           const float* __restrict__ bias, const int* __restrict__ topk_ids) {
  const long long t = blockIdx.x / slices;
  const long long c = ((blockIdx.x % slices) * kReduceThreads + threadIdx.x) * 8ll;
  if (c >= hidden) return;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j0 = 0; j0 < top_k; j0 += kReduceUnroll) {
    int r[kReduceUnroll];
    float w[kReduceUnroll];
    uint4 raw[kReduceUnroll];
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) {
      const int j = j0 + u;
      r[u] = j < top_k ? permuted_row[t * top_k + j] : -1;
      w[u] = j < top_k && topk_weights != nullptr ? topk_weights[t * top_k + j] : 1.0f;
    }
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u)
      raw[u] = r[u] >= 0 ? *reinterpret_cast<const uint4*>(expert_out + r[u] * hidden + c)
                         : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) {
      if (r[u] < 0) continue;
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw[u]);
      float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if constexpr (kBias) {
        const float4* bp = reinterpret_cast<const float4*>(
            bias + static_cast<long long>(topk_ids[t * top_k + j0 + u]) * hidden + c);
        const float4 b0 = bp[0], b1 = bp[1];
        b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w;
        b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float2 v = __bfloat1622float2(h[i]);
        if constexpr (kBias) {
          v.x = __fadd_rn(v.x, b[2 * i]);
          v.y = __fadd_rn(v.y, b[2 * i + 1]);
        }
        acc[2 * i] = __fadd_rn(acc[2 * i], __fmul_rn(w[u], v.x));
        acc[2 * i + 1] = __fadd_rn(acc[2 * i + 1], __fmul_rn(w[u], v.y));
      }
    }
  }
  uint4 res;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&res);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  *reinterpret_cast<uint4*>(out + t * hidden + c) = res;
}

}  // namespace

void permute_by_expert(const std::int32_t* topk_ids, std::int64_t num_assignments, int num_experts,
                       std::int32_t* expert_offsets, std::int32_t* sorted_ids,
                       std::int32_t* permuted_row, StreamHandle stream, int top_k,
                       std::int32_t* sorted_tokens) {
  MOEKIT_CHECK_ARG(num_experts >= 1 && num_experts <= kMaxPermuteExperts, "num_experts",
                   ::moekit::detail::concat("in [1, ", kMaxPermuteExperts, "]"), num_experts);
  MOEKIT_CHECK_ARG(sorted_tokens == nullptr || top_k >= 1, "top_k", ">= 1 (with sorted_tokens)",
                   top_k);
  MOEKIT_CHECK_ARG(num_assignments >= 0 && num_assignments < (1ll << 31), "num_assignments",
                   "in [0, 2^31)", num_assignments);
  auto launch = [&](auto threads_tag) {
    constexpr int kThreads = decltype(threads_tag)::value;
    constexpr int kWarps = kThreads / 32;
    const std::size_t smem = static_cast<std::size_t>(num_experts) * (kWarps + 2) * sizeof(int);
    static const bool attr_set = [] {
      MOEKIT_CUDA_CHECK(cudaFuncSetAttribute(
          permute_kernel<kThreads>, cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(kMaxPermuteExperts * (kWarps + 2) * sizeof(int))));
      return true;
    }();
    (void)attr_set;
    permute_kernel<kThreads><<<1, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(
        topk_ids, static_cast<int>(num_assignments), num_experts, expert_offsets, sorted_ids,
        permuted_row, top_k, sorted_tokens);
  };
  if (num_assignments <= kPermuteSmallThreads)
    launch(std::integral_constant<int, kPermuteSmallThreads>{});
  else
    launch(std::integral_constant<int, kPermuteThreads>{});
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void gather_rows(const void* src, std::int64_t row_bytes, const std::int32_t* sorted_ids,
                 int top_k, std::int64_t max_rows, const std::int32_t* num_rows, void* out,
                 StreamHandle stream) {
  MOEKIT_CHECK_ARG(row_bytes > 0 && row_bytes % 4 == 0, "row_bytes", "a positive multiple of 4",
                   row_bytes);
  if (max_rows == 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>(max_rows, 65535));
  auto s = static_cast<cudaStream_t>(stream);
  const bool vec16 = row_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                     reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  const int threads = static_cast<int>(std::clamp<std::int64_t>(row_bytes / (vec16 ? 16 : 4), 32, 256));
  if (vec16) {
    gather_rows_kernel<uint4><<<blocks, threads, 0, s>>>(static_cast<const char*>(src), row_bytes,
                                                         sorted_ids, top_k, max_rows, num_rows,
                                                         static_cast<char*>(out));
  } else {
    gather_rows_kernel<unsigned><<<blocks, threads, 0, s>>>(
        static_cast<const char*>(src), row_bytes, sorted_ids, top_k, max_rows, num_rows,
        static_cast<char*>(out));
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void weighted_reduce_bf16(const void* expert_out, const std::int32_t* permuted_row,
                          const float* topk_weights, std::int64_t num_tokens, int top_k,
                          std::int64_t hidden, void* out, StreamHandle stream,
                          const float* bias, const std::int32_t* topk_ids) {
  MOEKIT_CHECK_ARG(hidden > 0 && hidden % 8 == 0, "hidden", "a positive multiple of 8", hidden);
  MOEKIT_CHECK_ARG(bias == nullptr || topk_ids != nullptr, "topk_ids",
                   "a device pointer (with bias)", "null");
  MOEKIT_CHECK_ARG(bias == nullptr || reinterpret_cast<std::uintptr_t>(bias) % 16 == 0, "bias",
                   "16-byte aligned", bias);
  if (num_tokens == 0) return;
  const std::int64_t slices = (hidden / 8 + kReduceThreads - 1) / kReduceThreads;
  MOEKIT_CHECK_ARG(num_tokens * slices < (std::int64_t{1} << 31), "num_tokens",
                   ::moekit::detail::concat("< 2^31 / ", slices, " (CTAs of the reduce)"), num_tokens);
  auto kernel = bias != nullptr ? weighted_reduce_kernel<true> : weighted_reduce_kernel<false>;
  kernel<<<static_cast<unsigned>(num_tokens * slices), kReduceThreads, 0,
           static_cast<cudaStream_t>(stream)>>>(static_cast<const __nv_bfloat16*>(expert_out),
                                                permuted_row, topk_weights, top_k, hidden, slices,
                                                static_cast<__nv_bfloat16*>(out), bias, topk_ids);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda::detail
