// compute_permutation_cuda and batched_rows_cuda (include/moekit/permute/permute_cuda.hpp).
//
// One CTA of 256 threads, deterministic by construction (no order that depends on atomics
// scheduling): (1) per-expert counts with shared-memory integer atomics (a count does not depend
// on the order of increments); (2) an exclusive block scan of the padded counts; (3) a stable rank:
// assignments are walked in tiles of 256 in ascending order; inside a tile, __match_any_sync gives
// each assignment its rank among same-expert lanes of its warp, and per-(warp, expert) counts
// (tagged with the tile number, so they never need clearing) give the offset of earlier warps.
// Cost: two barriers per tile of 256 assignments; M*k <= 512 (decode) is one or two tiles.
// Launched as a programmatic dependent of the router (see compute_permutation_cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/permute/permute_checks.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxLocal = kPermuteCudaMaxLocalExperts;
constexpr int kCached = 4;  // assignments per thread kept in registers (n <= 1024)

struct PermArgs {
  const std::int32_t* topk_ids = nullptr;
  std::int64_t n = 0;  // M * k
  const std::int32_t* expert_map = nullptr;
  int num_global = 0;
  int num_local = 0;
  int block_size = 1;
  std::int32_t* counts = nullptr;
  std::int32_t* offsets = nullptr;
  std::int32_t* sorted = nullptr;
  std::int64_t capacity = 0;
  std::int32_t* rows = nullptr;
};

__device__ __forceinline__ int local_expert(const PermArgs& a, std::int64_t i) {
  const int g = a.topk_ids[i];
  if (g < 0 || g >= a.num_global) return -1;
  return a.expert_map ? a.expert_map[g] : g;
}

__global__ void __launch_bounds__(kThreads) permutation_kernel(PermArgs a) {
  __shared__ int s_count[kMaxLocal];
  __shared__ int s_cursor[kMaxLocal];
  __shared__ int s_wcount[kWarps][kMaxLocal];
  __shared__ int s_wtag[kWarps][kMaxLocal];
  __shared__ int s_warp_sum[kWarps];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int num_local = a.num_local;
  for (int e = tid; e < num_local; e += kThreads) {
    s_count[e] = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s_wtag[w][e] = -1;
  }
  for (std::int64_t r = tid; r < a.capacity; r += kThreads) a.sorted[r] = -1;
  // Programmatic dependent launch: everything above touches only this op's own outputs, so it
  // overlaps the tail of the kernel before (the router triggers its dependents at its start);
  // topk_ids / expert_map are read only after the previous grid completed and flushed. Without
  // the launch attribute this is a no-op.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // Decode sizes (n <= kCached * kThreads): each thread reads its assignments' experts once, all
  // loads in flight together, and keeps them in registers for the counts and the ranks.
  const bool cached = a.n <= static_cast<std::int64_t>(kCached) * kThreads;
  int lc[kCached];
  if (cached) {
#pragma unroll
    for (int t = 0; t < kCached; ++t) {
      const std::int64_t i = static_cast<std::int64_t>(t) * kThreads + tid;
      lc[t] = i < a.n ? local_expert(a, i) : -1;
    }
  }
  __syncthreads();  // the shared-memory initialization above

  // (1) counts.
  if (cached) {
#pragma unroll
    for (int t = 0; t < kCached; ++t)
      if (lc[t] >= 0) atomicAdd(&s_count[lc[t]], 1);
  } else {
    for (std::int64_t i = tid; i < a.n; i += kThreads) {
      const int l = local_expert(a, i);
      if (l >= 0) atomicAdd(&s_count[l], 1);
    }
  }
  __syncthreads();

  // (2) exclusive scan of padded counts; thread tid owns experts [lo, hi).
  const int per = (num_local + kThreads - 1) / kThreads;
  const int lo = std::min(tid * per, num_local), hi = std::min(lo + per, num_local);
  const int bs = a.block_size;
  int mine = 0;
  for (int e = lo; e < hi; ++e) mine += (s_count[e] + bs - 1) / bs * bs;
  int incl = mine;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int o = __shfl_up_sync(0xFFFFFFFFu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) s_warp_sum[warp] = incl;
  __syncthreads();
  int before = 0, total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += s_warp_sum[w];
    total += s_warp_sum[w];
  }
  int run = before + incl - mine;
  for (int e = lo; e < hi; ++e) {
    a.offsets[e] = run;
    a.counts[e] = s_count[e];
    s_cursor[e] = run;
    run += (s_count[e] + bs - 1) / bs * bs;
  }
  if (tid == 0) a.offsets[num_local] = total;
  __syncthreads();

  // (3) stable rank, tile by tile in ascending assignment order.
  const unsigned lanemask_lt = (1u << lane) - 1u;
  int tile = 0;
  for (std::int64_t base = 0; base < a.n; base += kThreads, ++tile) {
    const std::int64_t i = base + tid;
    int l = -1;
    if (cached) {
#pragma unroll
      for (int t = 0; t < kCached; ++t)
        if (t == tile) l = lc[t];
    } else if (i < a.n) {
      l = local_expert(a, i);
    }
    const int key = i < a.n ? l : -2;
    const unsigned mask = __match_any_sync(0xFFFFFFFFu, key);
    const int rank = __popc(mask & lanemask_lt);
    const bool first = (__ffs(mask) - 1) == lane;
    const bool last_in_warp = (31 - __clz(mask)) == lane;
    if (l >= 0 && first) {
      s_wcount[warp][l] = __popc(mask);
      s_wtag[warp][l] = tile;
    }
    __syncthreads();
    int pos = -1;
    bool last = false;
    if (l >= 0) {
      pos = s_cursor[l] + rank;
      last = last_in_warp;
      for (int w = 0; w < kWarps; ++w) {
        if (s_wtag[w][l] != tile) continue;
        if (w < warp) pos += s_wcount[w][l];
        if (w > warp) last = false;
      }
      a.sorted[pos] = static_cast<std::int32_t>(i);
    }
    if (i < a.n) a.rows[i] = pos;
    __syncthreads();
    if (last) s_cursor[l] = pos + 1;
    // The next tile reads s_cursor only after its first barrier.
  }
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

