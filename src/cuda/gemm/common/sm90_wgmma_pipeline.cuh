// The warp-specialized pipeline of the SM90 4-bit wgmma kernels (W4A16: sm90_w4a16_wgmma_gemm.cuh,
// W4A8: sm90_w4a8_wgmma_gemm.cuh; design: docs/kernels/w4a16.md "wgmma tile"): a
// producer warpgroup whose one thread issues every stage of its CTA's units into a ring of stage
// slots (TMA boxes completing on the slot's full mbarrier), two consumer warpgroups that wait
// for a slot, compute, and give it back on its empty mbarrier (one arrival per warp). The ring
// runs across the CTA's units, so the next unit's first stages load during this unit's last ones.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/runtime/sm90_tensor_map.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_grouped_gemm.cuh"

namespace moekit::gemm::sm90 {

// Warp specialization (the wgmma kernels' producer / consumer warpgroups): every thread of a
// warpgroup executes the same setmaxnreg (register counts: multiples of 8 in [24, 256]).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// One arrival of this thread on mbarrier `bar` (release: its prior shared-memory accesses before
// the waiters' acquire).
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One consumer warp is done with a stage slot (its lanes' shared loads and its warpgroup's MMAs
// that read the slot, retired by a wgmma_wait): one arrival on the slot's empty mbarrier.
__device__ __forceinline__ void release_slot(std::uint32_t empty_bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(empty_bar);
}
// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (a
// slot that consumers wrote, e.g. an epilogue's staging, refilled by TMA).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Bytes of a wgmma kernel's per-expert token-tile prefix in shared memory (E + 1 ints, in 128-byte
// steps); the ring follows it, aligned to 1024 at run time.
__host__ __device__ constexpr int expert_prefix_bytes(int num_experts) {
  return ((num_experts + 1) * 4 + 127) / 128 * 128;
}

// The ring in shared memory: kStages slots of kStageBytes from `ring` (1024-aligned: the swizzle
// atom), then per slot a full mbarrier (the producer's arrive.expect_tx, completed by its TMA
// copies) and an empty one (one arrival per consumer warp). kBytes in all.
template <int kStages, int kStageBytes>
struct WgmmaRing {
  static constexpr int kBytes = kStages * (kStageBytes + 16);
  std::uint32_t slots, bars;
  __device__ explicit WgmmaRing(std::uint32_t ring)
      : slots(ring), bars(ring + kStages * kStageBytes) {}
  __device__ std::uint32_t slot(std::uint32_t s) const { return slots + s * kStageBytes; }
  __device__ std::uint32_t full(std::uint32_t s) const { return bars + 8 * s; }
  __device__ std::uint32_t empty(std::uint32_t s) const { return bars + 8 * (kStages + s); }
  // One thread, before the CTA barrier that publishes the barriers to the others. full_arrivals:
  // the producer's arrive.expect_tx, plus any threads that arrive when their copies land.
  __device__ void init(int consumer_warps, int full_arrivals = 1) const {
    for (int s = 0; s < kStages; ++s) {
      cuda::sm90::mbar_init(full(s), full_arrivals);
      cuda::sm90::mbar_init(empty(s), consumer_warps);
    }
    cuda::sm90::fence_mbar_init();
  }
};

// Token classes (the bf16 / fp8 wgmma kernel): the wgmma N a unit runs. A unit of r rows
// (r <= the tile's kTokens) runs the narrowest width that holds them, so an expert's rows cost
// their own count rounded up to 16 or 32 columns of MMA and of B-operand reads, not a whole tile
// (DeepSeek-V3's 128 +- 11 rows per expert at 4096 tokens fill 112..160 of a 160-token tile;
// Mixtral's 1024 +- 28 leave a last 160-token tile of 36..92 rows). Class c's width:
// 32, 64, 96, 112, 128, 144, 160; a tile's classes are the widths up to its kTokens (one of them).
// The producer (its activation box and byte count) and the consumers (their wgmma N) derive a
// unit's class alike. Class 0 is the 32-wide narrow tail of the tiles that had one.
inline constexpr int kMaxTokenClasses = 7;
__host__ __device__ constexpr int token_class_width(int c) {
  return c < 2 ? 32 * (c + 1) : 64 + 16 * c;
}
// The classes of a kTokens tile: 0 .. token_class_count(kTokens) - 1.
constexpr int token_class_count(int tokens) {
  int c = 0;
  while (c < kMaxTokenClasses && token_class_width(c) <= tokens) ++c;
  return c;
}
// The class of a unit of `rows` rows (1 <= rows <= kTokens): the narrowest width that holds them;
// without classes (`classes` false: a measurement override) the whole tile, or class 0 for a
// kNarrowTails tile's tail of at most 32 rows.
template <int kTokens, bool kNarrowTails>
__host__ __device__ __forceinline__ int token_class(int rows, bool classes) {
  constexpr int kClasses = token_class_count(kTokens);
  static_assert(kClasses >= 1 && token_class_width(kClasses - 1) == kTokens,
                "kTokens: one of the token class widths");
  if (!classes) return kNarrowTails && rows <= token_class_width(0) ? 0 : kClasses - 1;
  int c = 0;
#pragma unroll
  for (int i = 0; i + 1 < kClasses; ++i) c += rows > token_class_width(i) ? 1 : 0;
  return c;
}
// f(std::integral_constant<int, width of class cls>) for a run-time class cls of a kTokens tile
// (one inlined copy of f per class).
template <int kTokens, int kC = 0, typename F>
__device__ __forceinline__ void with_token_class(int cls, F&& f) {
  if constexpr (kC + 1 < token_class_count(kTokens)) {
    if (cls != kC) return with_token_class<kTokens, kC + 1>(cls, f);
  }
  f(std::integral_constant<int, token_class_width(kC)>{});
}
// Host: the activation maps of a kTokens tile, one per class (box_inner x the class's width;
// classes past the tile's last repeat its map: the producer prefetches every map). The other
// arguments are encode_tensor_map_2d's.
template <int kTokens>
void encode_token_class_maps(CUtensorMap (&maps)[kMaxTokenClasses], const char* what,
                             CUtensorMapDataType type, const void* base, std::uint64_t inner,
                             std::uint64_t rows, std::uint64_t row_bytes, std::uint32_t box_inner) {
  constexpr int kClasses = token_class_count(kTokens);
  for (int c = 0; c < kMaxTokenClasses; ++c)
    maps[c] = c < kClasses ? cuda::encode_tensor_map_2d(
                                 what, type, base, inner, rows, row_bytes, box_inner,
                                 static_cast<std::uint32_t>(token_class_width(c)),
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
                           : maps[kClasses - 1];
}
// The producer's cursor over the stages of its CTA's units in a warp-specialized wgmma kernel's
// ring (W4A16 / W4A8): unit u (un: its coordinates), its stage c, the ring slot of the next stage
// and how often the ring wrapped. Per issued stage: wait_slot_free, the copies, advance.
template <int kTokens, int kStages>
struct WgmmaStageCursor {
  int u, c, stages, units, cta_row_tiles;
  std::uint32_t slot, round;
  WgmmaUnit un;
  __device__ void next_unit(const Params& p, const int* tile_start) {
    if (u < units) un = wgmma_unit_at<kTokens>(p, tile_start, cta_row_tiles, u);
  }
  // The slot's previous stage (round - 1) retired by every consumer warp (its empty mbarrier).
  __device__ void wait_slot_free(std::uint32_t empty_bar) const {
    if (round > 0) cuda::sm90::mbar_wait(empty_bar, (round - 1) & 1);
  }
  __device__ void advance(const Params& p, const int* tile_start) {
    if (++slot == kStages) slot = 0, ++round;
    if (++c == stages) {
      c = 0;
      u += gridDim.x;
      next_unit(p, tile_start);
    }
  }
};

// The producer warpgroup's part (every thread of it calls this; `issuer` is one of them): gives
// registers up to the consumers (kProducerRegs > 0: setmaxnreg), then the issuer prefetches the
// launch's tensor maps (Maps: CUtensorMap members only) and issues every stage of
// the CTA's units in order, issue_stage(cursor) per stage (it waits for the slot, issues the
// copies, advances the cursor).
template <int kTokens, int kStages, int kProducerRegs, typename Maps, typename IssueStage>
__device__ __forceinline__ void run_wgmma_producer(bool issuer, const Maps& maps, const Params& p,
                                                   const int* tile_start, int units, int stages,
                                                   int cta_row_tiles, IssueStage&& issue_stage) {
  if constexpr (kProducerRegs > 0) setmaxnreg_dec<kProducerRegs>();
  if (!issuer) return;
  static_assert(sizeof(Maps) % sizeof(CUtensorMap) == 0, "Maps: CUtensorMap members only");
  const CUtensorMap* map = reinterpret_cast<const CUtensorMap*>(&maps);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(Maps) / sizeof(CUtensorMap)); ++i)
    cuda::sm90::tma_prefetch_map(map + i);
  WgmmaStageCursor<kTokens, kStages> cursor{
      static_cast<int>(blockIdx.x), 0, stages, units, cta_row_tiles, 0, 0, {}};
  cursor.next_unit(p, tile_start);
  while (cursor.u < units) issue_stage(cursor);
}

// Host: the persistent grid of a warp-specialized wgmma kernel (W4A8, bf16 / fp8): at most
// units_bound CTAs and no more than fit on the device at once (occupancy x SMs), capped by
// max_ctas (> 0), after setting the kernel's dynamic shared memory to smem bytes. Writes *grid;
// returns the CUDA error of the attribute / occupancy / device calls (cudaErrorInvalidConfiguration
// when not one CTA fits).
template <typename Kernel>
cudaError_t persistent_grid(Kernel kernel, int threads, int smem, std::int64_t units_bound,
                            int max_ctas, std::int64_t* grid) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  int per_sm = 0, dev = 0, sms = 0;
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem)) !=
      cudaSuccess)
    return err;
  if (per_sm == 0) return cudaErrorInvalidConfiguration;
  if ((err = cudaGetDevice(&dev)) != cudaSuccess) return err;
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
    return err;
  *grid = std::min<std::int64_t>(units_bound, static_cast<std::int64_t>(per_sm) * sms);
  if (max_ctas > 0) *grid = std::min<std::int64_t>(*grid, max_ctas);
  return cudaSuccess;
}

}  // namespace moekit::gemm::sm90
