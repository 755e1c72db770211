// The permutation by expert (permute_kernels.hpp) and the public compute_permutation_cuda /
// batched_rows_cuda (moekit/permute/permute_cuda.hpp). Deterministic by construction: counts come
// from shared-memory integer atomics (a count does not depend on the order of increments), and a
// row's position from its rank among the same expert's assignments of its warp (__match_any_sync)
// plus the counts of the earlier warps and chunks, so positions depend on the assignment order
// only. Which launch shape runs (one block of 128 or 1024 threads, or one block per chunk of 1024
// in three launches): the tuning rules permute_multi_block / permute_block_threads.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda/permute/permute_checks.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit::cuda {
namespace {

constexpr int kChunkThreads = 1024;

// What every kernel needs of PermuteArgs.
struct PermuteDevice {
  const int* topk_ids;
  int n;
  int num_global, num_local;
  const int* expert_map;
  int block_size;
  int* counts;  // optional
  int* offsets;
  int* sorted_ids;
  long long capacity;
  int* permuted_row;
  int top_k;
  int* sorted_tokens;
};

__device__ __forceinline__ int local_expert(const PermuteDevice& p, int a) {
  const int g = p.topk_ids[a];
  if (g < 0 || g >= p.num_global) return -1;
  return p.expert_map != nullptr ? p.expert_map[g] : g;
}

__device__ __forceinline__ int padded(int count, int block_size) {
  return (count + block_size - 1) / block_size * block_size;
}

// Programmatic dependent launch: returns once the previous kernel's writes are visible (a no-op
// without the launch attribute).
__device__ __forceinline__ void wait_previous_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// One chunk of kThreads assignments [base, base + kThreads) in ascending order: a lane's rank
// among the earlier lanes with the same expert comes from __match_any_sync (own warp) plus the
// per-warp counts of the earlier warps (warp_cnt [kWarps][E], zero on entry for this chunk), so
// positions (running[e] + that rank) are ascending in a inside each expert.
template <int kThreads>
__device__ __forceinline__ void scatter_chunk(const PermuteDevice& p, int base, const int* running,
                                              int* warp_cnt) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int a = base + tid;
  const int e = a < p.n ? local_expert(p, a) : -1;
  const bool valid = e >= 0;
  const unsigned peers = __match_any_sync(0xffffffffu, valid ? e : p.num_local + lane);
  const int rank = __popc(peers & lanes_below);
  if (valid && rank == 0) warp_cnt[warp * p.num_local + e] = __popc(peers);
  __syncthreads();
  if (valid) {
    int pos = running[e] + rank;
    for (int w = 0; w < warp; ++w) pos += warp_cnt[w * p.num_local + e];
    p.sorted_ids[pos] = a;
    if (p.sorted_tokens != nullptr) p.sorted_tokens[pos] = a / p.top_k;
    p.permuted_row[a] = pos;
  } else if (a < p.n) {
    p.permuted_row[a] = -1;
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

// -1 in the rows of sorted_ids that no assignment takes: each expert's padding [offsets[e] +
// count, offsets[e + 1]) and [offsets[E], capacity). By `threads` threads from thread `tid`.
__device__ __forceinline__ void fill_unused_rows(const PermuteDevice& p, const int* counts,
                                                 int tid, int threads) {
  if (p.block_size > 1) {
    for (int e = tid; e < p.num_local; e += threads)
      for (int r = p.offsets[e] + counts[e]; r < p.offsets[e + 1]; ++r) p.sorted_ids[r] = -1;
  }
  for (long long r = p.offsets[p.num_local] + tid; r < p.capacity; r += threads)
    p.sorted_ids[r] = -1;
}

// One block of kThreads (1024; 128 for decode sizes, where the block's barriers and per-warp loops
// cost more than its width brings). Pass 1: histogram (shared atomics) -> exclusive scan of the
// padded counts -> expert_offsets. Pass 2: scatter_chunk over chunks of kThreads assignments in
// ascending order. Then the unused rows (capacity > 0).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) permute_kernel(PermuteDevice p) {
  constexpr int kWarps = kThreads / 32;
  extern __shared__ int smem[];
  const int num_local = p.num_local;
  int* hist = smem;                      // [E]: counts, then padded counts
  int* running = hist + num_local;       // [E]
  int* warp_cnt = running + num_local;   // [kWarps][E]
  int* counts = warp_cnt + kWarps * num_local;  // [E]: the unpadded counts (capacity > 0)
  const int tid = threadIdx.x, warp = tid >> 5;
  for (int i = tid; i < num_local * (kWarps + 1); i += kThreads) {
    if (i < num_local) hist[i] = 0;
    else warp_cnt[i - num_local] = 0;
  }
  wait_previous_grid();
  __syncthreads();
  for (int a = tid; a < p.n; a += kThreads) {
    const int e = local_expert(p, a);
    if (e >= 0) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  if (p.counts != nullptr || p.capacity > 0 || p.block_size > 1) {
    for (int e = tid; e < num_local; e += kThreads) {
      if (p.counts != nullptr) p.counts[e] = hist[e];
      counts[e] = hist[e];
      hist[e] = padded(hist[e], p.block_size);
    }
    __syncthreads();
  }
  if (warp == 0) {
    const int total = warp0_exclusive_scan(hist, num_local, p.offsets, running);
    if ((tid & 31) == 0) p.offsets[num_local] = total;
  }
  __syncthreads();
  for (int base = 0; base < p.n; base += kThreads) {
    scatter_chunk<kThreads>(p, base, running, warp_cnt);
    // The next chunk's base positions (none after the last chunk: decode sizes are one chunk).
    if (base + kThreads >= p.n) break;
    __syncthreads();
    for (int x = tid; x < num_local; x += kThreads) {
      int s = 0;
      for (int w = 0; w < kWarps; ++w) {
        s += warp_cnt[w * num_local + x];
        warp_cnt[w * num_local + x] = 0;
      }
      running[x] += s;
    }
    __syncthreads();
  }
  if (p.capacity > 0) fill_unused_rows(p, counts, tid, kThreads);
}

// Multi-block path (many assignments): block b owns chunk b (kChunkThreads assignments).
// (1) permute_count_kernel: chunk histograms -> chunk_counts [B][E];
// (2) permute_scan_kernel (one block): chunk_counts[b][e] <- offsets[e] + sum_{b' < b}
//     chunk_counts[b'][e] (each chunk's first position per expert), offsets = exclusive scan of
//     the padded totals;
// (3) permute_scatter_kernel: scatter_chunk from those positions;
// (4) with a capacity, permute_fill_kernel: the unused rows.
__global__ void __launch_bounds__(kChunkThreads)
    permute_count_kernel(PermuteDevice p, int* __restrict__ chunk_counts) {
  extern __shared__ int hist[];  // [E]
  for (int e = threadIdx.x; e < p.num_local; e += kChunkThreads) hist[e] = 0;
  wait_previous_grid();
  __syncthreads();
  const int a = blockIdx.x * kChunkThreads + threadIdx.x;
  if (a < p.n) {
    const int e = local_expert(p, a);
    if (e >= 0) atomicAdd(&hist[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.num_local; e += kChunkThreads)
    chunk_counts[static_cast<long long>(blockIdx.x) * p.num_local + e] = hist[e];
}

__global__ void __launch_bounds__(kChunkThreads)
    permute_scan_kernel(PermuteDevice p, int* __restrict__ chunk_counts, int blocks) {
  extern __shared__ int total[];  // [E]
  const int num_experts = p.num_local;
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
        x[j] = b0 + j < blocks ? chunk_counts[static_cast<long long>(b0 + j) * num_experts + e]
                               : 0;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        if (b0 + j < blocks) chunk_counts[static_cast<long long>(b0 + j) * num_experts + e] = run;
        run += x[j];
      }
    }
    if (p.counts != nullptr) p.counts[e] = run;
    total[e] = padded(run, p.block_size);
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int sum = warp0_exclusive_scan(total, num_experts, total, nullptr);
    if (threadIdx.x == 0) p.offsets[num_experts] = sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += kChunkThreads) p.offsets[e] = total[e];
  for (long long i = threadIdx.x; i < static_cast<long long>(blocks) * num_experts;
       i += kChunkThreads)
    chunk_counts[i] += total[i % num_experts];
}

__global__ void __launch_bounds__(kChunkThreads)
    permute_scatter_kernel(PermuteDevice p, const int* __restrict__ chunk_counts) {
  constexpr int kWarps = kChunkThreads / 32;
  extern __shared__ int smem[];
  int* running = smem;                      // [E]
  int* warp_cnt = running + p.num_local;    // [kWarps][E]
  const int* first = chunk_counts + static_cast<long long>(blockIdx.x) * p.num_local;
  for (int i = threadIdx.x; i < p.num_local * (kWarps + 1); i += kChunkThreads) {
    if (i < p.num_local) running[i] = first[i];
    else warp_cnt[i - p.num_local] = 0;
  }
  __syncthreads();
  scatter_chunk<kChunkThreads>(p, blockIdx.x * kChunkThreads, running, warp_cnt);
}

__global__ void permute_fill_kernel(PermuteDevice p) {
  fill_unused_rows(p, p.counts, blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x);
}

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

// Launches kernel<<<grid, threads, smem>>>(args...), as a programmatic dependent when `pdl`.
template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), unsigned grid, int threads, std::size_t smem,
            cudaStream_t stream, bool pdl, Args... args) {
  if (!pdl) {
    kernel<<<grid, threads, smem, stream>>>(args...);
    MOEKIT_CUDA_CHECK_LAUNCH();
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

__global__ void batched_rows_kernel(const std::int32_t* topk_ids, std::int64_t n,
                                    const std::int32_t* expert_map, int num_global,
                                    const std::int32_t* permuted_row,
                                    const std::int32_t* offsets, std::int64_t t_max,
                                    std::int32_t* batched_row) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int g = topk_ids[i];
  const int l = (g < 0 || g >= num_global) ? -1 : expert_map ? expert_map[g] : g;
  const int pr = permuted_row[i];
  std::int32_t out = -1;
  if (l >= 0 && pr >= 0) {
    const std::int64_t pos = pr - offsets[l];
    if (pos >= 0 && pos < t_max && pos < offsets[l + 1] - offsets[l])
      out = static_cast<std::int32_t>(l * t_max + pos);
  }
  batched_row[i] = out;
}

}  // namespace