void compute_permutation_cuda(const TensorView& topk_ids, const TensorView& expert_map,
                              int num_local_experts, int block_size, const PermutationView& out,
                              StreamHandle stream) {
  using permute_detail::check_i32_device;
  check_i32_device(topk_ids, "topk_ids", 2);
  MOEKIT_CHECK_ARG(num_local_experts >= 1 && num_local_experts <= kMaxLocal, "num_local_experts",
                   "in [1, " + std::to_string(kMaxLocal) + "] on cuda", num_local_experts);
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
  PermArgs a;
  a.topk_ids = static_cast<const std::int32_t*>(topk_ids.data);
  a.n = m * k;
  a.expert_map = expert_map.defined() ? static_cast<const std::int32_t*>(expert_map.data) : nullptr;
  a.num_global = num_global;
  a.num_local = num_local_experts;
  a.block_size = block_size;
  a.counts = static_cast<std::int32_t*>(out.expert_counts.data);
  a.offsets = static_cast<std::int32_t*>(out.expert_offsets.data);
  a.sorted = static_cast<std::int32_t*>(out.sorted_ids.data);
  a.capacity = out.sorted_ids.size(0);
  a.rows = static_cast<std::int32_t*>(out.permuted_row.data);
  // Launched with programmatic stream serialization (PDL): the kernel may start while the previous
  // kernel on the stream (the router) is still running and waits in-kernel for its results.
  cudaLaunchConfig_t launch = {};
  launch.gridDim = dim3(1);
  launch.blockDim = dim3(kThreads);
  launch.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  launch.attrs = attr;
  launch.numAttrs = 1;
  MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&launch, permutation_kernel, a));
  MOEKIT_CUDA_CHECK_LAUNCH();
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
  batched_rows_kernel<<<static_cast<unsigned int>((n + 255) / 256), 256, 0,
                        static_cast<cudaStream_t>(stream)>>>(
      static_cast<const std::int32_t*>(topk_ids.data), n,
      expert_map.defined() ? static_cast<const std::int32_t*>(expert_map.data) : nullptr,
      num_global, static_cast<const std::int32_t*>(permuted_row.data),
      static_cast<const std::int32_t*>(expert_offsets.data), max_tokens_per_expert,
      static_cast<std::int32_t*>(batched_row.data));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit
