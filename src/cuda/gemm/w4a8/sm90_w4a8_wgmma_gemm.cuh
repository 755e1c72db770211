// SM90 W4A8 grouped GEMM (MXFP4 weights x e4m3 activations) on warpgroup MMA (wgmma e4m3,
// sm_90a) with the weights converted to e4m3 in registers as the A operand (API:
// cuda/gemm/grouped_gemm.hpp, weight layout: sm90_w4a8_weight_layout.cpp, design and measurements:
// docs/kernels/w4a8.md).
//
// CTA = 2 consumer warpgroups = 128 weight rows x kTokens tokens (m64 x N per warpgroup) + a
// producer warpgroup; warp w of the consumers owns the 16-row tile 8 cta_rt + w of the prepared
// layout. The K loop runs in stages of 128 (two 64-wide chunks of the layout, the last stage
// possibly one). A stage slot holds the activations (kTokens rows x 128 e4m3 bytes, natural K
// order: the layout's MMA-k is the real k; one TMA box, 128-byte swizzle, straight into a wgmma B
// slot, rows in order: gathered beforehand) and the CTA tile's weights (one TMA box of 16 code
// items of 512 bytes and one of their 32-byte scale records: the layout keeps a CTA tile's stage
// contiguous), all on the slot's full mbarrier. Out-of-bounds activation bytes are zeros: the
// second half of a one-chunk last stage (K % 128 == 64) and rows past the matrix.
//
// Warp-specialized (v2, 2026-12-01h, the W4A16 wgmma kernel's v5 scheme): one producer thread
// (setmaxnreg 24) issues every stage of the CTA's units into the ring, refilling a slot once its
// empty mbarrier says that all 8 consumer warps retired it; the consumers (setmaxnreg 240) only
// wait, convert and multiply: no CTA barrier, no copy issue in their loop (v1 issued 16-byte
// cp.async copies per thread and synchronized the CTA per stage).
//
// Conversion per 32-bit code word (8 codes, 4 of row g, 4 of row g + 8): each e4m3 register is
// prmt(table_lo, table_hi, magnitude nibbles) | sign bits, where the table holds the 8 e2m1
// magnitudes times 2^d of the block (d = scale - ref[row], e4m3-exact by construction; 16 tables
// of 8 bytes in shared memory, indexed by the prepared scale byte). 8 integer instructions per
// word, 2 table loads per block and row.
//
// Per stage c and consumer warpgroup: wait for the stage; convert into A registers
// (double-buffered: stage c - 1's MMAs may still read the other set); at even c wait for stage
// c - 1 and add the accumulator into the fp32 total (promotion every 256 K, see w4a8_unit); issue
// 4 async wgmma k32 (at even c the first with scale_d = 0), retire stage c - 1 (wgmma_wait<1>)
// and release its slot.
//
// Units are (expert, 128-row tile, token tile), expert-major as in the W4A16 wgmma kernel. The
// epilogue multiplies each accumulator by its activation row's scale and its weight row's
// 2^(ref - 127), then runs the W4A16 store_tile (bias, gated activation, row_scale, bf16 store).
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/decode/sm90_decode_grouped_gemm.cuh"
#include "cuda/gemm/common/sm90_wgmma_rs_bf16_ops.cuh"
#include "cuda/gemm/common/sm90_wgmma_rs_fp8_ops.cuh"
#include "cuda/gemm/common/sm90_wgmma_pipeline.cuh"