std::size_t permute_scratch_bytes(std::int64_t num_assignments, int num_local_experts) {
  return tuning::sm90::permute_multi_block(num_assignments)
             ? static_cast<std::size_t>(permute_chunks(num_assignments)) *
                   static_cast<std::size_t>(num_local_experts) * 4
             : 0;
}

void permute_by_expert(const PermuteArgs& args, StreamHandle stream) {
  const int e_local = args.num_local_experts;
  MOEKIT_CHECK_ARG(e_local >= 1 && e_local <= kMaxPermuteExperts, "num_local_experts",
                   ::moekit::detail::concat("in [1, ", kMaxPermuteExperts, "]"), e_local);
  MOEKIT_CHECK_ARG(args.num_experts >= 1 && (args.expert_map != nullptr || args.num_experts == e_local),
                   "num_experts", "num_local_experts without an expert map, >= 1 with one",
                   args.num_experts);
  MOEKIT_CHECK_ARG(args.sorted_tokens == nullptr || args.top_k >= 1, "top_k",
                   ">= 1 (with sorted_tokens)", args.top_k);
  MOEKIT_CHECK_ARG(args.num_assignments >= 0 && args.num_assignments < (1ll << 31),
                   "num_assignments", "in [0, 2^31)", args.num_assignments);
  MOEKIT_CHECK_ARG(args.block_size >= 1, "block_size", ">= 1", args.block_size);
  MOEKIT_CHECK_ARG(args.sorted_capacity == 0 || args.block_size == 1 || args.expert_counts != nullptr,
                   "expert_counts", "a device pointer (padding with a capacity)", "null");
  PermuteDevice p{};
  p.topk_ids = args.topk_ids;
  p.n = static_cast<int>(args.num_assignments);
  p.num_global = args.num_experts;
  p.num_local = e_local;
  p.expert_map = args.expert_map;
  p.block_size = args.block_size;
  p.counts = args.expert_counts;
  p.offsets = args.expert_offsets;
  p.sorted_ids = args.sorted_ids;
  p.capacity = args.sorted_capacity;
  p.permuted_row = args.permuted_row;
  p.top_k = args.top_k;
  p.sorted_tokens = args.sorted_tokens;
  auto st = static_cast<cudaStream_t>(stream);
  const std::int64_t chunks = permute_chunks(args.num_assignments);
  if (args.scratch != nullptr && tuning::sm90::permute_multi_block(args.num_assignments)) {
    auto* chunk_counts = static_cast<int*>(args.scratch);
    const unsigned blocks = static_cast<unsigned>(chunks);
    const std::size_t hist = static_cast<std::size_t>(e_local) * sizeof(int);
    const std::size_t scatter_smem = hist * (kChunkThreads / 32 + 1);
    allow_dynamic_smem(reinterpret_cast<const void*>(permute_scatter_kernel),
                       static_cast<int>(kMaxPermuteExperts * (kChunkThreads / 32 + 1) * sizeof(int)));
    launch(permute_count_kernel, blocks, kChunkThreads, hist, st, args.overlap_previous, p,
           chunk_counts);
    launch(permute_scan_kernel, 1, kChunkThreads, hist, st, false, p, chunk_counts,
           static_cast<int>(blocks));
    launch(permute_scatter_kernel, blocks, kChunkThreads, scatter_smem, st, false, p,
           static_cast<const int*>(chunk_counts));
    if (args.sorted_capacity > 0)
      launch(permute_fill_kernel, 64, 256, 0, st, false, p);
    return;
  }
  auto run = [&](auto threads_tag) {
    constexpr int kThreads = decltype(threads_tag)::value;
    constexpr int kWarps = kThreads / 32;
    const std::size_t smem = static_cast<std::size_t>(e_local) * (kWarps + 3) * sizeof(int);
    allow_dynamic_smem(reinterpret_cast<const void*>(permute_kernel<kThreads>),
                       static_cast<int>(kMaxPermuteExperts * (kWarps + 3) * sizeof(int)));
    launch(permute_kernel<kThreads>, 1, kThreads, smem, st, args.overlap_previous, p);
  };
  if (tuning::sm90::permute_block_threads(args.num_assignments) == 128)
    run(std::integral_constant<int, 128>{});
  else
    run(std::integral_constant<int, kChunkThreads>{});
}

}  // namespace moekit::cuda

