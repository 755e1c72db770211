// SM90 W4A16 grouped GEMM for many tokens per expert (prefill): warpgroup MMA (wgmma, sm_90a)
// with the dequantized weights as the register A operand (design and measurements:
// docs/kernels/w4a16.md, "wgmma v3").
//
// CTA = 2 warpgroups = 128 weight rows x kTokens tokens (wgmma m64 x N per warpgroup); warp w owns
// the 16-row tile 8 cta_rt + w of the shuffled layout (sm90_w4a16_weight_shuffle.cpp): one 16-byte
// shared load per lane and 64-wide K chunk, dequant_word -> the 4 A registers of one k16 step. The
// wgmma A fragment of a warp's 16 rows is the mma.sync m16n8k16 A layout
// (sm90_w4a16_wgmma_ops.cuh), so the decode kernels' dequant feeds wgmma as is.
//
// The shuffle permutes K inside a 64-wide chunk (lane t holds K [16t, 16t + 16)), so MMA-k is not
// the natural k. The activations arrive in the matching order (W4KOrder::kWgmma, made by
// w4a16_to_wgmma_k_order or by the previous GEMM's epilogue), so 16-byte cp.async copies put them
// straight into the wgmma B slots (K-major, 128-byte swizzle), gathered through row_index: no
// staging copy and no permute by the threads (the v2 kernel had both; they capped it near 40% of
// the bf16 peak).
//
// The K loop runs in stages of two chunks (128 K; an odd last chunk makes a one-chunk stage whose
// second half multiplies zero weights with zero-filled activations). Per stage: wait for the
// warp's weights (one bulk copy of its 2 x 512 code bytes and one of its 2 scale records, issued
// by its lane 0 into a per-warp mbarrier ring); per chunk: dequant into that chunk's A registers
// (one set per chunk of the stage: the previous chunk's MMAs may still read the other set),
// [first chunk: request the weights of stage c + kWStages - 1 and the activations of stage
// c + kAStages - 2, into the slot of stage c - 2, retired by both warpgroups before the previous
// barrier], issue 4 async wgmma k16, retire the previous chunk (wgmma_wait<1>); then wait for this
// thread's copies of stage c + 1, fence.proxy.async, one CTA barrier. Ring slots and phases
// advance incrementally (no division by the ring depths in the loop).
//
// Units are (expert, 128-row tile, token tile), expert-major (an expert's row tiles x token tiles
// are consecutive, so one wave of the persistent grid shares the expert's activations and each
// weight tile through L2). A token tile of at most 32 rows (an expert's short last one) runs an
// N = 32 wgmma. Epilogue: store_tile of the decode kernel (same math), natural or wgmma K order.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "moekit/gemm/w4a16.hpp"
#include "sm90_decode_grouped_gemm.cuh"
#include "sm90_w4a16_wgmma_ops.cuh"

namespace moekit::gemm::sm90_w4a16 {

using sm90_decode::store_tile;

// kTokens: wgmma N (128; 160 for experts of ~100-160 rows: one token tile holds them where 128
// would stream every weight tile a second time for a short second tile; 256 for many rows per
// expert: twice the MMAs per dequantized chunk). kWStages: weight ring
// depth in stages. kAStages: activation slots (stage c + kAStages - 2 is requested at stage c).
template <int kTokens_, int kWStages_, int kAStages_>
struct WgmmaConfig {
  static constexpr int kThreads = 256;  // 2 warpgroups
  static constexpr int kRows = 128;     // 2 x 64 weight rows
  static constexpr int kTokens = kTokens_, kWStages = kWStages_, kAStages = kAStages_;
  static constexpr int kNarrow = 32;  // the short tail tile's wgmma N
  // A slot: two chunk halves of kTokens rows x 64 bf16 (128 bytes, swizzled), 1024-aligned.
  static constexpr int kHalfBytes = kTokens * 128;
  static constexpr int kSlotBytes = 2 * kHalfBytes;
  // Weight stage of one warp: 2 x 512 code bytes, then 2 scale records of 64 bytes (NVFP4; MXFP4
  // uses 32 of each).
  static constexpr int kWarpStageBytes = 2 * 512 + 2 * 64;
  static constexpr int kWStageBytes = 8 * kWarpStageBytes;
  static constexpr int kBarriers = 8 * kWStages;
  static constexpr int kLutBytes = 256 * 4;
  static_assert(kTokens == 128 || kTokens == 160 || kTokens == 256, "wgmma token tile");
  static_assert(kWStages >= 2 && kAStages >= 3, "rings");
  __host__ __device__ static int offsets_bytes(int num_experts) {
    return ((num_experts + 1) * 4 + 127) / 128 * 128;
  }
  // After the LUT and the tile prefix, aligned to 1024 (the swizzle atom) at run time: activation
  // slots, weight ring, mbarriers.
  __host__ __device__ static constexpr int ring_bytes() {
    return kAStages * kSlotBytes + kWStages * kWStageBytes + 8 * kBarriers;
  }
  static int smem_bytes(int num_experts) {
    return kLutBytes + offsets_bytes(num_experts) + 1024 + ring_bytes();
  }
};

__device__ __forceinline__ std::uint32_t lds_u16(std::uint32_t addr) {
  unsigned short v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}

// Shared-memory carve-up of one CTA (all addresses in the shared window).
template <typename Cfg>
struct WgmmaSmem {
  std::uint32_t slots, weights, bars;
  __device__ explicit WgmmaSmem(std::uint32_t ring) {
    slots = ring;
    weights = slots + Cfg::kAStages * Cfg::kSlotBytes;
    bars = weights + Cfg::kWStages * Cfg::kWStageBytes;
  }
  __device__ std::uint32_t w_bar(int warp, int s) const {
    return bars + 8 * (warp * Cfg::kWStages + s);
  }
};

// One unit: weight rows [128 cta_rt, +128) of expert e x tokens [row_begin,
// min(row_begin + kN, row_end)), all of K. kN <= Cfg::kTokens is the wgmma N. seq: stages this CTA
// consumed before this unit (weight ring slot / mbarrier phase).
template <typename Cfg, int kN, bool kNvfp4, int kEpi>
__device__ __forceinline__ void wgmma_unit(const Params& p, const std::uint32_t* lut,
                                           const WgmmaSmem<Cfg>& sm, std::uint32_t seq, int e,
                                           int cta_rt, int row_begin, int row_end) {
  constexpr int kScaleRecord = kNvfp4 ? 64 : 32;
  constexpr int kA = Cfg::kAStages, kW = Cfg::kWStages;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks = p.k / 64, stages = (chunks + 1) / 2, row_tiles16 = p.n / 16;
  const int valid_rows = min(kN, row_end - row_begin);

  // This warp's 16-row tile; its chunks are consecutive 512-byte items (scale records likewise),
  // so a stage is one contiguous copy of each.
  const int rt = cta_rt * 8 + warp;
  const bool tile_ok = rt < row_tiles16;
  const std::int64_t tile =
      (static_cast<std::int64_t>(e) * row_tiles16 + (tile_ok ? rt : 0)) * chunks;
  const std::uint8_t* wsrc = p.w + tile * 512;
  const std::uint8_t* ssrc = p.w_scales + tile * kScaleRecord;
  const std::uint32_t wstage0 = sm.weights + warp * Cfg::kWarpStageBytes;
  std::uint32_t w_rd = seq % kW, w_ph = (seq / kW) & 1, a_rd = 0;
  auto issue_w = [&](int c, std::uint32_t s) {  // lane 0: stage c into weight slot s; rows past
                                                // N: no copy (the warp's rows are not stored)
    const std::uint32_t bar = sm.w_bar(warp, s);
    const std::uint32_t dst = wstage0 + s * Cfg::kWStageBytes;
    const int items = 2 * c + 1 < chunks ? 2 : 1;
    mbar_arrive_expect_tx(bar, tile_ok ? items * (512 + kScaleRecord) : 0);
    if (tile_ok) {
      bulk_copy_g2s(dst, wsrc + static_cast<std::int64_t>(2 * c) * 512, items * 512, bar);
      bulk_copy_g2s(dst + 1024, ssrc + static_cast<std::int64_t>(2 * c) * kScaleRecord,
                    items * kScaleRecord, bar);
    }
  };
  const std::uint32_t scale_off = 1024 + (kNvfp4 ? lane * 2 : (g * 2 + t / 2) * 2);

  // Activation pieces: thread owns 16-byte pieces tid + 256 i of a chunk (token (tid + 256 i) / 8,
  // piece q = tid % 8 of its 128-byte chunk row), in both chunks of a stage; rows past the
  // expert's end are not copied (their B columns only reach unstored outputs).
  constexpr int kPieces = kN * 8 / Cfg::kThreads;
  static_assert(kPieces * Cfg::kThreads == kN * 8, "activation pieces");
  const char* arow[kPieces];
  std::uint32_t aoff[kPieces];
  const int q = tid % 8;
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int tok = (tid + Cfg::kThreads * i) / 8;
    const int row = row_begin + tok;
    const bool ok = tok < valid_rows;
    const std::int64_t src = ok ? (p.row_index ? p.row_index[row] : row) : 0;
    arow[i] = ok ? reinterpret_cast<const char*>(p.a + src * p.lda) + 16 * q : nullptr;
    aoff[i] = tok * 128 + ((q ^ (tok & 7)) << 4);
  }
  // Stage c into slot `slot` (c >= stages: nothing; one group is still committed, so that group j
  // always holds stage j). The second half of a one-chunk stage is zero-filled (its zero weights
  // must not meet stale NaN bytes).
  auto issue_act = [&](int c, std::uint32_t slot) {
    if (c < stages) {
      const std::uint32_t dst = sm.slots + slot * Cfg::kSlotBytes;
      const bool half = 2 * c + 1 >= chunks;
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        if (arow[i] != nullptr) {
          const char* src = arow[i] + static_cast<std::int64_t>(c) * 256;
          cp_async16(dst + aoff[i], src, true);
          cp_async16(dst + Cfg::kHalfBytes + aoff[i], half ? src : src + 128, !half);
        }
      }
    }
    cp_async_commit();
  };

  float acc[kN / 8][4];
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[i][r] = 0.0f;

  if (lane == 0)
    for (int c = 0; c < kW - 1 && c < stages; ++c)
      issue_w(c, w_rd + c < kW ? w_rd + c : w_rd + c - kW);
  for (int c = 0; c < kA - 2; ++c) issue_act(c, c);
  cp_async_wait<kA - 3>();  // stage 0
  fence_proxy_async_smem();
  __syncthreads();

  // a[h]: the A registers of the stage's chunk h. Chunk h of stage c overwrites those of chunk h
  // of stage c - 1, retired by the wgmma_wait<1> after the next chunk's MMAs were issued. (Moving
  // the next stage's first dequant before the barrier measured 0..+3% slower: 2026-12-01g.)
  std::uint32_t a[2][4][4];
  for (int c = 0; c < stages; ++c) {
    const bool full = 2 * c + 1 < chunks;
    mbar_wait(sm.w_bar(warp, w_rd), w_ph);
    const std::uint32_t wstage = wstage0 + w_rd * Cfg::kWStageBytes;
    const std::uint32_t slot = sm.slots + a_rd * Cfg::kSlotBytes;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint4 cw = lds128(wstage + h * 512 + lane * 16);
      std::uint32_t sc = lds_u16(wstage + scale_off + h * kScaleRecord);
      // A one-chunk stage: the second chunk's registers are zeros (branch-free: a wgmma on a
      // divergent path makes ptxas serialize them; scale byte 0 is a finite multiplier).
      if (h == 1 && !full) cw = make_uint4(0, 0, 0, 0), sc = 0;
      const std::uint32_t sc_lo = lut[sc & 0xFF], sc_hi = lut[sc >> 8];
      dequant_word(cw.x, sc_lo, sc_hi, a[h][0]);
      dequant_word(cw.y, sc_lo, sc_hi, a[h][1]);
      dequant_word(cw.z, sc_lo, sc_hi, a[h][2]);
      dequant_word(cw.w, sc_lo, sc_hi, a[h][3]);
      if (h == 0) {
        // Refills: the weight slot of stage c - 1 (this warp read it before the last barrier)
        // and the activation slot of stage c - 2 (both warpgroups retired it before that
        // barrier).
        if (lane == 0 && c + kW - 1 < stages) issue_w(c + kW - 1, w_rd == 0 ? kW - 1 : w_rd - 1);
        issue_act(c + kA - 2, a_rd >= 2 ? a_rd - 2 : a_rd + kA - 2);
      }
#pragma unroll
      for (int i = 0; i < kN / 8; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
      wgmma_fence();
      const std::uint64_t desc = smem_desc_k_major_sw128(slot + h * Cfg::kHalfBytes);
#pragma unroll
      for (int j = 0; j < 4; ++j) WgmmaRS<kN>::run(acc, a[h][j], desc + 2 * j, 1);
      wgmma_commit();
#pragma unroll
      for (int i = 0; i < kN / 8; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
      wgmma_wait<1>();  // the previous chunk's MMAs retired: its A registers are free
    }
    cp_async_wait<kA - 3>();  // this thread's copies of stage c + 1
    fence_proxy_async_smem();
    __syncthreads();
    if (++w_rd == kW) w_rd = 0, w_ph ^= 1;
    if (++a_rd == kA) a_rd = 0;
  }
  wgmma_wait<0>();
  cp_async_wait<0>();  // the trailing (empty) groups
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
  __syncthreads();  // both warpgroups are done with the slots before the next unit fills them

  if (tile_ok) {
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
      store_tile<kEpi, sm90_decode::W4Codec<true>, true>(p, acc[i], e, rt, row_begin + 8 * i,
                                                         row_end, g, t);
  }
}