namespace moekit::gemm::sm90::w4a8 {

using cuda::sm90::tma_load_2d;
using sm90::decode::store_tile;
using sm90::expert_offset;
using sm90::expert_prefix_bytes;
using sm90::fence_operand;
using sm90::grouped_units_bound;
using sm90::lds128;
using sm90::mbar_arrive_expect_tx;
using sm90::mbar_wait;
using sm90::Params;
using sm90::persistent_grid;
using sm90::prefix_token_tiles;
using sm90::release_slot;
using sm90::run_wgmma_producer;
using sm90::setmaxnreg_inc;
using sm90::smem_addr;
using sm90::smem_desc_k_major_sw128;
using sm90::wgmma_commit;
using sm90::wgmma_fence;
using sm90::wgmma_unit_at;
using sm90::wgmma_wait;
using sm90::WgmmaRing;
using sm90::WgmmaStageCursor;
using sm90::WgmmaUnit;

struct W4A8Params {
  Params p;                  // a: e4m3 rows (as bytes), in order; alpha, row_index unused (null)
  const float* a_scale;      // [rows of A]
  const float* w_row_scale;  // [E * N], prepared row order
};

// The TMA descriptors of one launch (encoded on the host by the launcher). a / a_narrow: u8 [m
// rows][k], box 128 x kTokens / 128 x kNarrow, 128-byte swizzle. codes / scales: the prepared
// weights as rows of one item (512 code bytes as 64 u64, its 32-byte scale record), box 16 items:
// a stage of a full CTA tile (2 chunks x 8 row tiles), of a partial one and more.
struct W4A8Maps {
  CUtensorMap a, a_narrow, codes, scales;
};

// store_tile's codec contract: no row tails (N % 16 == 0), no extra unscale factor.
struct EpilogueCodec {
  static constexpr bool kRowTails = false;
  static constexpr float kUnscale = 1.0f;
};

// kTokens: wgmma N (128, or 160 from ~100 rows per expert: one token tile holds 100-160 of them,
// where 128 would stream each weight tile twice for a short second tile). kStages: ring depth.
// kNarrowTails: token tiles with at most 32 rows (an expert's short last tile) run an N = 32
// wgmma.
template <int kTokens_, int kStages_, bool kNarrowTails_>
struct W4A8Config {
  static constexpr bool kNarrowTails = kNarrowTails_;
  static constexpr int kThreads = 384;  // 2 consumer warpgroups + the producer warpgroup
  static constexpr int kConsumers = 256;
  static constexpr int kRows = 128;  // 2 x 64 weight rows
  // setmaxnreg: the consumers (accumulator + fp32 total: up to 2 x 80 registers at 160 tokens)
  // get what the producer gives up (24 x 128 + 240 x 256 <= 64 K).
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kTokens = kTokens_, kStages = kStages_;
  // Stage slot: the activations (kTokens rows of 128 e4m3, swizzled), the codes (2 chunks x 8
  // tiles x 512 bytes), their 32-byte scale records; 1024-aligned.
  static constexpr int kActBytes = kTokens * 128;
  static constexpr int kWCodeBytes = 2 * 8 * 512;
  static constexpr int kCodesOffset = kActBytes;
  static constexpr int kScalesOffset = kActBytes + kWCodeBytes;
  static constexpr int kStageBytes = (kScalesOffset + 2 * 8 * 32 + 1023) / 1024 * 1024;
  static constexpr int kTableBytes = 128;  // 16 tables x 8 bytes
  static constexpr int kNarrow = 32;       // the tail tile's wgmma N
  static_assert(kTokens == 128 || kTokens == 160, "wgmma token tile");
  static_assert(kStages >= 2, "ring");
  __host__ __device__ static int offsets_bytes(int num_experts) {
    return expert_prefix_bytes(num_experts);
  }
  // After the tables and the tile prefix, aligned to 1024 at run time: the ring (W4A8Smem).
  static int smem_bytes(int num_experts) {
    return kTableBytes + offsets_bytes(num_experts) + 1024 +
           WgmmaRing<kStages, kStageBytes>::kBytes;
  }
};

// The CTA's ring of stage slots (all addresses in the shared window).
template <typename Cfg>
using W4A8Smem = WgmmaRing<Cfg::kStages, Cfg::kStageBytes>;

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

// The producer thread's feed: one stage of its CTA's units per call, in the order the consumers
// take them.
template <typename Cfg>
__device__ __forceinline__ void w4a8_issue_stage(WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>& f,
                                                 const Params& p, const W4A8Maps& maps,
                                                 const int* tile_start, const W4A8Smem<Cfg>& sm) {
  f.wait_slot_free(sm.empty(f.slot));
  const int chunks = p.k / 64, row_tiles16 = p.n / 16;
  const bool narrow = Cfg::kNarrowTails && f.un.row_end - f.un.row_begin <= Cfg::kNarrow;
  const int rows = narrow ? Cfg::kNarrow : Cfg::kTokens;
  // This CTA tile's 16-row tiles (8, fewer in a last partial one): stage c's weights are the
  // ntile * n_chunks items from item 2c * ntile on (sm90_w4a8_weight_layout.cpp).
  const int ntile = min(8, row_tiles16 - 8 * f.un.cta_rt);
  const std::int64_t first =
      (static_cast<std::int64_t>(f.un.e) * row_tiles16 + 8 * f.un.cta_rt) * chunks +
      static_cast<std::int64_t>(2 * f.c) * ntile;
  // Whole boxes of 16 items (out-of-bounds ones zero): the consumers read the items copied for
  // this stage only, every byte of them written by this round's copies.
  const std::uint32_t bar = sm.full(f.slot), dst = sm.slot(f.slot);
  mbar_arrive_expect_tx(bar, rows * 128 + 16 * (512 + 32));
  tma_load_2d(dst + Cfg::kCodesOffset, &maps.codes, 0, static_cast<int>(first), bar);
  tma_load_2d(dst + Cfg::kScalesOffset, &maps.scales, 0, static_cast<int>(first), bar);
  tma_load_2d(dst, narrow ? &maps.a_narrow : &maps.a, f.c * 128, f.un.row_begin, bar);
  f.advance(p, tile_start);
}

// One unit (a consumer's part): weight rows [128 cta_rt, +128) of expert e x tokens [row_begin,
// min(row_begin + kN, row_end)), all of K. seq: stages this CTA consumed before this unit.
template <typename Cfg, int kN, int kEpi>
__device__ __forceinline__ void w4a8_unit(const W4A8Params& wp, std::uint32_t tables,
                                          const W4A8Smem<Cfg>& sm, std::uint32_t seq,
                                          const WgmmaUnit& un) {
  const Params& p = wp.p;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks = p.k / 64, stages = (chunks + 1) / 2, row_tiles16 = p.n / 16;
  const int rt = un.cta_rt * 8 + warp;
  const int ntile = min(8, row_tiles16 - 8 * un.cta_rt);
  std::uint32_t rd = seq % Cfg::kStages, ph = (seq / Cfg::kStages) & 1, prev = 0;

  // acc: the wgmma accumulator of two stages (restarted with scale_d = 0 at even stages); tot:
  // the fp32 sum of those chains. Hopper's fp8 wgmma accumulates with reduced precision (~14
  // mantissa bits, DeepSeek-V3 report section 3.3.2), so each 256-deep partial (8 k32 steps) is
  // promoted into fp32 (CUTLASS's and DeepGEMM's fp8 GEMMs promote every 128 K; 256 halves the
  // promotion adds and keeps the truncation error near 8 * 2^-14 of a partial).
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

  std::uint32_t a[2][4][4];
  for (int c0 = 0; c0 < stages; c0 += 2) {
#pragma unroll
    for (int ab = 0; ab < 2; ++ab) {
      const int c = c0 + ab;
      if (c < stages) {  // CTA-uniform
        const int items = (2 * c + 1 < chunks ? 2 : 1) * ntile;  // copied into the slot
        mbar_wait(sm.full(rd), ph);
        const std::uint32_t slot = sm.slot(rd);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // This warp's item of chunk h. Items the stage did not copy (a one-chunk stage's second
          // chunk; warps past ntile in a partial CTA tile, whose rows are not stored) are not
          // read: zero codes against zero-filled B (branch-free for the wgmma: a wgmma issue on a
          // divergent path makes ptxas serialize them).
          const int item = h * ntile + warp;
          const bool copied = item < items;
          const uint4 cw = copied ? lds128(slot + Cfg::kCodesOffset + item * 512 + lane * 16)
                                  : make_uint4(0, 0, 0, 0);
          // Table indices: (row g, block 0), (row g + 8, block 0), (row g, 1), (row g + 8, 1).
          const std::uint32_t sc =
              copied ? lds32(slot + Cfg::kScalesOffset + item * 32 + g * 4) : 0u;
          // Each byte is the table's byte offset (8 x index), masked to 8-byte multiples below
          // 128.
          const uint2 t0 = lds64(tables + (sc & 0x78)), t1 = lds64(tables + ((sc >> 8) & 0x78));
          const uint2 t2 = lds64(tables + ((sc >> 16) & 0x78)),
                      t3 = lds64(tables + ((sc >> 24) & 0x78));
          // Word j -> step 2h + j / 2, registers (a0, a1) for even j, (a2, a3) for odd j.
          convert_word(cw.x, t0, t1, a[ab][2 * h][0], a[ab][2 * h][1]);
          convert_word(cw.y, t0, t1, a[ab][2 * h][2], a[ab][2 * h][3]);
          convert_word(cw.z, t2, t3, a[ab][2 * h + 1][0], a[ab][2 * h + 1][1]);
          convert_word(cw.w, t2, t3, a[ab][2 * h + 1][2], a[ab][2 * h + 1][3]);
        }
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
        const std::uint64_t desc = smem_desc_k_major_sw128(slot);
#pragma unroll
        for (int j = 0; j < 4; ++j)
          WgmmaRS8<kN>::run(acc, a[ab][j], desc + 2 * j, restart && j == 0 ? 0 : 1);
        wgmma_commit();
        wgmma_wait<1>();  // stage c - 1 retired: its A registers and slot are free
        if (c > 0) release_slot(sm.empty(prev), lane);
        prev = rd;
        if (++rd == Cfg::kStages) rd = 0, ph ^= 1;
      }
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
  promote();
  release_slot(sm.empty(prev), lane);  // the unit's last stage

  if (rt < row_tiles16) {
    const float* rs = wp.w_row_scale + static_cast<std::int64_t>(un.e) * p.n + rt * 16;
    const float w_lo = rs[g], w_hi = rs[g + 8];
#pragma unroll
    for (int i = 0; i < kN / 8; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = un.row_begin + 8 * i + 2 * t + h;
        const float as = row < un.row_end ? wp.a_scale[row] : 0.0f;
        tot[i][h] *= as * w_lo;
        tot[i][2 + h] *= as * w_hi;
      }
      store_tile<kEpi, EpilogueCodec>(p, tot[i], un.e, rt, un.row_begin + 8 * i, un.row_end, g, t);
    }
  }
}

template <typename Cfg, int kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    w4a8_wgmma_gemm_kernel(const __grid_constant__ W4A8Params wp,
                           const __grid_constant__ W4A8Maps maps) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Params& p = wp.p;
  std::uint32_t* table = reinterpret_cast<std::uint32_t*>(smem);
  int* tile_start = reinterpret_cast<int*>(smem + Cfg::kTableBytes);
  const std::uint32_t ring =
      (smem_addr(smem) + Cfg::kTableBytes + Cfg::offsets_bytes(p.num_experts) + 1023) & ~1023u;
  const W4A8Smem<Cfg> sm(ring);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  if (tid < 32) table[tid] = table_word(tid / 2, tid % 2);
  if (tid == 0) sm.init(Cfg::kConsumers / 32);
  if (warp == 1) prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  __syncthreads();  // the last CTA-wide barrier: from here on only mbarriers

  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = tile_start[p.num_experts] * cta_row_tiles;
  const int stages = (p.k / 64 + 1) / 2;
  if (tid >= Cfg::kConsumers) {  // the producer warpgroup: one thread issues every stage
    run_wgmma_producer<Cfg::kTokens, Cfg::kStages, Cfg::kProducerRegs>(
        tid == Cfg::kConsumers, maps, p, tile_start, units, stages, cta_row_tiles,
        [&](WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>& f) {
          w4a8_issue_stage<Cfg>(f, p, maps, tile_start, sm);
        });
    return;
  }
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  const std::uint32_t tables = smem_addr(table);
  std::uint32_t seq = 0;  // stages consumed so far (ring slot / mbarrier phase)
  for (int u = blockIdx.x; u < units; u += gridDim.x, seq += stages) {
    const WgmmaUnit un = wgmma_unit_at<Cfg::kTokens>(p, tile_start, cta_row_tiles, u);
    // One narrow variant only (a third inlined one pushes ptxas past the register budget).
    if (!Cfg::kNarrowTails || un.row_end - un.row_begin > Cfg::kNarrow) {
      w4a8_unit<Cfg, Cfg::kTokens, kEpi>(wp, tables, sm, seq, un);
    } else {
      w4a8_unit<Cfg, Cfg::kNarrow, kEpi>(wp, tables, sm, seq, un);
    }
  }
}

// Host: launches the persistent grid (one CTA per SM) for Cfg. Returns the CUDA error of the
// attribute / occupancy calls or the launch.
template <typename Cfg, int kEpi>
cudaError_t launch_w4a8_wgmma(const W4A8Params& wp, const W4A8Maps& maps, std::int64_t m,
                              int max_ctas, cudaStream_t stream) {
  auto kernel = w4a8_wgmma_gemm_kernel<Cfg, kEpi>;
  const int smem = Cfg::smem_bytes(wp.p.num_experts);
  std::int64_t grid = 0;
  const cudaError_t err = persistent_grid(
      kernel, Cfg::kThreads, smem,
      grouped_units_bound(m, wp.p.num_experts, wp.p.n, Cfg::kTokens, Cfg::kRows), max_ctas, &grid);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, stream>>>(wp, maps);
  return cudaGetLastError();
}

}  // namespace moekit::gemm::sm90::w4a8
