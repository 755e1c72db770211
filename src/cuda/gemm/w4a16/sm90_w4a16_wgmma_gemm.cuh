// SM90 W4A16 grouped GEMM for many tokens per expert (prefill): warpgroup MMA (wgmma, sm_90a)
// with the dequantized weights as the register A operand (design and measurements:
// docs/kernels/w4a16.md, "wgmma tile").
//
// CTA = 2 warpgroups = 128 weight rows x kTokens tokens (wgmma m64 x N per warpgroup); warp w owns
// the 16-row tile 8 cta_rt + w of the shuffled layout (sm90_w4a16_weight_shuffle.cpp): one 16-byte
// shared load per lane and 64-wide K chunk, dequant_word -> the 4 A registers of one k16 step. The
// wgmma A fragment of a warp's 16 rows is the mma.sync m16n8k16 A layout
// (common/sm90_wgmma_rs_bf16_ops.cuh), so the decode kernels' dequant feeds wgmma as is.
//
// The shuffle permutes K inside a 64-wide chunk (lane t holds K [16t, 16t + 16)), so MMA-k is not
// the natural k. The activations arrive in the matching order (KOrder::kWgmma, written by
// the row gather, cuda/permute/permute_kernels.hpp, or by the previous GEMM's epilogue), rows
// in order (no row_index), so TMA boxes of 64 K x kTokens rows land in the wgmma B slots as they
// are (K-major, 128-byte swizzle).
//
// v4 (TMA): one thread feeds the whole CTA. A stage is two 64-wide K chunks of everything the CTA
// multiplies: two activation boxes, one box of the 8 row tiles' codes (the layout keeps a row
// tile's chunks consecutive: [E n / 16 tiles][K / 64 chunks][512 bytes] is a 2-D tensor) and one
// of their scale records, all completing on the stage's full mbarrier. Out-of-bounds box elements
// are zeros: a one-chunk last stage (K % 128 == 64) multiplies zero weights with zero
// activations; rows past the expert's end or past N only reach outputs that are not stored. v3
// issued 16-byte cp.async copies per thread (~100 of its ~590 instructions per warp and stage)
// and a bulk copy per warp.
//
// v5 (warp-specialized): a third warpgroup is the producer (setmaxnreg 40; one thread issues),
// the two consumer warpgroups (setmaxnreg 232) do the dequant and the MMAs, and nothing
// synchronizes the CTA in the loop. The ring of kStages stages runs across the CTA's units: the
// producer fills a slot as soon as its empty mbarrier says that all 8 consumer warps retired the
// stage in it (each warp arrives once its wgmma_wait has retired the stage's last MMAs), so the
// next unit's first stages load during this unit's last ones and its epilogue. v4 had one CTA
// barrier per stage (a quarter of the warps' stall samples) and refilled a slot one stage later.
//
// Per stage and consumer warpgroup: wait for the stage's full mbarrier; per chunk h: dequant into
// that chunk's A registers (one set per chunk: the previous chunk's MMAs may still read the other
// set), issue 4 async wgmma k16, retire the previous chunk (wgmma_wait<1>; after chunk 0 that is
// the previous stage's last chunk: release its slot).
//
// Units are (expert, 128-row tile, token tile), expert-major (an expert's row tiles x token tiles
// are consecutive, so one wave of the persistent grid shares the expert's activations and each
// weight tile through L2). A token tile of at most 32 rows (an expert's short last one) runs an
// N = 32 wgmma on 8-row activation boxes. Epilogue: store_tile of the decode kernel (same math),
// natural or wgmma K order.
//
// The 32-token tile (2026-12-01i, 9..32 rows per expert): units of N = 8 / 16 / 32 by their rows
// (WgmmaConfig::unit_n), 3 CTAs per SM of 288 threads whose producer is one warp (no setmaxnreg;
// 72 registers each, so one chunk's MMAs in flight per warpgroup, hidden by the 24 warps per SM);
// 2 CTAs of 6 stages with at most 8 experts and 24 rows per expert (2026-12-03).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/decode/sm90_decode_grouped_gemm.cuh"
#include "cuda/gemm/common/sm90_wgmma_rs_bf16_ops.cuh"
#include "cuda/gemm/common/sm90_wgmma_pipeline.cuh"

