// The row gather (permute_kernels.hpp) and the public permute_gather_cuda / scatter_batched_cuda
// (moekit/permute/permute_cuda.hpp): raw-byte row copies driven by a permutation. Every output row
// is written by the threads that own it, so the copies are deterministic. The copy unit is 16, 4
// or 1 bytes, the widest that the row size and the pointers allow.
// Long rows: one CTA per row (grid-stride over rows), its threads along the row. Rows of fewer
// than tuning::sm90::kGatherShortRowVectors units (the fp8 1x128 scales: 56 floats at K 7168;
// W4A8's 4-byte row scales), and the wgmma K order: one flat range of (row, unit) pairs over the
// grid, since one CTA per short row leaves most of its threads idle (23 us for deepseek-v3's 32768
// rows of 224 bytes on an H100).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/permute/permute_checks.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/core/error.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit::cuda {
namespace {

constexpr int kFlatThreads = 256;

template <typename V>
__device__ __forceinline__ V zero_unit() {
  if constexpr (sizeof(V) == 16) {
    return make_uint4(0u, 0u, 0u, 0u);
  } else {
    return V{0};
  }
}

__device__ __forceinline__ long long rows_to_copy(const int* num_rows, long long max_rows) {
  return num_rows != nullptr ? min(static_cast<long long>(max(*num_rows, 0)), max_rows) : max_rows;
}

// out[r, u] = src[sorted[r] / top_k, u] (zeros where sorted[r] < 0), one CTA per row.
template <typename V>
__global__ void gather_rows_kernel(const V* __restrict__ src, long long units,
                                   const int* __restrict__ sorted, int top_k, long long max_rows,
                                   const int* __restrict__ num_rows, V* __restrict__ out) {
  const long long rows = rows_to_copy(num_rows, max_rows);
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const int a = sorted != nullptr ? sorted[r] : static_cast<int>(r) * top_k;
    V* d = out + r * units;
    if (a < 0) {
      for (long long i = threadIdx.x; i < units; i += blockDim.x) d[i] = zero_unit<V>();
      continue;
    }
    const V* s = src + static_cast<long long>(a / top_k) * units;
    for (long long i = threadIdx.x; i < units; i += blockDim.x) d[i] = s[i];
  }
}

// The same over a flat range of (row, unit) pairs. kWgmmaOrder (V = uint4, bf16 rows): output
// unit q of a 64-wide chunk c holds the source's 4-byte words 32c + q + {0, 8, 16, 24}
// (gemm::KOrder::kWgmma).
template <typename V, bool kWgmmaOrder>
__global__ void __launch_bounds__(kFlatThreads)
    gather_flat_kernel(const V* __restrict__ src, long long units,
                       const int* __restrict__ sorted, int top_k, long long max_rows,
                       const int* __restrict__ num_rows, V* __restrict__ out) {
  const long long rows = rows_to_copy(num_rows, max_rows);
  const long long total = rows * units;
  for (long long i = blockIdx.x * static_cast<long long>(kFlatThreads) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * kFlatThreads) {
    const long long r = i / units;
    const long long u = i - r * units;
    const int a = sorted != nullptr ? sorted[r] : static_cast<int>(r) * top_k;
    if (a < 0) {
      out[i] = zero_unit<V>();
      continue;
    }
    const V* s = src + static_cast<long long>(a / top_k) * units;
    if constexpr (kWgmmaOrder) {
      const auto* w = reinterpret_cast<const std::uint32_t*>(s) + (u / 8) * 32 + u % 8;
      out[i] = make_uint4(w[0], w[8], w[16], w[24]);
    } else {
      out[i] = s[u];
    }
  }
}

int unit_bytes(std::int64_t row_bytes, const void* p, const void* q) {
  const auto ap = reinterpret_cast<std::uintptr_t>(p) | reinterpret_cast<std::uintptr_t>(q);
  if (row_bytes % 16 == 0 && ap % 16 == 0) return 16;
  if (row_bytes % 4 == 0 && ap % 4 == 0) return 4;
  return 1;
}

