// SM90 mbarrier + bulk async copy (the copy engine: cp.async.bulk, and its tensor form through a
// TMA descriptor, cp.async.bulk.tensor) building blocks, on 32-bit shared-memory addresses: used
// by the W4A16 wgmma tile (gemm/sm90_w4a16_wgmma_gemm.cuh) and the FP4 quantize row staging
// (quant/quantize_fp4_rows.cuh). Tensor maps: cuda/runtime/sm90_tensor_map.hpp.
//
// Async proxy: a fence.proxy.async of other threads' generic accesses does not wait for them;
// completion of a bulk copy is observed through its mbarrier, which also makes the data visible
// to the threads that waited on it.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace moekit::cuda::sm90 {

// The 32-bit shared-memory address of a pointer into shared memory.
__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes mbarrier.init visible to the async proxy (before any bulk copy uses it).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` of bulk-copy transactions this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits for the completion of the phase with parity `parity`.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// bytes (multiple of 16, both addresses 16-byte aligned) global -> this CTA's shared memory,
// completing `bytes` transactions on mbarrier `bar`.
__device__ __forceinline__ void bulk_copy_g2s(std::uint32_t dst, const void* src,
                                              std::uint32_t bytes, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
      "bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// The box of `map` at element coordinates (x inner, y outer) -> this CTA's shared memory at dst
// (1024-byte aligned for a 128-byte swizzle), completing the box's bytes on mbarrier `bar`
// (out-of-bounds elements are written as zeros and counted). `map` must be a __grid_constant__
// kernel parameter (or in global / constant memory).
__device__ __forceinline__ void tma_load_2d(std::uint32_t dst, const CUtensorMap* map, int x, int y,
                                            std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// The same for a 3-D / 5-D map (coordinates innermost first).
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const CUtensorMap* map, int x, int y,
                                            int z, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_load_5d(std::uint32_t dst, const CUtensorMap* map, int c0,
                                            int c1, int c2, int c3, int c4, std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(bar)
      : "memory");
}
// Fetches a tensor map into the descriptor cache ahead of its first use.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

}  // namespace moekit::cuda::sm90