namespace moekit::gemm::sm90::w4a16 {

using cuda::sm90::tma_load_2d;
using sm90::decode::store_tile;

// The TMA descriptors of one launch (encoded on the host by w4a16_wgmma_launch).
struct WgmmaMaps {
  CUtensorMap a;         // bf16 [m rows][k], wgmma K order: box 64 x kTokens, 128-byte swizzle
  CUtensorMap a_narrow;  // the same, box 64 x 8 (narrow units: n / 8 boxes per chunk)
  CUtensorMap codes;     // u64 [E n / 16 row tiles][k / 64 chunks x 64]: box 128 x 8
  CUtensorMap scales;    // u8 [E n / 16 row tiles][k / 64 chunks x record]: box 2 records x 8
};

// kTokens: wgmma N (128; 160 for experts of ~100-160 rows: one token tile holds them where 128
// would stream every weight tile a second time for a short second tile; 256 for many rows per
// expert: twice the MMAs per dequantized chunk; 32 for a few rows per expert, where the weight
// stream sets the pace: its units run N = 8 / 16 / 32 by their rows). kStages: ring depth.
// kCtasPerSm: 1, or 2 / 3 (more consumer warps per SM on fewer registers: the narrow tile).
template <int kTokens_, int kStages_, int kCtasPerSm_ = 1>
struct WgmmaConfig {
  static constexpr int kCtasPerSm = kCtasPerSm_;
  static_assert(kCtasPerSm >= 1 && kCtasPerSm <= 3, "CTAs per SM");
  // 2 consumer warpgroups + the producer: a warpgroup that gives its registers to the consumers
  // through setmaxnreg (1 CTA per SM: 168 x 384 at launch >= 40 x 128 + 232 x 256), or, at 2 / 3
  // CTAs per SM, one warp and no setmaxnreg. Registers per thread: an SM sub-partition (16 K
  // registers) holds 5 / 7 of the 18 / 27 warps, hence 96 / 72; the consumers then keep one
  // chunk's A registers and retire each chunk's MMAs before the next dequant (wgmma_unit's
  // kSync), which 16-24 warps per SM hide (measured faster than 1 CTA with two chunks in flight).
  static constexpr int kThreads = kCtasPerSm == 1 ? 384 : 288;
  static constexpr int kConsumers = 256;
  static constexpr int kRows = 128;  // 2 x 64 weight rows = 8 row tiles of 16
  static constexpr int kProducerRegs = kCtasPerSm == 1 ? 40 : 0;  // 0: no setmaxnreg
  static constexpr int kConsumerRegs = kCtasPerSm == 1 ? 232 : 0;
  static constexpr int kMaxRegs = kCtasPerSm == 1 ? 168 : kCtasPerSm == 2 ? 96 : 72;
  static constexpr int kTokens = kTokens_, kStages = kStages_;
  static constexpr int kNarrow = 32;  // the short tail tile's wgmma N
  // The 32-token tile's units of at most 8 / 16 rows run N = 8 / 16 (fewer MMAs and activation
  // bytes per weight chunk); the larger tiles' tails run N = 32.
  static constexpr bool kLadder = kTokens_ == 32;
  // The wgmma N of a unit of `rows` token rows (1..kTokens).
  __host__ __device__ static constexpr int unit_n(int rows) {
    return rows > kNarrow          ? kTokens_
           : kLadder && rows <= 8  ? 8
           : kLadder && rows <= 16 ? 16
                                   : kNarrow;
  }
  // Stage slot: two activation halves (chunk 2c, 2c + 1) of kTokens rows x 64 bf16 (128 bytes,
  // swizzled; 1024-aligned), the codes box [8 tiles][2 x 512 bytes], the scales box [8 tiles][2
  // records of 64 (NVFP4) / 32 (MXFP4) bytes].
  static constexpr int kHalfBytes = kTokens * 128;
  static constexpr int kCodesOffset = 2 * kHalfBytes;
  static constexpr int kScalesOffset = kCodesOffset + 8 * 1024;
  static constexpr int kStageBytes = kScalesOffset + 8 * 128;
  static constexpr int kLutBytes = 256 * 4;
  static_assert(is_wgmma_token_tile(kTokens), "wgmma token tile");
  static_assert(kHalfBytes % 1024 == 0 && kStageBytes % 1024 == 0, "swizzle atoms");
  static_assert(kStages >= 2, "ring");
  __host__ __device__ static int offsets_bytes(int num_experts) {
    return expert_prefix_bytes(num_experts);
  }
  // After the LUT and the tile prefix, aligned to 1024 at run time: the ring (WgmmaSmem).
  static int smem_bytes(int num_experts) {
    return kLutBytes + offsets_bytes(num_experts) + 1024 + WgmmaRing<kStages, kStageBytes>::kBytes;
  }
};

__device__ __forceinline__ std::uint32_t lds_u16(std::uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}

// The CTA's ring of stage slots (all addresses in the shared window).
template <typename Cfg>
using WgmmaSmem = WgmmaRing<Cfg::kStages, Cfg::kStageBytes>;

// The producer thread's feed: one stage of its CTA's units per call, in the order the consumers
// take them.
template <typename Cfg, bool kNvfp4>
__device__ __forceinline__ void wgmma_issue_stage(WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>& f,
                                                  const Params& p, const WgmmaMaps& maps,
                                                  const int* tile_start, const WgmmaSmem<Cfg>& sm) {
  constexpr int kRecord = kNvfp4 ? 64 : 32;
  f.wait_slot_free(sm.empty(f.slot));
  const int n = Cfg::unit_n(f.un.row_end - f.un.row_begin);
  const std::uint32_t bar = sm.full(f.slot), dst = sm.slot(f.slot);
  mbar_arrive_expect_tx(bar, 2 * n * 128 + 8 * 2 * 512 + 8 * 2 * kRecord);
  const int tile_y = f.un.e * (p.n / 16) + f.un.cta_rt * 8;
  tma_load_2d(dst + Cfg::kCodesOffset, &maps.codes, f.c * 128, tile_y, bar);
  tma_load_2d(dst + Cfg::kScalesOffset, &maps.scales, f.c * 2 * kRecord, tile_y, bar);
  if (n == Cfg::kTokens) {
    tma_load_2d(dst, &maps.a, f.c * 128, f.un.row_begin, bar);
    tma_load_2d(dst + Cfg::kHalfBytes, &maps.a, f.c * 128 + 64, f.un.row_begin, bar);
  } else {  // 8-row boxes: one 1024-byte swizzle atom each, the layout of one n-row box
    for (int b = 0; b < n / 8; ++b) {
      tma_load_2d(dst + b * 1024, &maps.a_narrow, f.c * 128, f.un.row_begin + 8 * b, bar);
      tma_load_2d(dst + Cfg::kHalfBytes + b * 1024, &maps.a_narrow, f.c * 128 + 64,
                  f.un.row_begin + 8 * b, bar);
    }
  }
  f.advance(p, tile_start);
}

// One unit: weight rows [128 cta_rt, +128) of expert e x tokens [row_begin,
// min(row_begin + kN, row_end)), all of K. kN <= Cfg::kTokens is the wgmma N. seq: stages this CTA
// consumed before this unit (ring slot / mbarrier phase).
template <typename Cfg, int kN, bool kNvfp4, int kEpi>
__device__ __forceinline__ void wgmma_unit(const Params& p, const std::uint32_t* lut,
                                           const WgmmaSmem<Cfg>& sm, std::uint32_t seq,
                                           const WgmmaUnit& un) {
  constexpr int kRecord = kNvfp4 ? 64 : 32;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int stages = (p.k / 64 + 1) / 2;
  std::uint32_t rd = seq % Cfg::kStages, ph = (seq / Cfg::kStages) & 1;
  // This thread's bytes of a stage slot: its warp's row tile in the codes / scales boxes.
  const std::uint32_t codes_off = Cfg::kCodesOffset + warp * 1024 + lane * 16;
  const std::uint32_t scale_off =
      Cfg::kScalesOffset + warp * 2 * kRecord + (kNvfp4 ? lane * 2 : (g * 2 + t / 2) * 2);

  float acc[kN / 8][4];
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[i][r] = 0.0f;

  // a[h]: the A registers of the stage's chunk h. Chunk h of stage c overwrites those of chunk h
  // of stage c - 1, retired by the wgmma_wait<1> after the next chunk's MMAs were issued.
  // kSync (several CTAs per SM, few registers): one set of A registers, each chunk's MMAs retired
  // before the next chunk's dequant (other warps fill the wait).
  constexpr bool kSync = Cfg::kCtasPerSm > 1;
  std::uint32_t a[kSync ? 1 : 2][4][4];
  std::uint32_t prev = 0;  // the previous stage's slot (c > 0)
  for (int c = 0; c < stages; ++c) {
    mbar_wait(sm.full(rd), ph);
    const std::uint32_t slot = sm.slot(rd);
    // Below N = 256: both chunks' codes and scales first (chunk 1's shared loads wait for no MMA
    // issue); N = 256 loads each chunk's at its start (its accumulators leave fewer registers).
    constexpr bool kPreload = kN < 256;
    uint4 codes[2];
    std::uint32_t scales[2][2];
    auto load_chunk = [&](int h) {  // chunk h's codes and its two scale multipliers
      codes[h] = lds128(slot + codes_off + h * 512);
      const std::uint32_t sc = lds_u16(slot + scale_off + h * kRecord);
      scales[h][0] = lut[sc & 0xFF];
      scales[h][1] = lut[sc >> 8];
    };
    if constexpr (kPreload) load_chunk(0), load_chunk(1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (!kPreload) load_chunk(h);
      const uint4 cw = codes[h];
      const std::uint32_t sc_lo = scales[h][0], sc_hi = scales[h][1];
      std::uint32_t(&ah)[4][4] = a[kSync ? 0 : h];
      dequant_word(cw.x, sc_lo, sc_hi, ah[0]);
      dequant_word(cw.y, sc_lo, sc_hi, ah[1]);
      dequant_word(cw.z, sc_lo, sc_hi, ah[2]);
      dequant_word(cw.w, sc_lo, sc_hi, ah[3]);
#pragma unroll
      for (int i = 0; i < kN / 8; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
      wgmma_fence();
      const std::uint64_t desc = smem_desc_k_major_sw128(slot + h * Cfg::kHalfBytes);
#pragma unroll
      for (int j = 0; j < 4; ++j) WgmmaRS<kN>::run(acc, ah[j], desc + 2 * j, 1);
      wgmma_commit();
      if constexpr (kSync) {
        wgmma_wait<0>();  // this chunk's MMAs retired: its A registers are free
      } else {
        wgmma_wait<1>();  // the previous chunk's MMAs retired: its A registers are free
      }
#pragma unroll
      for (int i = 0; i < kN / 8; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
      if (kSync && h == 1) release_slot(sm.empty(rd), lane);              // stage c retired
      if (!kSync && h == 0 && c > 0) release_slot(sm.empty(prev), lane);  // stage c - 1 retired
    }
    prev = rd;
    if (++rd == Cfg::kStages) rd = 0, ph ^= 1;
  }
  if constexpr (!kSync) {
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
    release_slot(sm.empty(prev), lane);  // the unit's last stage
  }

  const int rt = un.cta_rt * 8 + warp;
  if (rt < p.n / 16) {
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
      store_tile<kEpi, sm90::decode::W4Codec<true>, true>(p, acc[i], un.e, rt, un.row_begin + 8 * i,
                                                         un.row_end, g, t);
  }
}

template <typename Cfg, bool kNvfp4, int kEpi>
__global__ void __launch_bounds__(Cfg::kThreads) __maxnreg__(Cfg::kMaxRegs)
    w4a16_wgmma_gemm_kernel(const __grid_constant__ Params p,
                            const __grid_constant__ WgmmaMaps maps) {
  extern __shared__ __align__(128) unsigned char smem[];  // the ring is aligned at run time
  std::uint32_t* lut = reinterpret_cast<std::uint32_t*>(smem);
  int* tile_start = reinterpret_cast<int*>(smem + Cfg::kLutBytes);
  const std::uint32_t ring =
      (smem_addr(smem) + Cfg::kLutBytes + Cfg::offsets_bytes(p.num_experts) + 1023) & ~1023u;
  const WgmmaSmem<Cfg> sm(ring);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int i = tid; i < 256; i += Cfg::kThreads) lut[i] = scale_multiplier<kNvfp4>(i);
  if (tid == 0) sm.init(Cfg::kConsumers / 32);
  // Token tiles per expert, prefix-summed: tile_start[e] .. tile_start[e + 1].
  if (warp == 1) prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  __syncthreads();  // the last CTA-wide barrier: from here on only mbarriers

  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = tile_start[p.num_experts] * cta_row_tiles;
  const int stages = (p.k / 64 + 1) / 2;
  if (tid >= Cfg::kConsumers) {  // the producer warp(group): one thread issues every stage
    run_wgmma_producer<Cfg::kTokens, Cfg::kStages, Cfg::kProducerRegs>(
        tid == Cfg::kConsumers, maps, p, tile_start, units, stages, cta_row_tiles,
        [&](WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>& f) {
          wgmma_issue_stage<Cfg, kNvfp4>(f, p, maps, tile_start, sm);
        });
    return;
  }
  if constexpr (Cfg::kConsumerRegs > 0) setmaxnreg_inc<Cfg::kConsumerRegs>();
  std::uint32_t seq = 0;  // stages consumed so far (ring slot / mbarrier phase)
  for (int u = blockIdx.x; u < units; u += gridDim.x, seq += stages) {
    const WgmmaUnit un = wgmma_unit_at<Cfg::kTokens>(p, tile_start, cta_row_tiles, u);
    const int n = Cfg::unit_n(un.row_end - un.row_begin);
    if constexpr (Cfg::kLadder) {
      if (n == 8) {
        wgmma_unit<Cfg, 8, kNvfp4, kEpi>(p, lut, sm, seq, un);
      } else if (n == 16) {
        wgmma_unit<Cfg, 16, kNvfp4, kEpi>(p, lut, sm, seq, un);
      } else {
        wgmma_unit<Cfg, 32, kNvfp4, kEpi>(p, lut, sm, seq, un);
      }
    } else if (n == Cfg::kTokens) {
      wgmma_unit<Cfg, Cfg::kTokens, kNvfp4, kEpi>(p, lut, sm, seq, un);
    } else {
      wgmma_unit<Cfg, Cfg::kNarrow, kNvfp4, kEpi>(p, lut, sm, seq, un);
    }
  }
}

// Host: launches the persistent grid (one CTA per SM) for Cfg. Returns the CUDA error of the
// attribute call or the launch.
template <typename Cfg, bool kNvfp4, int kEpi>
cudaError_t launch_w4a16_wgmma(const Params& params, const WgmmaMaps& maps, std::int64_t m,
                               int max_ctas, int sms, cudaStream_t stream) {
  auto kernel = w4a16_wgmma_gemm_kernel<Cfg, kNvfp4, kEpi>;
  const int smem = Cfg::smem_bytes(params.num_experts);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  std::int64_t grid = std::min<std::int64_t>(
      grouped_units_bound(m, params.num_experts, params.n, Cfg::kTokens, Cfg::kRows),
      static_cast<std::int64_t>(sms) * Cfg::kCtasPerSm);
  if (max_ctas > 0) grid = std::min<std::int64_t>(grid, max_ctas);
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, stream>>>(params, maps);
  return cudaGetLastError();
}

}  // namespace moekit::gemm::sm90::w4a16
