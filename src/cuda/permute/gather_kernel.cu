// permute_gather_cuda and scatter_batched_cuda: raw-byte row copies driven by a permutation.
// Both are gathers (each output row is written exactly once by the threads that own it), so they
// are deterministic. The copy unit is 16, 4 or 1 bytes, the widest that the row size and the
// pointers allow; one thread per unit, consecutive threads along a row (coalesced).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/permute/permute_checks.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit {

namespace {

template <typename V>
__device__ __forceinline__ V zero_unit() {
  if constexpr (sizeof(V) == 16) {
    return make_uint4(0u, 0u, 0u, 0u);
  } else {
    return V{0};
  }
}

// out[r, u] = src[sorted[r] / k, u] or 0; r < rows_out.
template <typename V>
__global__ void __launch_bounds__(256) gather_rows_kernel(const V* __restrict__ src,
                                                          const std::int32_t* __restrict__ sorted,
                                                          int top_k, V* __restrict__ out,
                                                          std::int64_t total,
                                                          std::int64_t units_per_row) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / units_per_row;
    const std::int64_t u = i - r * units_per_row;
    const std::int32_t a = sorted[r];
    out[i] = a >= 0 ? src[static_cast<std::int64_t>(a / top_k) * units_per_row + u] : zero_unit<V>();
  }
}

// out[e, i, u] = src[sorted[offsets[e] + i] / k, u] for i < min(counts[e], t_max), else 0.
// Threads i < num_local also write expert_num_tokens.
template <typename V>
__global__ void __launch_bounds__(256) scatter_batched_kernel(
    const V* __restrict__ src, const std::int32_t* __restrict__ sorted,
    const std::int32_t* __restrict__ offsets, const std::int32_t* __restrict__ counts, int top_k,
    V* __restrict__ out, std::int64_t t_max, std::int64_t units_per_row, int num_local,
    std::int32_t* __restrict__ expert_num_tokens) {
  const std::int64_t total = num_local * t_max * units_per_row;
  const std::int64_t limit = std::max<std::int64_t>(total, num_local);
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < limit; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (i < num_local)
      expert_num_tokens[i] = static_cast<std::int32_t>(std::min<std::int64_t>(counts[i], t_max));
    if (i >= total) continue;
    const std::int64_t row = i / units_per_row;
    const std::int64_t u = i - row * units_per_row;
    const std::int64_t e = row / t_max;
    const std::int64_t slot = row - e * t_max;
    V v = zero_unit<V>();
    if (slot < counts[e]) {
      const std::int32_t a = sorted[offsets[e] + slot];
      v = src[static_cast<std::int64_t>(a / top_k) * units_per_row + u];
    }
    out[i] = v;
  }
}

int unit_bytes(std::int64_t row_bytes, const void* p, const void* q) {
  const auto ap = reinterpret_cast<std::uintptr_t>(p) | reinterpret_cast<std::uintptr_t>(q);
  if (row_bytes % 16 == 0 && ap % 16 == 0) return 16;
  if (row_bytes % 4 == 0 && ap % 4 == 0) return 4;
  return 1;
}

unsigned int grid_for(std::int64_t threads) {
  // Grid-stride beyond ~16 CTAs per SM of 132 SMs.
  return static_cast<unsigned int>(std::clamp<std::int64_t>((threads + 255) / 256, 1, 132 * 16));
}

}  // namespace