template <typename V>
void launch_gather(const GatherArgs& g, cudaStream_t s) {
  const long long units = g.row_bytes / static_cast<long long>(sizeof(V));
  const auto* src = static_cast<const V*>(g.src);
  auto* out = static_cast<V*>(g.out);
  const bool wgmma = g.order == gemm::KOrder::kWgmma;
  if (wgmma || units < tuning::sm90::kGatherShortRowVectors) {
    const long long ctas = std::min<long long>(
        (g.max_rows * units + kFlatThreads - 1) / kFlatThreads, 65535);
    auto kernel = gather_flat_kernel<V, false>;
    if constexpr (sizeof(V) == 16)
      if (wgmma) kernel = gather_flat_kernel<V, true>;
    kernel<<<static_cast<unsigned>(ctas), kFlatThreads, 0, s>>>(src, units, g.sorted_ids, g.top_k,
                                                              g.max_rows, g.num_rows, out);
  } else {
    const int blocks = static_cast<int>(std::min<long long>(g.max_rows, 65535));
    const int threads = static_cast<int>(std::clamp<long long>(units, 32, 256));
    gather_rows_kernel<V><<<blocks, threads, 0, s>>>(src, units, g.sorted_ids, g.top_k,
                                                     g.max_rows, g.num_rows, out);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
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

}  // namespace

void gather_rows(const GatherArgs& g, StreamHandle stream) {
  MOEKIT_CHECK_ARG(g.row_bytes > 0, "row_bytes", "> 0", g.row_bytes);
  MOEKIT_CHECK_ARG(g.top_k >= 1, "top_k", ">= 1", g.top_k);
  MOEKIT_CHECK_ARG(g.max_rows >= 0 && g.max_rows < (std::int64_t{1} << 31), "max_rows",
                   "in [0, 2^31)", g.max_rows);
  if (g.max_rows == 0) return;
  const int ub = unit_bytes(g.row_bytes, g.src, g.out);
  if (g.order == gemm::KOrder::kWgmma)
    MOEKIT_CHECK_ARG(ub == 16 && g.row_bytes % 128 == 0, "order",
                     "natural unless the rows are bf16 of K % 64 == 0 with 16-byte aligned "
                     "pointers (the wgmma K order)",
                     "wgmma");
  auto s = static_cast<cudaStream_t>(stream);
  if (ub == 16) launch_gather<uint4>(g, s);
  else if (ub == 4) launch_gather<std::uint32_t>(g, s);
  else launch_gather<std::uint8_t>(g, s);
}

}  // namespace moekit::cuda

namespace moekit {

void permute_gather_cuda(const TensorView& src, const TensorView& sorted_ids, int top_k,
                         const TensorView& out, StreamHandle stream) {
  permute_detail::check_i32_device(sorted_ids, "sorted_ids", 1);
  MOEKIT_CHECK_ARG(top_k >= 1, "top_k", ">= 1", top_k);
  permute_detail::check_rows_compatible(src, out, 1, "out");
  MOEKIT_CHECK_ARG(out.size(0) <= sorted_ids.size(0), "out rows",
                   "<= sorted_ids size " + std::to_string(sorted_ids.size(0)), out.size(0));
  cuda::GatherArgs g;
  g.src = src.data;
  g.row_bytes = permute_detail::row_bytes(src, 1);
  g.sorted_ids = static_cast<const std::int32_t*>(sorted_ids.data);
  g.top_k = top_k;
  g.max_rows = out.size(0);
  g.out = out.data;
  if (g.row_bytes == 0 || g.max_rows == 0) return;
  cuda::gather_rows(g, stream);
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
  const int ub = rb == 0 ? 16 : cuda::unit_bytes(rb, src.data, out.data);
  const std::int64_t upr = rb / ub;
  const std::int64_t total = std::max<std::int64_t>(num_local * t_max * upr, num_local);
  // Grid-stride beyond ~16 CTAs per SM of 132 SMs.
  const auto grid =
      static_cast<unsigned int>(std::clamp<std::int64_t>((total + 255) / 256, 1, 132 * 16));
  auto s = static_cast<cudaStream_t>(stream);
  const auto* sorted = static_cast<const std::int32_t*>(permutation.sorted_ids.data);
  const auto* offsets = static_cast<const std::int32_t*>(permutation.expert_offsets.data);
  const auto* counts = static_cast<const std::int32_t*>(permutation.expert_counts.data);
  auto* ent = static_cast<std::int32_t*>(expert_num_tokens.data);
  const int nl = static_cast<int>(num_local);
  auto launch = [&](auto unit) {
    using V = decltype(unit);
    cuda::scatter_batched_kernel<V><<<grid, 256, 0, s>>>(
        static_cast<const V*>(src.data), sorted, offsets, counts, top_k, static_cast<V*>(out.data),
        t_max, upr, nl, ent);
  };
  if (ub == 16) launch(uint4{});
  else if (ub == 4) launch(std::uint32_t{});
  else launch(std::uint8_t{});
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit
