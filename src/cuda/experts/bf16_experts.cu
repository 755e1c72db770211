// Device helpers of the grouped-GEMM experts: permutation by expert, row gather, weighted top-k
// reduction. All asynchronous and graph-capturable; row counts are read on the device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "cuda/experts/bf16_experts.hpp"
#include "cuda/finalize/topk_reduce.cuh"
#include "cuda/runtime/cuda_check.hpp"

namespace moekit::cuda::detail {
namespace {

constexpr int kPermuteThreads = 1024;
constexpr int kPermuteSmallThreads = 128;

// One chunk of kThreads assignments [base, base + kThreads) in ascending order: a lane's rank
// among the earlier lanes with the same expert comes from __match_any_sync (own warp) plus the
// per-warp counts of the earlier warps (warp_cnt [kWarps][E], zero on entry for this chunk), so
// positions (running[e] + that rank) are ascending in a inside each expert (permute.hpp order).
template <int kThreads>
__device__ __forceinline__ void scatter_chunk(const int* __restrict__ topk_ids, int num_assign,
                                              int num_experts, int base, const int* running,
                                              int* warp_cnt, int* __restrict__ sorted_ids,
                                              int* __restrict__ permuted_row, int top_k,
                                              int* __restrict__ sorted_tokens) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_below = (1u << lane) - 1u;
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
}

// Exclusive scan of v[0, n) by warp 0 (32 values per step) into out (and out2 if not null);
// returns the total (on every lane of warp 0).
__device__ __forceinline__ int warp0_exclusive_scan(const int* v, int n, int* out, int* out2) {
  const int lane = threadIdx.x & 31;
  int carry = 0;
  for (int base = 0; base < n; base += 32) {
    const int e = base + lane;
    const int x = e < n ? v[e] : 0;
    int incl = x;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += y;
    }
    if (e < n) {
      out[e] = carry + incl - x;
      if (out2 != nullptr) out2[e] = carry + incl - x;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  return carry;
}

// One block of kThreads (1024; 128 when the assignments fit one chunk of 128: decode sizes, where
// the block's barriers and per-warp loops cost more than its width brings).
// Pass 1: histogram (shared atomics) -> exclusive scan -> expert_offsets.
// Pass 2: scatter_chunk over chunks of kThreads assignments in ascending order.
// sorted_tokens (optional): the token a / top_k of each sorted assignment.
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
  const int tid = threadIdx.x, warp = tid >> 5;
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
  if (warp == 0) {
    const int total = warp0_exclusive_scan(hist, num_experts, offsets, running);
    if ((tid & 31) == 0) offsets[num_experts] = total;
  }
  __syncthreads();
  for (int base = 0; base < num_assign; base += kThreads) {
    scatter_chunk<kThreads>(topk_ids, num_assign, num_experts, base, running, warp_cnt,
                            sorted_ids, permuted_row, top_k, sorted_tokens);
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

// Multi-block path (many assignments): block b owns chunk b (kChunkThreads assignments).
// (1) permute_count_kernel: chunk histograms -> counts [B][E];
// (2) permute_scan_kernel (one block): counts[b][e] <- offsets[e] + sum_{b' < b} counts[b'][e]
//     (each chunk's first position per expert), offsets = exclusive scan of the totals;
// (3) permute_scatter_kernel: scatter_chunk from those positions. Same outputs as permute_kernel
//     (positions depend on the assignment order only), three launches instead of a serial walk.
constexpr int kChunkThreads = 1024;

__global__ void __launch_bounds__(kChunkThreads)
    permute_count_kernel(const int* __restrict__ topk_ids, int num_assign, int num_experts,
                         int* __restrict__ counts) {
  extern __shared__ int hist[];  // [E]
  for (int e = threadIdx.x; e < num_experts; e += kChunkThreads) hist[e] = 0;
  __syncthreads();
  const int a = blockIdx.x * kChunkThreads + threadIdx.x;
  if (a < num_assign) {
    const int e = topk_ids[a];
    if (e >= 0 && e < num_experts) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += kChunkThreads)
    counts[static_cast<long long>(blockIdx.x) * num_experts + e] = hist[e];
}

__global__ void __launch_bounds__(kChunkThreads)
    permute_scan_kernel(int* __restrict__ counts, int blocks, int num_experts,
                        int* __restrict__ offsets) {
  extern __shared__ int total[];  // [E]
  // A thread walks its expert's column of counts in batches of kBatch chunks: the batch's loads
  // first (independent, in flight together), then its stores. (One load-store pair per chunk in
  // turn made each chunk's load wait for the previous store: ~blocks L2 round trips, 12.7 us of
  // deepseek-v3's 32 chunks x 256 experts on an H100.)
  constexpr int kBatch = 16;
  for (int e = threadIdx.x; e < num_experts; e += kChunkThreads) {
    int run = 0;
    for (int b0 = 0; b0 < blocks; b0 += kBatch) {
      int x[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        x[j] = b0 + j < blocks ? counts[static_cast<long long>(b0 + j) * num_experts + e] : 0;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (b0 + j < blocks) counts[static_cast<long long>(b0 + j) * num_experts + e] = run;
        run += x[j];
      }
    }
    total[e] = run;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int sum = warp0_exclusive_scan(total, num_experts, total, nullptr);
    if (threadIdx.x == 0) offsets[num_experts] = sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += kChunkThreads) offsets[e] = total[e];
  for (long long i = threadIdx.x; i < static_cast<long long>(blocks) * num_experts; i += kChunkThreads)
    counts[i] += total[i % num_experts];
}

__global__ void __launch_bounds__(kChunkThreads)
    permute_scatter_kernel(const int* __restrict__ topk_ids, int num_assign, int num_experts,
                           const int* __restrict__ counts, int* __restrict__ sorted_ids,
                           int* __restrict__ permuted_row, int top_k,
                           int* __restrict__ sorted_tokens) {
  constexpr int kWarps = kChunkThreads / 32;
  extern __shared__ int smem[];
  int* running = smem;                   // [E]
  int* warp_cnt = running + num_experts;  // [kWarps][E]
  const int* first = counts + static_cast<long long>(blockIdx.x) * num_experts;
  for (int i = threadIdx.x; i < num_experts * (kWarps + 1); i += kChunkThreads) {
    if (i < num_experts) running[i] = first[i];
    else warp_cnt[i - num_experts] = 0;
  }
  __syncthreads();
  scatter_chunk<kChunkThreads>(topk_ids, num_assign, num_experts, blockIdx.x * kChunkThreads,
                               running, warp_cnt, sorted_ids, permuted_row, top_k, sorted_tokens);
}

// The multi-block path from this many chunks on (fewer: one block walks them).
constexpr std::int64_t kMultiBlockMinChunks = 3;

// The kernels' dynamic shared-memory limit (a per-device attribute), set once per (kernel,
// device) on first use.
void allow_dynamic_smem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert({kernel, dev}).second) return;
  MOEKIT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

std::int64_t permute_chunks(std::int64_t num_assignments) {
  return (num_assignments + kChunkThreads - 1) / kChunkThreads;
}

// Rows of fewer than kShortRowVecs vectors (the fp8 1x128 scales: 56 floats at K 7168) as one
// flat range of (row, vector) pairs over the grid: one CTA per such row left most of its threads
// idle (23 us for deepseek-v3's 32768 rows of 224 bytes on an H100).
constexpr int kShortRowVecs = 64, kShortRowThreads = 256;
template <typename Vec>
__global__ void __launch_bounds__(kShortRowThreads)
    gather_short_rows_kernel(const char* __restrict__ src, int vecs,
                             const int* __restrict__ sorted_ids, int top_k, int max_rows,
                             const int* __restrict__ num_rows, char* __restrict__ out) {
  const int rows = min(max(*num_rows, 0), max_rows);
  const long long total = static_cast<long long>(rows) * vecs;
  const long long row_bytes = static_cast<long long>(vecs) * sizeof(Vec);
  for (long long i = blockIdx.x * static_cast<long long>(kShortRowThreads) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * kShortRowThreads) {
    const int r = static_cast<int>(i / vecs);
    const int c = static_cast<int>(i - static_cast<long long>(r) * vecs);
    const int a = sorted_ids[r];
    reinterpret_cast<Vec*>(out + r * row_bytes)[c] =
        reinterpret_cast<const Vec*>(src + static_cast<long long>(a / top_k) * row_bytes)[c];
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
// still spreads over several SMs. The arithmetic: topk_reduce8 (cuda/finalize/topk_reduce.cuh).
// kBias: GEMM2's per-expert bias is added to each slot's row before its weight (bias [E, H],
// slot j's expert topk_ids[t, j]).
constexpr int kReduceThreads = 128;
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
  *reinterpret_cast<uint4*>(out + t * hidden + c) = topk_reduce8<kBias, false>(
      expert_out, hidden, permuted_row, topk_weights, top_k, t, c, bias, hidden, topk_ids);
}

}  // namespace

void permute_by_expert(const std::int32_t* topk_ids, std::int64_t num_assignments, int num_experts,
                       std::int32_t* expert_offsets, std::int32_t* sorted_ids,
                       std::int32_t* permuted_row, StreamHandle stream, int top_k,
                       std::int32_t* sorted_tokens, void* scratch) {
  MOEKIT_CHECK_ARG(num_experts >= 1 && num_experts <= kMaxPermuteExperts, "num_experts",
                   ::moekit::detail::concat("in [1, ", kMaxPermuteExperts, "]"), num_experts);
  MOEKIT_CHECK_ARG(sorted_tokens == nullptr || top_k >= 1, "top_k", ">= 1 (with sorted_tokens)",
                   top_k);
  MOEKIT_CHECK_ARG(num_assignments >= 0 && num_assignments < (1ll << 31), "num_assignments",
                   "in [0, 2^31)", num_assignments);
  const std::int64_t chunks = permute_chunks(num_assignments);
  if (scratch != nullptr && chunks >= kMultiBlockMinChunks) {
    auto st = static_cast<cudaStream_t>(stream);
    auto* counts = static_cast<int*>(scratch);
    const unsigned blocks = static_cast<unsigned>(chunks);
    const std::size_t hist = static_cast<std::size_t>(num_experts) * sizeof(int);
    const std::size_t scatter_smem = hist * (kChunkThreads / 32 + 1);
    allow_dynamic_smem(reinterpret_cast<const void*>(permute_scatter_kernel),
                       static_cast<int>(kMaxPermuteExperts * (kChunkThreads / 32 + 1) * sizeof(int)));
    permute_count_kernel<<<blocks, kChunkThreads, hist, st>>>(
        topk_ids, static_cast<int>(num_assignments), num_experts, counts);
    MOEKIT_CUDA_CHECK_LAUNCH();
    permute_scan_kernel<<<1, kChunkThreads, hist, st>>>(counts, static_cast<int>(blocks),
                                                         num_experts, expert_offsets);
    MOEKIT_CUDA_CHECK_LAUNCH();
    permute_scatter_kernel<<<blocks, kChunkThreads, scatter_smem, st>>>(
        topk_ids, static_cast<int>(num_assignments), num_experts, counts, sorted_ids,
        permuted_row, top_k, sorted_tokens);
    MOEKIT_CUDA_CHECK_LAUNCH();
    return;
  }
  auto launch = [&](auto threads_tag) {
    constexpr int kThreads = decltype(threads_tag)::value;
    constexpr int kWarps = kThreads / 32;
    const std::size_t smem = static_cast<std::size_t>(num_experts) * (kWarps + 2) * sizeof(int);
    allow_dynamic_smem(reinterpret_cast<const void*>(permute_kernel<kThreads>),
                       static_cast<int>(kMaxPermuteExperts * (kWarps + 2) * sizeof(int)));
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

std::size_t permute_scratch_bytes(std::int64_t num_assignments, int num_experts) {
  const std::int64_t chunks = permute_chunks(num_assignments);
  return chunks >= kMultiBlockMinChunks
             ? static_cast<std::size_t>(chunks) * static_cast<std::size_t>(num_experts) * 4
             : 0;
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
  const std::int64_t vecs = row_bytes / (vec16 ? 16 : 4);
  if (vecs < kShortRowVecs && max_rows < (std::int64_t{1} << 31)) {
    const std::int64_t ctas =
        std::min<std::int64_t>((max_rows * vecs + kShortRowThreads - 1) / kShortRowThreads, 65535);
    auto launch = [&](auto kernel) {
      kernel<<<static_cast<unsigned>(ctas), kShortRowThreads, 0, s>>>(
          static_cast<const char*>(src), static_cast<int>(vecs), sorted_ids, top_k,
          static_cast<int>(max_rows), num_rows, static_cast<char*>(out));
    };
    if (vec16) launch(gather_short_rows_kernel<uint4>);
    else launch(gather_short_rows_kernel<unsigned>);
    MOEKIT_CUDA_CHECK_LAUNCH();
    return;
  }
  const int threads = static_cast<int>(std::clamp<std::int64_t>(vecs, 32, 256));
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