namespace moekit {

void compute_permutation_cuda(const TensorView& topk_ids, const TensorView& expert_map,
                              int num_local_experts, int block_size, const PermutationView& out,
                              StreamHandle stream) {
  using permute_detail::check_i32_device;
  check_i32_device(topk_ids, "topk_ids", 2);
  MOEKIT_CHECK_ARG(num_local_experts >= 1 && num_local_experts <= cuda::kMaxPermuteExperts,
                   "num_local_experts",
                   "in [1, " + std::to_string(cuda::kMaxPermuteExperts) + "] on cuda",
                   num_local_experts);
  MOEKIT_CHECK_ARG(block_size >= 1, "block_size", ">= 1", block_size);
  int num_global = num_local_experts;
  if (expert_map.defined()) {
    check_i32_device(expert_map, "expert_map", 1);
    num_global = static_cast<int>(expert_map.size(0));
  }
  const std::int64_t m = topk_ids.size(0);
  const int k = static_cast<int>(topk_ids.size(1));
  check_i32_device(out.expert_counts, "expert_counts", 1);
  check_i32_device(out.expert_offsets, "expert_offsets", 1);
  check_i32_device(out.sorted_ids, "sorted_ids", 1);
  check_i32_device(out.permuted_row, "permuted_row", 2);
  MOEKIT_CHECK_ARG(out.expert_counts.size(0) == num_local_experts, "expert_counts shape",
                   Shape{num_local_experts}.str(), out.expert_counts.shape.str());
  MOEKIT_CHECK_ARG(out.expert_offsets.size(0) == num_local_experts + 1, "expert_offsets shape",
                   Shape{num_local_experts + 1}.str(), out.expert_offsets.shape.str());
  MOEKIT_CHECK_ARG(out.permuted_row.shape == topk_ids.shape, "permuted_row shape",
                   topk_ids.shape.str(), out.permuted_row.shape.str());
  const std::int64_t capacity = permute_capacity(m, k, num_local_experts, block_size);
  MOEKIT_CHECK_ARG(out.sorted_ids.size(0) >= capacity, "sorted_ids size",
                   ">= " + std::to_string(capacity), out.sorted_ids.size(0));
  cuda::PermuteArgs a;
  a.topk_ids = static_cast<const std::int32_t*>(topk_ids.data);
  a.num_assignments = m * k;
  a.num_experts = num_global;
  a.expert_map = expert_map.defined() ? static_cast<const std::int32_t*>(expert_map.data) : nullptr;
  a.num_local_experts = num_local_experts;
  a.block_size = block_size;
  a.expert_counts = static_cast<std::int32_t*>(out.expert_counts.data);
  a.expert_offsets = static_cast<std::int32_t*>(out.expert_offsets.data);
  a.sorted_ids = static_cast<std::int32_t*>(out.sorted_ids.data);
  a.sorted_capacity = out.sorted_ids.size(0);
  a.permuted_row = static_cast<std::int32_t*>(out.permuted_row.data);
  // Launched as a programmatic dependent: the kernel may start while the router is still running
  // and waits in-kernel for its results. No scratch: one block walks the assignments.
  a.overlap_previous = true;
  cuda::permute_by_expert(a, stream);
}

void batched_rows_cuda(const TensorView& topk_ids, const TensorView& expert_map,
                       const TensorView& permuted_row, const TensorView& expert_offsets,
                       std::int64_t max_tokens_per_expert, const TensorView& batched_row,
                       StreamHandle stream) {
  using permute_detail::check_i32_device;
  check_i32_device(topk_ids, "topk_ids", 2);
  check_i32_device(expert_offsets, "expert_offsets", 1);
  check_i32_device(permuted_row, "permuted_row", 2);
  check_i32_device(batched_row, "batched_row", 2);
  MOEKIT_CHECK_ARG(permuted_row.shape == topk_ids.shape, "permuted_row shape",
                   topk_ids.shape.str(), permuted_row.shape.str());
  MOEKIT_CHECK_ARG(batched_row.shape == topk_ids.shape, "batched_row shape", topk_ids.shape.str(),
                   batched_row.shape.str());
  MOEKIT_CHECK_ARG(max_tokens_per_expert >= 0, "max_tokens_per_expert", ">= 0",
                   max_tokens_per_expert);
  const int num_local = static_cast<int>(expert_offsets.size(0)) - 1;
  MOEKIT_CHECK_ARG(num_local >= 1, "expert_offsets size", ">= 2", expert_offsets.size(0));
  int num_global = num_local;
  if (expert_map.defined()) {
    check_i32_device(expert_map, "expert_map", 1);
    num_global = static_cast<int>(expert_map.size(0));
  }
  const std::int64_t n = topk_ids.numel();
  if (n == 0) return;
  cuda::batched_rows_kernel<<<static_cast<unsigned int>((n + 255) / 256), 256, 0,
                              static_cast<cudaStream_t>(stream)>>>(
      static_cast<const std::int32_t*>(topk_ids.data), n,
      expert_map.defined() ? static_cast<const std::int32_t*>(expert_map.data) : nullptr,
      num_global, static_cast<const std::int32_t*>(permuted_row.data),
      static_cast<const std::int32_t*>(expert_offsets.data), max_tokens_per_expert,
      static_cast<std::int32_t*>(batched_row.data));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit
