// SM90 grouped GEMM, decode path (<= 16 rows per expert tile): warp-independent streaming of the
// weights, which sit in HBM while the few tokens' activations come from L2. The weight format is a
// codec (sm90_decode_weight_codecs.cuh): W4Codec (W4A16: NVFP4 / MXFP4 codes dequantized in
// registers, launcher sm90_w4a16_grouped_gemm.cu), Bf16TmaCodecT or Bf16Codec (bf16 weights in
// the checkpoint layout, launcher sm90_bf16_decode_grouped_gemm.cu).
//
// Each warp streams a continuous sequence of (unit, K chunk) items through a
// ring: 16-byte weight loads into registers (kStages deep; the bf16 TMA codec: one TMA box per
// item into the warp's kStages shared-memory slots) and its own activation
// fragments straight from global memory (two 16-byte loads per lane per 8-token
// tile, 2 deep; rows past the expert's end are not loaded). The ring runs
// across unit boundaries, so a CTA never drains its loads between units. The
// loop runs in groups of kStages items (a unit's items padded to whole groups),
// so the unit-boundary code exists once per group rather than once per
// unrolled stage (a small instruction footprint). No
// barrier in the main loop: the kWarpsK warps of a CTA split K and meet once
// per unit, where they add the partial sums in warp order (deterministic), each
// warp for its share of the accumulator tiles, and run the epilogue. Shared helpers:
// sm90_w4a16_grouped_gemm.cuh.
//
// Split-K across CTAs (few units, e.g. M = 1 or a 2-expert GEMM2): launched as a
// thread-block cluster of S CTAs, the cluster acts as one CTA of S * kWarpsK
// K-warps. At a unit's end every CTA's partials sit in its own shared memory;
// after one cluster barrier, warp 0 of CTA rank 0 reads them through DSMEM in
// (rank, warp) order (deterministic, no atomics, no workspace) and runs the
// epilogue. Launched without a cluster, S = 1 and this is the CTA-only path.
//
// Fused routing (kRouted, Params::topk_ids, moekit/gemm/decode_routing.hpp): warp 0 of every CTA
// sorts the <= kDecodeRoutingMaxRows rows by expert in shared memory (warp_permutation) in the
// prologue; the units' rows and (GEMM1) the A row of each sorted row come from there. With
// reduce_out, after the streaming loop every warp fences once (its stored rows) and warp 0 counts
// the CTA's units on their column blocks' counters; the CTA that counts a block's last unit runs
// the block's weighted top-k reduce (topk_reduce8) from the stored rows, with all its threads.
#pragma once

#include "cuda/finalize/topk_reduce.cuh"
#include "cuda/permute/warp_permutation.cuh"
#include "cuda/gemm/decode_routing.hpp"
#include "cuda/gemm/decode/sm90_decode_weight_codecs.cuh"
#include "cuda/gemm/w4a16/sm90_w4a16_grouped_gemm.cuh"

namespace moekit::gemm::sm90::decode {

using sm90::expert_of_tile;
using sm90::expert_offset;
using sm90::gated;
using sm90::l2_prefetch;
using sm90::mma_bf16;
using sm90::pdl_launch_dependents;
using sm90::pdl_wait;
using sm90::prefix_token_tiles;
using sm90::smem_addr;

template <int kWarpsK_, int kTilesM_, int kTilesN_, int kStages_, int kMinBlocks_ = 1,
          bool kL2Prefetch_ = true>
struct DecodeConfig {
  static constexpr bool kL2Prefetch = kL2Prefetch_;
  static constexpr int kMinBlocks = kMinBlocks_;  // __launch_bounds__ occupancy target
  static constexpr int kWarpsK = kWarpsK_, kTilesM = kTilesM_, kTilesN = kTilesN_;
  static constexpr int kStages = kStages_;  // weight ring depth (items)
  static constexpr int kXStages = 2;        // activation ring depth (L2-resident data)
  static constexpr int kThreads = 32 * kWarpsK;
  static constexpr int kRows = 16 * kTilesM;
  static constexpr int kTokens = 8 * kTilesN;
  static constexpr int kAccRegs = kTilesM * kTilesN * 4;
  static constexpr int kRedBytes = 2 * kWarpsK * kAccRegs * 32 * 4;  // double-buffered
  static_assert(kStages % kXStages == 0, "ring depths");
};

// Shared memory: the codec's table, the token-tile prefix [E + 1], the split-K reduction buffer.
// The fused routing's kernel sizes its tables for kDecodeRoutingMaxExperts instead (fixed
// addresses: no registers for them in the streaming loop) and adds the offsets [E + 1] it computes
// and, after the split-K buffer, its scratch [E], the sorted rows' tokens and the assignments'
// sorted rows [kDecodeRoutingMaxRows] each.
template <typename Cfg, typename Codec>
constexpr int tile_start_offset() {
  return Codec::kSmemBytes;
}
__host__ __device__ constexpr int expert_table_bytes(int num_experts) {
  return ((num_experts + 1) * 4 + 127) / 128 * 128;
}
constexpr int kRoutedTable = expert_table_bytes(kDecodeRoutingMaxExperts);
constexpr int kRoutedScratch = (kDecodeRoutingMaxExperts + 2 * kDecodeRoutingMaxRows) * 4;
template <typename Cfg, typename Codec>
int decode_smem_bytes(int num_experts, bool routed) {
  if (routed)
    return tile_start_offset<Cfg, Codec>() + 2 * kRoutedTable + Cfg::kRedBytes + kRoutedScratch;
  return tile_start_offset<Cfg, Codec>() + expert_table_bytes(num_experts) + Cfg::kRedBytes;
}

// The fused reduce (DecodeRouting::reduce_out) of the column blocks in list[0, count), by all
// kThreads threads of the CTA: item it = (block, token, 8 columns), all blocks' items spread over
// the threads (the blocks a CTA completes are those whose last unit it ran, often several at its
// end: one at a time, their load chains would add up). The counted units' rows are visible: their
// CTAs fenced before counting, the counting warp fenced after reading the counts, then a CTA
// barrier.
template <typename Cfg>
__device__ __forceinline__ void fused_reduce_blocks(const Params& p, const int* permuted_row,
                                                    const int* list, int count, int tid) {
  constexpr int kChunks = Cfg::kRows / 8;
  const int tokens = p.m / p.top_k;
  const int per_block = tokens * kChunks;
  for (int it = tid; it < count * per_block; it += Cfg::kThreads) {
    const int rb = list[it / per_block], r = it % per_block;
    const int t = r / kChunks, c = rb * Cfg::kRows + (r % kChunks) * 8;
    if (c >= p.n) continue;  // the last block's columns past N
    const uint4 v =
        p.reduce_bias != nullptr
            ? cuda::topk_reduce8<true, true>(p.out, p.ldo, permuted_row, p.topk_weights, p.top_k, t,
                                             c, p.reduce_bias, p.n, p.topk_ids)
            : cuda::topk_reduce8<false, true>(p.out, p.ldo, permuted_row, p.topk_weights, p.top_k,
                                              t, c, nullptr, p.n, p.topk_ids);
    *reinterpret_cast<uint4*>(p.reduce_out + static_cast<std::int64_t>(t) * p.n + c) = v;
  }
}

__device__ __forceinline__ std::uint32_t cluster_reg_ctarank() {
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ std::uint32_t cluster_reg_nctarank() {
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
// All threads of all CTAs of the cluster (release / acquire: shared-memory
// writes before it are visible to DSMEM reads after it).
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                   : "memory");
}
// Shared-memory address `addr` of this CTA mapped to the same offset in CTA
// `rank` of the cluster.
__device__ __forceinline__ std::uint32_t cluster_map(std::uint32_t addr, std::uint32_t rank) {
  std::uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
__device__ __forceinline__ float cluster_ld(std::uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ uint4 load_activation(const __nv_bfloat16* p, bool valid) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (valid)
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
  return v;
}

// Output column of natural column n: itself, or (kKOrder and p.out_wgmma_k) its place in the
// wgmma K order (moekit/gemm/w4a16.hpp W4KOrder: natural word w of a 64-wide chunk is stored at
// word 4 (w % 8) + w / 8).
template <bool kKOrder>
__device__ __forceinline__ int out_column(const Params& p, int n) {
  if constexpr (kKOrder) {
    if (p.out_wgmma_k) {
      const int w = (n & 63) >> 1;
      return (n & ~63) | ((4 * (w & 7) + (w >> 3)) << 1) | (n & 1);
    }
  }
  return n;
}

// Epilogue of one 16-row x 8-token accumulator tile (c: rows g, g+8 x tokens
// 2t, 2t+1). Codec::kRowTails: weight row g + 8 may lie past N (N % 16 == 8).
// kKOrder: honours p.out_wgmma_k (the wgmma kernel; the others write natural order).
template <int kEpi, typename Codec = W4Codec<true>, bool kKOrder = false>
__device__ __forceinline__ void store_tile(const Params& p, const float (&c)[4], int e, int rt,
                                           int row0, int row_end, int g, int t) {
  static_assert(!Codec::kRowTails || kEpi == 0, "gated epilogues need N % 16 == 0");
  const float scale = (p.alpha ? p.alpha[e] : 1.0f) * Codec::kUnscale;
  const float* bias = p.bias ? p.bias + static_cast<std::int64_t>(e) * p.n : nullptr;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 2 * t + h;
    if (row >= row_end) continue;
    const float rs = p.row_scale ? p.row_scale[row] : 1.0f;
    __nv_bfloat16* out = p.out + static_cast<std::int64_t>(row) * p.ldo;
    const float lo = c[h] * scale, hi = c[2 + h] * scale;
    if constexpr (kEpi == 0) {
      const int n0 = rt * 16 + g;
      out[out_column<kKOrder>(p, n0)] = __float2bfloat16_rn((lo + (bias ? bias[n0] : 0.0f)) * rs);
      if (!Codec::kRowTails || n0 + 8 < p.n)
        out[out_column<kKOrder>(p, n0 + 8)] =
            __float2bfloat16_rn((hi + (bias ? bias[n0 + 8] : 0.0f)) * rs);
    } else {
      const int col = rt * 8 + g;
      const float gate = lo + (bias ? bias[col] : 0.0f);
      const float up = hi + (bias ? bias[p.n / 2 + col] : 0.0f);
      out[out_column<kKOrder>(p, col)] =
          __float2bfloat16_rn(gated<kEpi>(gate, up, p.swiglu_alpha, p.swiglu_limit) * rs);
    }
  }
}

// kPdl (v5): launched as a programmatic dependent of the previous kernel
// (W4A16GemmArgs / GroupedGemmArgs::overlap_previous): the prologue, the weight ring's first
// kStages items and an L2 prefetch of the first unit run before pdl_wait; the
// activations after it; it also lets its own dependent launch early.
// kPdl = false is the v4 kernel, unchanged (no griddepcontrol at all).
// kRouted: the fused routing (Params::topk_ids non-null); false is the kernel without it.
template <typename Cfg, typename Codec, int kEpi, bool kPdl = false, bool kRouted = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    decode_grouped_gemm_kernel(Params p, const __grid_constant__ DecodeMaps maps) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kTileStart = tile_start_offset<Cfg, Codec>();
  const int table = kRouted ? kRoutedTable : expert_table_bytes(p.num_experts);
  int* tile_start = reinterpret_cast<int*>(smem + kTileStart);
  float* red = reinterpret_cast<float*>(smem + kTileStart + (kRouted ? 2 : 1) * table);
  // Fused routing: its tables (the offsets; the sorted rows' tokens: GEMM1's row index).
  int* offsets = reinterpret_cast<int*>(smem + kTileStart + table);
  int* r_running = reinterpret_cast<int*>(smem + kTileStart + 2 * table + Cfg::kRedBytes);
  int* r_tokens = r_running + kDecodeRoutingMaxExperts;
  int* r_permuted = r_tokens + kDecodeRoutingMaxRows;
  const int tid = threadIdx.x, lane = tid % 32, wk = tid / 32;
  const int g = lane / 4, t = lane % 4;

  if constexpr (kRouted) {
    if (p.clear != nullptr && blockIdx.x == 0) {
      if constexpr (kPdl) pdl_wait();  // a write: after the previous kernel
      for (int i = tid; i < p.clear_count; i += Cfg::kThreads) p.clear[i] = 0;
    }
  }

  if constexpr (kPdl) pdl_launch_dependents();
  Codec::init_smem(smem, tid, Cfg::kThreads);
  // kPdl: before pdl_wait only expert_offsets (or topk_ids), w and w_scales are read (a PDL
  // launch requires that the previous kernel writes none of them).
  if (wk == 0) {
    if constexpr (kRouted) {
      cuda::warp_permutation<kDecodeRoutingMaxRows / 32, Cfg::kTokens>(
          p.topk_ids, p.m, p.num_experts, p.top_k, lane, offsets, r_running, r_tokens, r_permuted,
          tile_start);
    } else {
      prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
    }
  }
  __syncthreads();

  const int total_tiles = tile_start[p.num_experts];
  const int row_tiles16 = Codec::row_tiles(p.n);
  const int cta_row_tiles = (row_tiles16 + Cfg::kTilesM - 1) / Cfg::kTilesM;
  const int units = total_tiles * cta_row_tiles;
  // Cluster (1-D, S CTAs with consecutive blockIdx.x): S = 1 without a cluster
  // launch. Units go to clusters; K chunks to the S * kWarpsK warps of one.
  const int csize = static_cast<int>(cluster_reg_nctarank());
  const int crank = static_cast<int>(cluster_reg_ctarank());
  const int cid = static_cast<int>(blockIdx.x) / csize;
  const int nclusters = static_cast<int>(gridDim.x) / csize;
  if constexpr (kRouted && kEpi == 0) {
    if (p.reduce_out != nullptr && total_tiles == 0) {
      // No routed row: every token's sum over no slots is 0 (what the reduce kernel writes).
      if constexpr (kPdl) pdl_wait();
      const std::int64_t words = static_cast<std::int64_t>(p.m / p.top_k) * p.n / 8;
      for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * Cfg::kThreads + tid; i < words;
           i += static_cast<std::int64_t>(gridDim.x) * Cfg::kThreads)
        reinterpret_cast<uint4*>(p.reduce_out)[i] = make_uint4(0u, 0u, 0u, 0u);
      return;  // uniform over the grid
    }
  }
  if (cid >= units) return;  // uniform over the cluster
  const int my_units = (units - 1 - cid) / nclusters + 1;
  const int chunks = Codec::chunks(p.k);
  const int ksplit = csize * Cfg::kWarpsK;   // K-warps of the cluster
  const int kw = crank * Cfg::kWarpsK + wk;  // this warp's K slot
  // Items per unit per warp, padded to a multiple of kStages (padded items have no chunk: no
  // loads, no MMA): every unit then starts a group of kStages items, so a group's ring slots
  // never straddle two units, and the unit-boundary code (cursor moves, split-K reduction,
  // epilogue) exists once, after the group, instead of in each of the kStages unrolled stages
  // (the instruction footprint of the streaming loop: ncu showed a third of the M = 1 stall
  // cycles waiting on instruction fetch).
  const int per_unit =
      ((chunks + ksplit - 1) / ksplit + Cfg::kStages - 1) / Cfg::kStages * Cfg::kStages;
  const int groups = my_units * per_unit / Cfg::kStages;

  // Unit i of this CTA -> expert, rows, first 16-row tile.
  struct Unit {
    int e, row_begin, row_end, rt0;
  };
  auto decode_unit = [&](int i) {
    const int u = cid + i * nclusters;
    const int tt = u % total_tiles;
    const int e = expert_of_tile(tile_start, p.num_experts, tt);
    Unit un;
    un.e = e;
    un.row_begin =
        (kRouted ? offsets[e] : expert_offset(p, e)) + (tt - tile_start[e]) * Cfg::kTokens;
    un.row_end = kRouted ? offsets[e + 1] : expert_offset(p, e + 1);
    un.rt0 = (u / total_tiles) * Cfg::kTilesM;
    return un;
  };

  // Lane t's activation halves sit where its weight halves do (Codec::lane_k, kHalfStride).
  const int x_k_left = p.k - Codec::lane_k(t);  // kTails: half h of chunk c exists if < it
  // A unit's activation rows (this lane's token g of each 8-token tile).
  struct XRows {
    const __nv_bfloat16* ptr[Cfg::kTilesN];
    bool ok[Cfg::kTilesN];
  };
  auto x_rows = [&](int i, XRows& x) {
    const Unit un = decode_unit(i);
#pragma unroll
    for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
      const int row = un.row_begin + nt * 8 + g;
      x.ok[nt] = row < un.row_end;
      std::int64_t src = 0;
      if (x.ok[nt]) {
        if constexpr (kRouted)
          src = p.a_by_token ? r_tokens[row] : row;
        else
          src = p.row_index ? p.row_index[row] : row;
      }
      x.ptr[nt] = p.a + src * p.lda + Codec::lane_k(t);
    }
  };

  // Two cursors, each at the first item of a group: compute (cu_unit, cu_ci) and load
  // (ld_unit, ld_ci), one group ahead (the weight ring holds one group). Activations are
  // kXStages items ahead of compute: stage st loads item cu_ci + st + kXStages, past the unit's
  // end the next unit's; xrows are the rows of the unit those loads read (the next one from
  // stage kStages - kXStages of a unit's last group on).
  int cu_unit = 0, cu_ci = 0, ld_unit = 0, ld_ci = 0;
  typename Codec::Cursor wcur;  // the load cursor's unit; tiles m >= w_tiles (past N) not loaded
  if constexpr (requires { Codec::kTma; }) wcur.map = &maps.w;
  int w_tiles = 0;
  XRows xrows;
  auto set_load_unit = [&](int i) {
    const Unit un = decode_unit(i);
    w_tiles = row_tiles16 - un.rt0;
    wcur.set(p, un.e, un.rt0, lane);
  };
  set_load_unit(0);
  if (kPdl && tid == 0 && crank == 0) {
    // PDL: pull the first K chunks of this cluster's first unit into L2 while
    // the previous kernel finishes (all clusters together at most
    // kPrefetchBudget bytes, so that the previous kernel's streaming does not
    // evict them before use; chunks in the order the warps consume them).
    constexpr std::int64_t kPrefetchBudget = 16 << 20;
    const Unit un = decode_unit(0);
    const int tiles = min(Cfg::kTilesM, row_tiles16 - un.rt0);
    Codec::prefetch_unit(p, un.e, un.rt0, tiles, kPrefetchBudget / nclusters);
  }
  using Item = typename Codec::Item;
  // Weights of item ld_ci + st of the load cursor's unit (chunk c = ci * ksplit + kw; absent
  // when >= chunks or past the last unit).
  auto load_w = [&](Item(&wr)[Cfg::kTilesM], int st) {
    const int c = (ld_ci + st) * ksplit + kw;
    const bool ok = ld_unit < my_units && c < chunks;
#pragma unroll
    for (int m = 0; m < Cfg::kTilesM; ++m)
      wcur.template load<Cfg::kL2Prefetch>(p, wr[m], m, c, ok && m < w_tiles);
  };
  auto load_x = [&](uint4(&xr)[Cfg::kTilesN][2], const XRows& x, int unit, int ci) {
    const int c = ci * ksplit + kw;
    const bool ok = unit < my_units && c < chunks;
#pragma unroll
    for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = c * 64 + Codec::kHalfStride * h;
        const bool in_k = !Codec::kTails || k < x_k_left;
        xr[nt][h] = load_activation(x.ptr[nt] + k, ok && x.ok[nt] && in_k);
      }
    }
  };
  // Moves the load cursor to the next group (a new unit when the group ends one).
  auto advance_load = [&] {
    ld_ci += Cfg::kStages;
    if (ld_ci == per_unit) {
      ld_ci = 0;
      if (++ld_unit < my_units) set_load_unit(ld_unit);
    }
  };

  Item wring[Cfg::kStages][Cfg::kTilesM];
  uint4 xring[Cfg::kXStages][Cfg::kTilesN][2];
  if constexpr (kPdl) {
    // Weights first (independent of the previous kernel), then wait for it,
    // then the activations (row_index, a).
#pragma unroll
    for (int st = 0; st < Cfg::kStages; ++st) load_w(wring[st], st);
    pdl_wait();
    x_rows(0, xrows);
#pragma unroll
    for (int st = 0; st < Cfg::kXStages; ++st) load_x(xring[st], xrows, 0, st);
  } else {  // v4 order
    x_rows(0, xrows);
#pragma unroll
    for (int st = 0; st < Cfg::kStages; ++st) {
      if (st < Cfg::kXStages) load_x(xring[st], xrows, 0, st);
      load_w(wring[st], st);
    }
  }
  advance_load();
  float acc[Cfg::kTilesM][Cfg::kTilesN][4];
  auto zero_acc = [&] {
#pragma unroll
    for (int m = 0; m < Cfg::kTilesM; ++m)
#pragma unroll
      for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[m][nt][r] = 0.0f;
  };
  zero_acc();

  // The unit-end epilogue shared by the K-warps (below) where there are two or more
  // accumulator tiles to share out.
  constexpr bool kSharedEpilogue = Cfg::kWarpsK > 1 && Cfg::kTilesM * Cfg::kTilesN > 1;
  const bool never = p.k <= 0;  // the launcher checked k > 0
  for (int q = 0; q < groups; ++q) {
#pragma unroll
    for (int st = 0; st < Cfg::kStages; ++st) {
      const int xs = st % Cfg::kXStages;
      if ((cu_ci + st) * ksplit + kw < chunks) {
#pragma unroll
        for (int m = 0; m < Cfg::kTilesM; ++m) {
          std::uint32_t a[4][4];
          Codec::fragments(wring[st][m], smem, a);
#pragma unroll
          for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
            // Token g's K words in the codecs' order (sm90_bf16_decode_fragments.hpp).
#pragma unroll
            for (int sk = 0; sk < 4; ++sk) {
              const WordSource b0 = bf16_b_source(sk, 0), b1 = bf16_b_source(sk, 1);
              mma_bf16(acc[m][nt], a[sk], word_of(xring[xs][nt][b0.half], b0.word),
                       word_of(xring[xs][nt][b1.half], b1.word));
            }
          }
        }
      }
      // Refill: the weights of the next group, the activations kXStages items ahead.
      load_w(wring[st], st);
      // Past the group's end and the unit's (its last group): the next unit's first items.
      const bool next_unit = st + Cfg::kXStages >= Cfg::kStages && cu_ci + Cfg::kStages == per_unit;
      if (st == Cfg::kStages - Cfg::kXStages && next_unit && cu_unit + 1 < my_units)
        x_rows(cu_unit + 1, xrows);
      load_x(xring[xs], xrows, cu_unit + (next_unit ? 1 : 0),
             (next_unit ? 0 : cu_ci + Cfg::kStages) + st + Cfg::kXStages - Cfg::kStages);
      if constexpr (Codec::kStageFence) {
        if (never) __trap();  // a branch: ends the stage's basic block (Codec::kStageFence)
      }
    }
    advance_load();
    cu_ci += Cfg::kStages;
    if (cu_ci < per_unit) continue;
    // Unit end (uniform across the cluster): reduce over K warps and run the epilogue.
    float* buf = red + (cu_unit & 1) * (Cfg::kWarpsK * Cfg::kAccRegs * 32);
    // The K-warps share the unit-end work; a cluster keeps warp 0 of rank 0 reducing over DSMEM.
    const bool shared_end = kSharedEpilogue && csize == 1;
    if (shared_end) {
      // Every K-warp stores its partial sums; after one barrier, warp w reduces and stores the
      // accumulator tiles w, w + kWarpsK, .. (the sum in warp order 0, 1, ..: the arithmetic of
      // the single-warp form below, bitwise). The barrier then waits for the slowest K-warp
      // only, not for one warp's whole epilogue.
#pragma unroll
      for (int m = 0; m < Cfg::kTilesM; ++m)
#pragma unroll
        for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            buf[((wk * Cfg::kTilesM + m) * Cfg::kTilesN * 4 + nt * 4 + r) * 32 + lane] =
                acc[m][nt][r];
      __syncthreads();
      const Unit un = decode_unit(cu_unit);
#pragma unroll 1
      for (int i = wk; i < Cfg::kTilesM * Cfg::kTilesN; i += Cfg::kWarpsK) {
        const int m = i / Cfg::kTilesN, nt = i % Cfg::kTilesN;
        if (un.rt0 + m >= row_tiles16) continue;
        float c[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) c[r] = buf[(i * 4 + r) * 32 + lane];
#pragma unroll 1
        for (int w = 1; w < Cfg::kWarpsK; ++w)  // fixed order: deterministic
#pragma unroll
          for (int r = 0; r < 4; ++r)
            c[r] += buf[((w * Cfg::kTilesM * Cfg::kTilesN + i) * 4 + r) * 32 + lane];
        store_tile<kEpi, Codec>(p, c, un.e, un.rt0 + m, un.row_begin + nt * 8, un.row_end, g, t);
      }
    } else if (Cfg::kWarpsK > 1 || csize > 1) {
      // The partial-sum stores of the branch above, for K-warps 1.. only. Two copies on purpose:
      // factoring them into one lambda or helper changed the SASS of the decode kernels
      // (cuobjdump, 2026-12-02d: the single-tile bf16 ones rescheduled), which were measured as
      // they are.
      if (wk > 0 || crank > 0) {
#pragma unroll
        for (int m = 0; m < Cfg::kTilesM; ++m)
#pragma unroll
          for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
              buf[((wk * Cfg::kTilesM + m) * Cfg::kTilesN * 4 + nt * 4 + r) * 32 + lane] =
                  acc[m][nt][r];
      }
      if (csize > 1)
        cluster_barrier();
      else
        __syncthreads();
    }
    if (!shared_end && wk == 0 && crank == 0) {
      for (int w = 1; w < Cfg::kWarpsK; ++w)  // fixed order: deterministic
#pragma unroll
        for (int m = 0; m < Cfg::kTilesM; ++m)
#pragma unroll
          for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
            for (int r = 0; r < 4; ++r)
              acc[m][nt][r] +=
                  buf[((w * Cfg::kTilesM + m) * Cfg::kTilesN * 4 + nt * 4 + r) * 32 + lane];
      for (int cr = 1; cr < csize; ++cr) {  // fixed (rank, warp) order: deterministic
        const std::uint32_t rbuf = cluster_map(smem_addr(buf), static_cast<std::uint32_t>(cr));
        for (int w = 0; w < Cfg::kWarpsK; ++w) {
#pragma unroll
          for (int m = 0; m < Cfg::kTilesM; ++m) {  // one row tile at a time: registers
            float v[Cfg::kTilesN][4];
#pragma unroll
            for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
              for (int r = 0; r < 4; ++r)
                v[nt][r] = cluster_ld(
                    rbuf +
                    (((w * Cfg::kTilesM + m) * Cfg::kTilesN * 4 + nt * 4 + r) * 32 + lane) * 4);
#pragma unroll
            for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
              for (int r = 0; r < 4; ++r) acc[m][nt][r] += v[nt][r];
          }
        }
      }
      const Unit un = decode_unit(cu_unit);
#pragma unroll
      for (int m = 0; m < Cfg::kTilesM; ++m) {
        if (un.rt0 + m >= row_tiles16) continue;
#pragma unroll
        for (int nt = 0; nt < Cfg::kTilesN; ++nt)
          store_tile<kEpi, Codec>(p, acc[m][nt], un.e, un.rt0 + m, un.row_begin + nt * 8,
                                  un.row_end, g, t);
      }
    }
    zero_acc();
    cu_ci = 0;
    ++cu_unit;
  }
  if constexpr (kRouted && kEpi == 0) {
    // The fused reduce, after the streaming (a fence in the loop would wait for the warp's loads
    // in flight): warp 0 counts this CTA's units on their blocks' counters, 32 at a time (one
    // fence per warp for the rows it stored before, all atomics in flight together), lists the
    // blocks whose last unit it counted (in the routing scratch, free after the prologue), and the
    // whole CTA reduces them.
    if (p.reduce_out != nullptr && crank == 0) {  // uniform over the CTA
      int* list = r_running;                      // [0]: count, then <= 32 blocks
      // Release: this CTA's rows before its counts. Every warp stored some: each fences its own,
      // then (after the barrier) the counting warp fences again, cumulatively over all of them.
      __threadfence();
      __syncthreads();
      if (wk == 0) __threadfence();
      for (int i0 = 0; i0 < my_units; i0 += 32) {
        if (wk == 0) {
          const int i = i0 + lane;
          const int block = (cid + i * nclusters) / total_tiles;
          const bool done = i < my_units && atomicAdd(p.counters + block, 1) == total_tiles - 1;
          const unsigned last = __ballot_sync(0xFFFFFFFFu, done);
          __threadfence();  // acquire: the rows the counted units' CTAs fenced
          if (done) {
            list[1 + __popc(last & ((1u << lane) - 1u))] = block;
            p.counters[block] = 0;  // no unit of this launch counts on it any more
          }
          if (lane == 0) list[0] = __popc(last);
        }
        __syncthreads();
        fused_reduce_blocks<Cfg>(p, r_permuted, list + 1, list[0], tid);
        __syncthreads();  // the list's next round
      }
    }
  }
  // No CTA may exit while rank 0 can still read its shared memory.
  if (csize > 1) cluster_barrier();
}

}  // namespace moekit::gemm::sm90::decode