void permute_gather_cuda(const TensorView& src, const TensorView& sorted_ids, int top_k,
                         const TensorView& out, StreamHandle stream) {
  permute_detail::check_i32_device(sorted_ids, "sorted_ids", 1);
  MOEKIT_CHECK_ARG(top_k >= 1, "top_k", ">= 1", top_k);
  permute_detail::check_rows_compatible(src, out, 1, "out");
  MOEKIT_CHECK_ARG(out.size(0) <= sorted_ids.size(0), "out rows",
                   "<= sorted_ids size " + std::to_string(sorted_ids.size(0)), out.size(0));
  const std::int64_t rb = permute_detail::row_bytes(src, 1);
  const std::int64_t rows = out.size(0);
  if (rb == 0 || rows == 0) return;
  const int ub = unit_bytes(rb, src.data, out.data);
  const std::int64_t upr = rb / ub;
  const std::int64_t total = rows * upr;
  auto s = static_cast<cudaStream_t>(stream);
  const auto* ids = static_cast<const std::int32_t*>(sorted_ids.data);
  if (ub == 16) {
    gather_rows_kernel<uint4><<<grid_for(total), 256, 0, s>>>(
        static_cast<const uint4*>(src.data), ids, top_k, static_cast<uint4*>(out.data), total, upr);
  } else if (ub == 4) {
    gather_rows_kernel<std::uint32_t><<<grid_for(total), 256, 0, s>>>(
        static_cast<const std::uint32_t*>(src.data), ids, top_k,
        static_cast<std::uint32_t*>(out.data), total, upr);
  } else {
    gather_rows_kernel<std::uint8_t><<<grid_for(total), 256, 0, s>>>(
        static_cast<const std::uint8_t*>(src.data), ids, top_k,
        static_cast<std::uint8_t*>(out.data), total, upr);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void scatter_batched_cuda(const TensorView& src, const PermutationView& permutation, int top_k,
                          const TensorView& out, const TensorView& expert_num_tokens,
                          StreamHandle stream) {
  using permute_detail::check_i32_device;
  MOEKIT_CHECK_ARG(top_k >= 1, "top_k", ">= 1", top_k);
  permute_detail::check_rows_compatible(src, out, 2, "out");
  check_i32_device(permutation.expert_counts, "expert_counts", 1);
  check_i32_device(permutation.expert_offsets, "expert_offsets", 1);
  check_i32_device(permutation.sorted_ids, "sorted_ids", 1);
  check_i32_device(expert_num_tokens, "expert_num_tokens", 1);
  const std::int64_t num_local = permutation.expert_counts.size(0);
  MOEKIT_CHECK_ARG(out.size(0) == num_local, "out dim 0 (local experts)", num_local, out.size(0));
  MOEKIT_CHECK_ARG(permutation.expert_offsets.size(0) == num_local + 1, "expert_offsets shape",
                   Shape{num_local + 1}.str(), permutation.expert_offsets.shape.str());
  MOEKIT_CHECK_ARG(expert_num_tokens.size(0) == num_local, "expert_num_tokens shape",
                   Shape{num_local}.str(), expert_num_tokens.shape.str());
  const std::int64_t t_max = out.size(1);
  const std::int64_t rb = permute_detail::row_bytes(src, 1);
  const int ub = rb == 0 ? 16 : unit_bytes(rb, src.data, out.data);
  const std::int64_t upr = rb / ub;
  const std::int64_t total = std::max<std::int64_t>(num_local * t_max * upr, num_local);
  auto s = static_cast<cudaStream_t>(stream);
  const auto* sorted = static_cast<const std::int32_t*>(permutation.sorted_ids.data);
  const auto* offsets = static_cast<const std::int32_t*>(permutation.expert_offsets.data);
  const auto* counts = static_cast<const std::int32_t*>(permutation.expert_counts.data);
  auto* ent = static_cast<std::int32_t*>(expert_num_tokens.data);
  const int nl = static_cast<int>(num_local);
  if (ub == 16) {
    scatter_batched_kernel<uint4><<<grid_for(total), 256, 0, s>>>(
        static_cast<const uint4*>(src.data), sorted, offsets, counts, top_k,
        static_cast<uint4*>(out.data), t_max, upr, nl, ent);
  } else if (ub == 4) {
    scatter_batched_kernel<std::uint32_t><<<grid_for(total), 256, 0, s>>>(
        static_cast<const std::uint32_t*>(src.data), sorted, offsets, counts, top_k,
        static_cast<std::uint32_t*>(out.data), t_max, upr, nl, ent);
  } else {
    scatter_batched_kernel<std::uint8_t><<<grid_for(total), 256, 0, s>>>(
        static_cast<const std::uint8_t*>(src.data), sorted, offsets, counts, top_k,
        static_cast<std::uint8_t*>(out.data), t_max, upr, nl, ent);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit
