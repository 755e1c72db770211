// SM90 W4A8 grouped GEMM (MXFP4 weights x e4m3 activations) on warpgroup MMA (wgmma e4m3,
// sm_90a) with the weights converted to e4m3 in registers as the A operand (API:
// moekit/gemm/w4a8.hpp, weight layout: sm90_w4a8_weight_layout.cpp, design and measurements:
// docs/kernels/w4a8.md).
//
// CTA = 2 warpgroups = 128 weight rows x kTokens tokens (m64 x N per warpgroup); warp w owns the
// 16-row tile 8 cta_rt + w of the prepared layout. The K loop runs in stages of 128 (two 64-wide
// chunks of the layout, the last stage possibly one): per stage one bulk copy of the CTA tile's
// code bytes (8 x 1024) and one of its scale records (8 x 64) into a ring (one mbarrier per
// stage; the issuing lane rotates over the warps), and the activations (tokens x 128 e4m3 bytes, natural K order: the layout's MMA-k is the real k) by
// 16-byte cp.async straight into a wgmma B slot (K-major, 128-byte swizzle), gathered through
// row_index. No staging copy and no permute (the W4A16 wgmma kernel needs both).
//
// Conversion per 32-bit code word (8 codes, 4 of row g, 4 of row g + 8): each e4m3 register is
// prmt(table_lo, table_hi, magnitude nibbles) | sign bits, where the table holds the 8 e2m1
// magnitudes times 2^d of the block (d = scale - ref[row], e4m3-exact by construction; 16 tables
// of 8 bytes in shared memory, indexed by the prepared scale byte). 8 integer instructions per
// word, 2 table loads per block and row.
//
// Pipeline per stage c (both warpgroups in step, one CTA barrier): wait for the warp's weights of
// stage c, convert into A registers (double-buffered: stage c - 1's MMAs may still read the other
// set), request the weights of stage c + kWStages - 1 and the activations of stage c + kAStages - 2
// (into the slot of stage c - 2, retired by both warpgroups before the previous barrier); at even
// c wait for stage c - 1 and add the accumulator into the fp32 total (promotion every 256 K, see
// w4a8_unit); issue 4 async wgmma k32 (at even c the first with scale_d = 0), retire stage c - 1
// (wgmma_wait<1>), wait for this thread's copies of stage c + 1, fence.proxy.async, barrier. A
// one-chunk last stage (K % 128 == 64) multiplies zero weights with zero-filled activations in
// its second half.
//
// Units are (expert, 128-row tile, token tile), expert-major as in the W4A16 wgmma kernel. The
// epilogue multiplies each accumulator by its activation row's scale and its weight row's
// 2^(ref - 127), then runs the W4A16 store_tile (bias, gated activation, row_scale, bf16 store).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "moekit/gemm/w4a8.hpp"
#include "sm90_decode_grouped_gemm.cuh"
#include "sm90_w4a16_wgmma_ops.cuh"
#include "sm90_wgmma_fp8_ops.cuh"

namespace moekit::gemm::sm90_w4a8 {

using sm90_decode::store_tile;
using sm90_w4a16::bulk_copy_g2s;
using sm90_w4a16::cp_async16;
using sm90_w4a16::cp_async_commit;
using sm90_w4a16::cp_async_wait;
using sm90_w4a16::expert_offset;
using sm90_w4a16::fence_mbar_init;
using sm90_w4a16::fence_operand;
using sm90_w4a16::fence_proxy_async_smem;
using sm90_w4a16::grouped_units_bound;
using sm90_w4a16::lds128;
using sm90_w4a16::mbar_arrive_expect_tx;
using sm90_w4a16::mbar_init;
using sm90_w4a16::mbar_wait;
using sm90_w4a16::Params;
using sm90_w4a16::prefix_token_tiles;
using sm90_w4a16::smem_addr;
using sm90_w4a16::smem_desc_k_major_sw128;
using sm90_w4a16::wgmma_commit;
using sm90_w4a16::wgmma_fence;
using sm90_w4a16::wgmma_unit_at;
using sm90_w4a16::wgmma_wait;
using sm90_w4a16::WgmmaUnit;

struct W4A8Params {
  Params p;              // a: e4m3 rows (as bytes), alpha unused (null)
  const float* a_scale;  // [rows of A]
  const float* w_row_scale;  // [E * N], prepared row order
};

// store_tile's codec contract: no row tails (N % 16 == 0), no extra unscale factor.
struct EpilogueCodec {
  static constexpr bool kRowTails = false;
  static constexpr float kUnscale = 1.0f;
};

// kTokens: wgmma N (128, or 160 from ~100 rows per expert: one token tile holds 100-160 of them,
// where 128 would stream each weight tile twice for a short second tile). kWStages: weight ring depth
// in stages. kAStages: activation slots (stage c + kAStages - 2 is requested at stage c).
// kNarrowTails: token tiles with at most 32 rows (an expert's short last tile) run an N = 32
// wgmma.
template <int kTokens_, int kWStages_, int kAStages_, bool kNarrowTails_>
struct W4A8Config {
  static constexpr bool kNarrowTails = kNarrowTails_;
  static constexpr int kThreads = 256;  // 2 warpgroups
  static constexpr int kRows = 128;     // 2 x 64 weight rows
  static constexpr int kTokens = kTokens_, kWStages = kWStages_, kAStages = kAStages_;
  static constexpr int kSlotBytes = kTokens * 128;  // kTokens rows of 128 e4m3, swizzled
  // Weight stage of the CTA: 2 chunks x 8 tiles x 512 code bytes, then their 32-byte scale
  // records (one bulk copy each, the layout keeps a CTA tile's stage contiguous).
  static constexpr int kWCodeBytes = 2 * 8 * 512;
  static constexpr int kWStageBytes = kWCodeBytes + 2 * 8 * 32;
  static constexpr int kBarriers = kWStages;
  static constexpr int kPiecesPerThread = kTokens * 8 / kThreads;  // 16-byte cp.async per stage
  static constexpr int kTableBytes = 128;                          // 16 tables x 8 bytes
  static constexpr int kNarrow = 32;  // the tail tile's wgmma N
  static_assert(kTokens == 128 || kTokens == 160, "wgmma token tile");
  static_assert(kWStages >= 2 && kAStages >= 3, "rings");
  __host__ __device__ static int offsets_bytes(int num_experts) {
    return ((num_experts + 1) * 4 + 127) / 128 * 128;
  }
  __host__ __device__ static constexpr int ring_bytes() {
    return kAStages * kSlotBytes + kWStages * kWStageBytes + 8 * kBarriers;
  }
  static int smem_bytes(int num_experts) {
    return kTableBytes + offsets_bytes(num_experts) + 1024 + ring_bytes();
  }
};

template <typename Cfg>
struct W4A8Smem {
  std::uint32_t slots, weights, bars;
  __device__ explicit W4A8Smem(std::uint32_t ring) {
    slots = ring;
    weights = slots + Cfg::kAStages * Cfg::kSlotBytes;
    bars = weights + Cfg::kWStages * Cfg::kWStageBytes;
  }
  __device__ std::uint32_t w_bar(int s) const { return bars + 8 * s; }
};

__device__ __forceinline__ uint2 lds64(std::uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ std::uint32_t lds32(std::uint32_t addr) {
  std::uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t s) {
  std::uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(s));
  return d;
}

// Table d + 8 (d in [-8, 6]; entry 15 unused, zeros): byte i = e4m3(e2m1 magnitude i * 2^d).
__device__ __forceinline__ std::uint32_t table_word(int entry, int half) {
  constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::uint32_t w = 0;
  if (entry < 15) {
    for (int i = 0; i < 4; ++i) {
      const float v = ldexpf(kMag[4 * half + i], entry - 8);
      const std::uint32_t b = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      w |= b << (8 * i);
    }
  }
  return w;
}

// One code word -> the e4m3 registers of row g (ra, table ta) and row g + 8 (rb, table tb).
__device__ __forceinline__ void convert_word(std::uint32_t w, const uint2& ta, const uint2& tb,
                                             std::uint32_t& ra, std::uint32_t& rb) {
  ra = prmt(ta.x, ta.y, w & 0x7777u) | (w & 0x80808080u);
  rb = prmt(tb.x, tb.y, (w >> 16) & 0x7777u) | ((w << 4) & 0x80808080u);
}

// One unit: weight rows [128 cta_rt, +128) of expert e x tokens [row_begin,
// min(row_begin + kN, row_end)), all of K. seq: stages this CTA consumed before this unit.
template <typename Cfg, int kN, int kEpi>
__device__ __forceinline__ void w4a8_unit(const W4A8Params& wp, std::uint32_t tables,
                                          const W4A8Smem<Cfg>& sm, std::uint32_t seq, int e,
                                          int cta_rt, int row_begin, int row_end) {
  const Params& p = wp.p;
  constexpr int kA = Cfg::kAStages, kW = Cfg::kWStages;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks = p.k / 64, stages = (chunks + 1) / 2, row_tiles16 = p.n / 16;
  const int valid_rows = min(kN, row_end - row_begin);

  const int rt = cta_rt * 8 + warp;
  const bool tile_ok = rt < row_tiles16;
  // This CTA tile's 16-row tiles (8, fewer in a last partial one) and its first item: stage c's
  // weights are the ntile * n_chunks items from item 2c * ntile on (sm90_w4a8_weight_layout.cpp).
  const int ntile = min(8, row_tiles16 - 8 * cta_rt);
  const std::int64_t item0 = (static_cast<std::int64_t>(e) * row_tiles16 + 8 * cta_rt) * chunks;
  // Stage t's copy is issued by lane 0 of warp t % 8 (the issue cost rotates over the warps).
  // Ring slots advance incrementally (no division by the ring depths in the loop): w_rd / w_ph
  // are the weight slot and phase of stage c, a_rd its activation slot.
  std::uint32_t w_rd = seq % kW, w_ph = (seq / kW) & 1, a_rd = 0;
  auto issue_w = [&](int c, std::uint32_t s) {  // stage c into weight slot s
    const std::uint32_t bar = sm.w_bar(s);
    const std::uint32_t dst = sm.weights + s * Cfg::kWStageBytes;
    const int items = (2 * c + 1 < chunks ? 2 : 1) * ntile;
    const std::int64_t first = item0 + static_cast<std::int64_t>(2 * c) * ntile;
    mbar_arrive_expect_tx(bar, items * (512 + 32));
    bulk_copy_g2s(dst, p.w + first * 512, items * 512, bar);
    bulk_copy_g2s(dst + Cfg::kWCodeBytes, p.w_scales + first * 32, items * 32, bar);
  };

  // Activation pieces: thread owns 16-byte pieces tid + 256 i (token (tid + 256 i) / 8, piece
  // q = tid % 8 of the 128-byte stage row); rows past the expert's end are not copied (their B
  // columns only reach unstored outputs).
  constexpr int kPieces = Cfg::kPiecesPerThread;
  const char* arow[kPieces];
  std::uint32_t aoff[kPieces];
  const int q = tid % 8;
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int tok = (tid + 256 * i) / 8;
    const int row = row_begin + tok;
    const bool ok = tok < valid_rows;
    const std::int64_t src = ok ? (p.row_index ? p.row_index[row] : row) : 0;
    arow[i] = ok ? reinterpret_cast<const char*>(p.a) + src * p.lda + 16 * q : nullptr;
    aoff[i] = tok * 128 + ((q ^ (tok & 7)) << 4);
  }
  // Stage c into its slot (c >= stages: nothing; one group is still committed, so that group j
  // always holds stage j). The second half of a one-chunk stage is zero-filled (its zero weights
  // must not meet stale NaN bytes).
  auto issue_act = [&](int c, std::uint32_t slot) {  // stage c into activation slot `slot`
    if (c < stages) {
      const std::uint32_t dst = sm.slots + slot * Cfg::kSlotBytes;
      const bool half = 2 * c + 1 >= chunks;
#pragma unroll
      for (int i = 0; i < kPieces; ++i)
        if (arow[i] != nullptr)
          cp_async16(dst + aoff[i], arow[i] + static_cast<std::int64_t>(c) * 128 -
                                        (half && q >= 4 ? 64 : 0),
                     !(half && q >= 4));
    }
    cp_async_commit();
  };

  // acc: the wgmma accumulator of two stages (restarted with scale_d = 0 at even stages); tot:
  // the fp32 sum of those chains. Hopper's fp8 wgmma accumulates with reduced precision (~14
  // mantissa bits, DeepSeek-V3 report section 3.3.2), so each 256-deep partial (8 k32 steps) is
  // promoted into fp32 (CUTLASS's and DeepGEMM's fp8 GEMMs promote every 128 K; 256 halves the
  // promotion adds of this issue-bound loop and keeps the truncation error near 8 * 2^-14 of a
  // partial).
  float acc[kN / 8][4], tot[kN / 8][4];
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[i][r] = tot[i][r] = 0.0f;
  auto promote = [&] {
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) tot[i][r] += acc[i][r];
  };

  if (lane == 0)
    for (int c = warp; c < kW - 1 && c < stages; c += 8)
      issue_w(c, w_rd + c < kW ? w_rd + c : w_rd + c - kW);
  for (int c = 0; c < kA - 2; ++c) issue_act(c, c);
  cp_async_wait<kA - 3>();  // stage 0
  fence_proxy_async_smem();
  __syncthreads();

  std::uint32_t a[2][4][4];
  for (int c0 = 0; c0 < stages; c0 += 2) {
#pragma unroll
    for (int ab = 0; ab < 2; ++ab) {
      const int c = c0 + ab;
      if (c < stages) {  // CTA-uniform
        const bool full = 2 * c + 1 < chunks;
        const std::uint32_t ws = w_rd;
        mbar_wait(sm.w_bar(ws), w_ph);
        const std::uint32_t wstage = sm.weights + ws * Cfg::kWStageBytes;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // This warp's item of chunk h; warps past ntile read stale bytes inside the stage
          // (their rows are not stored).
          const std::uint32_t item = h * ntile + warp;
          // A one-chunk stage: the second chunk's registers are zeros (branch-free: a wgmma
          // issue on a divergent path makes ptxas serialize them), against zero-filled B.
          uint4 cw = lds128(wstage + item * 512 + lane * 16);
          if (h == 1 && !full) cw = make_uint4(0, 0, 0, 0);
          // Table indices: (row g, block 0), (row g + 8, block 0), (row g, 1), (row g + 8, 1).
          const std::uint32_t sc = lds32(wstage + Cfg::kWCodeBytes + item * 32 + g * 4);
          // Each byte is the table's byte offset (8 x index). Masked to 8-byte multiples below
          // 128: the records of rows past N and of a one-chunk stage's second chunk are never
          // copied (stale bytes; their results are discarded or multiply zero codes).
          const uint2 t0 = lds64(tables + (sc & 0x78)), t1 = lds64(tables + ((sc >> 8) & 0x78));
          const uint2 t2 = lds64(tables + ((sc >> 16) & 0x78)),
                      t3 = lds64(tables + ((sc >> 24) & 0x78));
          // Word j -> step 2h + j / 2, registers (a0, a1) for even j, (a2, a3) for odd j.
          convert_word(cw.x, t0, t1, a[ab][2 * h][0], a[ab][2 * h][1]);
          convert_word(cw.y, t0, t1, a[ab][2 * h][2], a[ab][2 * h][3]);
          convert_word(cw.z, t2, t3, a[ab][2 * h + 1][0], a[ab][2 * h + 1][1]);
          convert_word(cw.w, t2, t3, a[ab][2 * h + 1][2], a[ab][2 * h + 1][3]);
        }
        // Refills: weight stage of stage c - 1 (read before the last barrier) and the slot of
        // stage c - 2 (both warpgroups retired it before the last barrier).
        // (Stage c + kW - 1 goes into the slot stage c - 1 used; stage c + kA - 2 into stage
        // c - 2's.)
        if (lane == 0 && warp == ((c + kW - 1) & 7) && c + kW - 1 < stages)
          issue_w(c + kW - 1, w_rd == 0 ? kW - 1 : w_rd - 1);
        issue_act(c + kA - 2, a_rd >= 2 ? a_rd - 2 : a_rd + kA - 2);
        // Even stages start a new 256-deep tensor-core chain: stage c - 1 must be done (its MMAs
        // ran during the conversion above) and its chain added into tot.
        const bool restart = ab == 0;
        if (restart) {
          wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < kN / 8; ++i)
#pragma unroll
            for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
          if (c > 0) promote();
        }
        wgmma_fence();
        const std::uint64_t desc =
            smem_desc_k_major_sw128(sm.slots + a_rd * Cfg::kSlotBytes);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          WgmmaRS8<kN>::run(acc, a[ab][j], desc + 2 * j, restart && j == 0 ? 0 : 1);
        wgmma_commit();
        wgmma_wait<1>();          // stage c - 1 retired: its A registers and slot are free
        cp_async_wait<kA - 3>();  // this thread's copies of stage c + 1
        fence_proxy_async_smem();
        __syncthreads();
        if (++w_rd == kW) w_rd = 0, w_ph ^= 1;
        if (++a_rd == kA) a_rd = 0;
      }
    }
  }
  wgmma_wait<0>();
  cp_async_wait<0>();  // the trailing (empty) groups
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
  promote();
  __syncthreads();  // both warpgroups are done with the slots before the next unit fills them

  if (tile_ok) {
    const float* rs = wp.w_row_scale + static_cast<std::int64_t>(e) * p.n + rt * 16;
    const float w_lo = rs[g], w_hi = rs[g + 8];
#pragma unroll
    for (int i = 0; i < kN / 8; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_begin + 8 * i + 2 * t + h;
        float as = 0.0f;
        if (row < row_end) as = wp.a_scale[p.row_index ? p.row_index[row] : row];
        tot[i][h] *= as * w_lo;
        tot[i][2 + h] *= as * w_hi;
      }
      store_tile<kEpi, EpilogueCodec>(p, tot[i], e, rt, row_begin + 8 * i, row_end, g, t);
    }
  }
}

template <typename Cfg, int kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1) w4a8_wgmma_gemm_kernel(W4A8Params wp) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Params& p = wp.p;
  std::uint32_t* table = reinterpret_cast<std::uint32_t*>(smem);
  int* tile_start = reinterpret_cast<int*>(smem + Cfg::kTableBytes);
  const std::uint32_t ring =
      (smem_addr(smem) + Cfg::kTableBytes + Cfg::offsets_bytes(p.num_experts) + 1023) & ~1023u;
  const W4A8Smem<Cfg> sm(ring);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  if (tid < 32) table[tid] = table_word(tid / 2, tid % 2);
  if (tid == 0) {
    for (int b = 0; b < Cfg::kBarriers; ++b) mbar_init(sm.w_bar(b), 1);
    fence_mbar_init();
  }
  if (warp == 1) prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  __syncthreads();

  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = tile_start[p.num_experts] * cta_row_tiles;
  const std::uint32_t stages = (p.k / 64 + 1) / 2;
  std::uint32_t seq = 0;  // stages consumed so far (weight ring stage / mbarrier parity)
  for (int u = blockIdx.x; u < units; u += gridDim.x, seq += stages) {
    const WgmmaUnit un = wgmma_unit_at<Cfg::kTokens>(p, tile_start, cta_row_tiles, u);
    const int e = un.e, cta_rt = un.cta_rt, row_begin = un.row_begin, row_end = un.row_end;
    const int rows = row_end - row_begin;
    const std::uint32_t tables = smem_addr(table);
    // One narrow variant only (a third inlined one pushes ptxas past 255 registers).
    if (!Cfg::kNarrowTails || rows > Cfg::kNarrow) {
      w4a8_unit<Cfg, Cfg::kTokens, kEpi>(wp, tables, sm, seq, e, cta_rt, row_begin, row_end);
    } else {
      w4a8_unit<Cfg, Cfg::kNarrow, kEpi>(wp, tables, sm, seq, e, cta_rt, row_begin, row_end);
    }
  }
}

// Host: launches the persistent grid (one CTA per SM) for Cfg. Returns the CUDA error of the
// attribute / occupancy calls or the launch.
template <typename Cfg, int kEpi>
cudaError_t launch_w4a8_wgmma(const W4A8Params& wp, std::int64_t m, int max_ctas,
                              cudaStream_t stream) {
  auto kernel = w4a8_wgmma_gemm_kernel<Cfg, kEpi>;
  const int smem = Cfg::smem_bytes(wp.p.num_experts);
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  int per_sm = 0, dev = 0, sms = 0;
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem)) !=
      cudaSuccess)
    return err;
  if (per_sm == 0) return cudaErrorInvalidConfiguration;
  if ((err = cudaGetDevice(&dev)) != cudaSuccess) return err;
  if ((err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess)
    return err;
  std::int64_t grid = std::min<std::int64_t>(
      grouped_units_bound(m, wp.p.num_experts, wp.p.n, Cfg::kTokens, Cfg::kRows),
      static_cast<std::int64_t>(per_sm) * sms);
  if (max_ctas > 0) grid = std::min<std::int64_t>(grid, max_ctas);
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, stream>>>(wp);
  return cudaGetLastError();
}

}  // namespace moekit::gemm::sm90_w4a8