template <typename Cfg, bool kNvfp4, int kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1) w4a16_wgmma_gemm_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];  // the ring is aligned at run time
  std::uint32_t* lut = reinterpret_cast<std::uint32_t*>(smem);
  int* tile_start = reinterpret_cast<int*>(smem + Cfg::kLutBytes);
  const std::uint32_t ring =
      (smem_addr(smem) + Cfg::kLutBytes + Cfg::offsets_bytes(p.num_experts) + 1023) & ~1023u;
  const WgmmaSmem<Cfg> sm(ring);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  for (int i = tid; i < 256; i += Cfg::kThreads) lut[i] = scale_multiplier<kNvfp4>(i);
  if (tid == 0) {
    for (int b = 0; b < Cfg::kBarriers; ++b) mbar_init(sm.bars + 8 * b, 1);
    fence_mbar_init();
  }
  // Token tiles per expert, prefix-summed: tile_start[e] .. tile_start[e + 1].
  if (warp == 1) prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  __syncthreads();

  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = tile_start[p.num_experts] * cta_row_tiles;
  const std::uint32_t stages = (p.k / 64 + 1) / 2;
  std::uint32_t seq = 0;  // stages consumed so far (weight ring slot / mbarrier phase)
  for (int u = blockIdx.x; u < units; u += gridDim.x, seq += stages) {
    const WgmmaUnit un = wgmma_unit_at<Cfg::kTokens>(p, tile_start, cta_row_tiles, u);
    const int e = un.e, cta_rt = un.cta_rt, row_begin = un.row_begin, row_end = un.row_end;
    if (row_end - row_begin > Cfg::kNarrow) {
      wgmma_unit<Cfg, Cfg::kTokens, kNvfp4, kEpi>(p, lut, sm, seq, e, cta_rt, row_begin, row_end);
    } else {
      wgmma_unit<Cfg, Cfg::kNarrow, kNvfp4, kEpi>(p, lut, sm, seq, e, cta_rt, row_begin, row_end);
    }
  }
}

// Host: launches the persistent grid (one CTA per SM) for Cfg. Returns the CUDA error of the
// attribute / occupancy calls or the launch.
template <typename Cfg, bool kNvfp4, int kEpi>
cudaError_t launch_w4a16_wgmma(const Params& params, std::int64_t m, int max_ctas, int sms,
                               cudaStream_t stream) {
  auto kernel = w4a16_wgmma_gemm_kernel<Cfg, kNvfp4, kEpi>;
  const int smem = Cfg::smem_bytes(params.num_experts);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  std::int64_t grid = std::min<std::int64_t>(
      grouped_units_bound(m, params.num_experts, params.n, Cfg::kTokens, Cfg::kRows), sms);
  if (max_ctas > 0) grid = std::min<std::int64_t>(grid, max_ctas);
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, stream>>>(params);
  return cudaGetLastError();
}

// The library's wgmma tile (W4Tile::kWgmma; sm90_w4a16_wgmma_gemm.cu): token tile, format and
// epilogue dispatch, moekit::Error naming the argument on a shared-memory misfit or a CUDA failure.
void w4a16_wgmma_launch(const W4A16GemmArgs& args, const Params& params);

}  // namespace moekit::gemm::sm90_w4a16
