// SM90 W4A16 grouped GEMM for many tokens per expert (prefill): warpgroup MMA
// (wgmma, sm_90a) with the dequantized weights as the register A operand.
//
// CTA = 2 warpgroups = 128 weight rows x kTokens tokens (wgmma m64 x N per
// warpgroup); each warp owns one 16-row tile of the existing shuffled layout
// (sm90_w4a16_weight_shuffle.cpp): one 16-byte load per lane and 64-wide K
// chunk, dequant_word -> the 4 A registers of one k16 step. The wgmma A
// fragment of a warp's 16 rows is the mma.sync m16n8k16 A layout
// (sm90_w4a16_wgmma_ops.cuh), so the decode kernels' dequant feeds wgmma as is.
//
// The shuffle permutes K inside a 64-wide chunk: lane (g, t), step j holds
// real k = 16t + 4j + {0, 1} at MMA-k {2t, 2t+1} and 16t + 4j + {2, 3} at
// {2t+8, 2t+9}. The activations (B, tokens x K, shared memory, K-major,
// 128-byte swizzle) must carry the same permutation: step j reads row bytes
// [32j, 32j + 32), i.e. 16-byte logical chunks q = 2j + u (u = 0, 1), whose
// word t (two bf16) is real k 16t + 4j + 2u + {0, 1}. With 16-byte vectors v
// of the source row (real k 8v..8v+7), word t of chunk q is word q % 4 of
// vector 2t + q / 4: a 4 x 4 word transpose. No copy engine moves 4-byte
// pieces, so activations arrive by bulk async copies (cp.async.bulk, one
// 128-byte token row per copy, gathered through row_index, mbarrier
// completion) in natural order into a staging ring, and every thread then
// transposes its share into the wgmma slot (ld.shared / st.shared,
// fence.proxy.async, one CTA barrier per chunk). Weights: one bulk copy of a
// warp's 512 code bytes + its scale record per chunk into a per-warp ring.
// Bulk copies run in the async proxy, so no thread's fence waits for them
// (a register-staged v1 that kept ld.global in flight across the per-chunk
// fence ran at ~the large tile's speed: docs/kernels/w4a16.md).
//
// Pipeline per 64-wide chunk c (both warpgroups in step): wait for the
// warp's weights of chunk c, dequant into A registers (double-buffered: chunk
// c's stay untouched until wgmma_wait<1> of chunk c + 1), request the weights
// of chunk c + kWStages - 1 and the activations of chunk c + kAStages, issue 4
// async wgmma, wait for chunk c - 1, permute chunk c + 1 into the slot chunk
// c - 2 used, fence.proxy.async, barrier.
//
// Units are (expert, 128-row tile, token tile), expert-major (an expert's
// row tiles x token tiles are consecutive, so one wave of the persistent grid
// shares the expert's activations and each weight tile through L2). A token
// tile with few rows (an expert's last one) runs a narrower wgmma (N / 2 or
// N / 4). Epilogue: store_tile of the decode kernel (same math, same layout).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "moekit/gemm/w4a16.hpp"
#include "sm90_decode_grouped_gemm.cuh"
#include "sm90_w4a16_wgmma_ops.cuh"

namespace moekit::gemm::sm90_w4a16 {

using sm90_decode::store_tile;

// kTokens: wgmma N (64, 128, 256). kWStages: weight ring depth in chunks
// (chunk c + kWStages - 1 is requested at chunk c). kAStages: activation
// staging depth (chunk c + kAStages is requested at chunk c, chunk c + 1 is
// permuted into a wgmma slot at chunk c). kNarrowTails: token tiles with at
// most kTokens / 2 (/ 4) rows run an N / 2 (N / 4) wgmma (each variant's
// registers add up: off for N = 256). kActBulk: activations by bulk copies
// (one per token row, issued by the warp that owns the token: the compiler
// serializes per-lane bulk copies, ~10 instructions each) instead of 16-byte
// cp.async (4 per thread and chunk; their completion is waited for one
// iteration before the permute). kFence = false drops fence.proxy.async:
// MEASUREMENT ONLY (formally racy), to price it.
template <int kTokens_, int kWStages_, int kAStages_ = 4, bool kNarrowTails_ = true,
          bool kActBulk_ = false, bool kFence_ = true>
struct WgmmaConfig {
  static constexpr bool kWgmma = true;
  static constexpr bool kActBulk = kActBulk_;
  static constexpr bool kNarrowTails = kNarrowTails_;
  static constexpr bool kFence = kFence_;
  static constexpr int kThreads = 256;  // 2 warpgroups
  static constexpr int kRows = 128;     // 2 x 64 weight rows
  static constexpr int kTokens = kTokens_, kWStages = kWStages_, kAStages = kAStages_;
  // wgmma B slots (3: the permute of chunk c + 1 overwrites chunk c - 2, which
  // both warpgroups retired before the previous barrier).
  static constexpr int kSlots = 3;
  static constexpr int kSlotBytes = kTokens * 128;  // kTokens rows of 64 bf16, swizzled
  // Staging: natural layout, token rows of 128 bytes at a 144-byte pitch (the
  // 8 tokens of a 16-byte shared-load phase fall in distinct bank groups).
  static constexpr int kStagePitch = 144;
  static constexpr int kStageBytes = kTokens * kStagePitch;
  // Weight stage: per warp 512 bytes of codes + a 64-byte scale record
  // (NVFP4; MXFP4 uses 32 of them).
  static constexpr int kWarpStageBytes = 512 + 64;
  static constexpr int kWStageBytes = 8 * kWarpStageBytes;
  static constexpr int kBarriers = kAStages + 8 * kWStages;
  // Permute items (token, half hf, t group): an item reads the vectors 2t + hf
  // of its t group from the staging row and writes kTPerItem words of 4 chunks.
  static constexpr int kTPerItem = 2 * kTokens >= kThreads ? 4 : 2;
  static constexpr int kItems = kTokens * 2 * (4 / kTPerItem);
  static constexpr int kItemsPerThread = kItems / kThreads;
  static_assert(kTokens == 64 || kTokens == 128 || kTokens == 256, "wgmma token tile");
  static_assert(kItems % kThreads == 0, "permute items");
  static_assert(kWStages >= 2 && kAStages >= (kActBulk ? 2 : 3), "rings");
  static constexpr int kPiecesPerThread = kTokens * 8 / kThreads;  // 16-byte cp.async per chunk
  static constexpr int kLutBytes = 256 * 4;
  __host__ __device__ static int offsets_bytes(int num_experts) {
    return ((num_experts + 1) * 4 + 127) / 128 * 128;
  }
  // After the LUT and offsets, aligned to 1024 (the swizzle atom) at run time:
  // wgmma slots, staging ring, weight ring, mbarriers.
  __host__ __device__ static constexpr int ring_bytes() {
    return kSlots * kSlotBytes + kAStages * kStageBytes + kWStages * kWStageBytes + 8 * kBarriers;
  }
  static int smem_bytes(int num_experts) {
    return kLutBytes + offsets_bytes(num_experts) + 1024 + ring_bytes();
  }
};

__device__ __forceinline__ void sts128(std::uint32_t addr, std::uint32_t a, std::uint32_t b,
                                       std::uint32_t c, std::uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}
__device__ __forceinline__ void sts64(std::uint32_t addr, std::uint32_t a, std::uint32_t b) {
  asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(addr), "r"(a), "r"(b) : "memory");
}

// Staging item i -> (token, hf, t group). Per warp: 16 tokens x 2 halves
// (kTPerItem 4) or 8 tokens x 2 t groups x 2 halves (2): the lanes of one
// token read its whole 128-byte chunk row (full sectors), and the 8 (16) lanes
// of a shared-store phase hit distinct 16-byte (8-byte) bank groups (distinct
// token % 8 under the swizzle).
template <typename Cfg>
struct StagingItem {
  int tok, hf, tg;
  __device__ explicit StagingItem(int i) {
    if constexpr (Cfg::kTPerItem == 4) {
      tok = (i / 32) * 16 + i % 16;
      hf = (i / 16) % 2;
      tg = 0;
    } else {
      tok = (i / 32) * 8 + i % 8;
      tg = (i / 8) % 2;
      hf = (i / 16) % 2;
    }
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
  std::uint32_t slots, staging, weights, bars;
  __device__ explicit WgmmaSmem(std::uint32_t ring) {
    slots = ring;
    staging = slots + Cfg::kSlots * Cfg::kSlotBytes;
    weights = staging + Cfg::kAStages * Cfg::kStageBytes;
    bars = weights + Cfg::kWStages * Cfg::kWStageBytes;
  }
  __device__ std::uint32_t act_bar(int s) const { return bars + 8 * s; }
  __device__ std::uint32_t w_bar(int warp, int s) const {
    return bars + 8 * (Cfg::kAStages + warp * Cfg::kWStages + s);
  }
};

// One unit: weight rows [128 cta_rt, +128) of expert e x tokens [row_begin,
// min(row_begin + kN, row_end)), all of K. kN <= Cfg::kTokens is the wgmma N.
// seq: chunks this CTA consumed before this unit (mbarrier stage / parity).
template <typename Cfg, int kN, bool kNvfp4, int kEpi>
__device__ __forceinline__ void wgmma_unit(const Params& p, const std::uint32_t* lut,
                                           const WgmmaSmem<Cfg>& sm, std::uint32_t seq, int e,
                                           int cta_rt, int row_begin, int row_end) {
  constexpr int kT = Cfg::kTPerItem, kIPT = Cfg::kItemsPerThread;
  constexpr int kScaleRecord = kNvfp4 ? 64 : 32;
  constexpr int kA = Cfg::kAStages, kW = Cfg::kWStages;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks = p.k / 64, row_tiles16 = p.n / 16;
  const int valid_rows = min(kN, row_end - row_begin);

  // This warp's 16-row tile (warpgroup warp / 4 holds rows 64 (warp / 4)..+63):
  // lane 0 requests its codes (512 bytes) and scale record per chunk.
  const int rt = cta_rt * 8 + warp;
  const bool tile_ok = rt < row_tiles16;
  const std::int64_t tile =
      (static_cast<std::int64_t>(e) * row_tiles16 + (tile_ok ? rt : 0)) * chunks;
  const std::uint8_t* wsrc = p.w + tile * 512;
  const std::uint8_t* ssrc = p.w_scales + tile * kScaleRecord;
  const std::uint32_t wstage0 = sm.weights + warp * Cfg::kWarpStageBytes;
  auto issue_w = [&](int c) {  // lane 0; rows past N: no copy (the warp's rows
                               // are not stored)
    const std::uint32_t s = (seq + c) % kW, bar = sm.w_bar(warp, s);
    const std::uint32_t dst = wstage0 + s * Cfg::kWStageBytes;
    mbar_arrive_expect_tx(bar, tile_ok ? 512 + kScaleRecord : 0);
    if (tile_ok) {
      bulk_copy_g2s(dst, wsrc + static_cast<std::int64_t>(c) * 512, 512, bar);
      bulk_copy_g2s(dst + 512, ssrc + static_cast<std::int64_t>(c) * kScaleRecord, kScaleRecord,
                    bar);
    }
  };
  const std::uint32_t scale_off = 512 + (kNvfp4 ? lane * 2 : (g * 2 + t / 2) * 2);

  // Activation requests; rows past the expert's end are not copied (their B
  // columns only reach unstored outputs). Bulk: warp w's lanes own tokens
  // w * kN / 8 + lane. cp.async: thread owns 16-byte pieces tid + 256 i
  // (token (tid + 256 i) / 8, vector tid % 8).
  constexpr int kBulkTokPerWarp = kN / 8;
  constexpr int kPieces = Cfg::kActBulk ? 1 : Cfg::kPiecesPerThread;
  const char* arow[kPieces];
  std::uint32_t aoff[kPieces];
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int tok = Cfg::kActBulk ? warp * kBulkTokPerWarp + lane : (tid + 256 * i) / 8;
    const int row = row_begin + tok;
    const bool ok = tok < valid_rows && (!Cfg::kActBulk || lane < kBulkTokPerWarp);
    const std::int64_t src = ok ? (p.row_index ? p.row_index[row] : row) : 0;
    const int vec = Cfg::kActBulk ? 0 : tid % 8;
    arow[i] = ok ? reinterpret_cast<const char*>(p.a + src * p.lda) + 16 * vec : nullptr;
    aoff[i] = tok * Cfg::kStagePitch + 16 * vec;
  }
  // Chunk c (c >= chunks: nothing; cp.async still commits one group, so that
  // group j always holds chunk j of the unit).
  auto issue_act = [&](int c) {  // every thread
    const std::uint32_t s = (seq + c) % kA, bar = sm.act_bar(s);
    const std::uint32_t dst = sm.staging + s * Cfg::kStageBytes;
    if constexpr (Cfg::kActBulk) {
      if (c >= chunks) return;
      if (warp == 0 && lane == 0) mbar_arrive_expect_tx(bar, valid_rows * 128);
      if (arow[0] != nullptr) bulk_copy_g2s(dst + aoff[0], arow[0] + c * 128, 128, bar);
    } else {
      if (c < chunks) {
#pragma unroll
        for (int i = 0; i < kPieces; ++i)
          if (arow[i] != nullptr) cp_async16(dst + aoff[i], arow[i] + c * 128, true);
      }
      cp_async_commit();
    }
  };
  // cp.async: this thread's copies of all but the last kA - 2 issued chunks
  // have landed (a barrier must follow before other threads read them).
  auto act_wait = [&] {
    if constexpr (!Cfg::kActBulk) cp_async_wait<kA - 2>();
  };

  // Permute items of this thread (staging row -> swizzled, K-permuted slot).
  std::uint32_t src_off[kIPT], dst_off[kIPT];
  int axor[kIPT], ahf[kIPT];
  bool aon[kIPT];
#pragma unroll
  for (int j = 0; j < kIPT; ++j) {
    const StagingItem<Cfg> it(tid + j * Cfg::kThreads);
    aon[j] = it.tok < kN;  // rows >= kN are not read by this unit's wgmma
    src_off[j] = it.tok * Cfg::kStagePitch + 16 * it.hf + 32 * kT * it.tg;
    dst_off[j] = it.tok * 128 + it.tg * kT * 4;
    axor[j] = it.tok & 7;
    ahf[j] = it.hf;
  }
  auto permute = [&](int c, int slot) {  // chunk c -> slot, all threads
    const std::uint32_t s = (seq + c) % kA;
    if constexpr (Cfg::kActBulk) mbar_wait(sm.act_bar(s), ((seq + c) / kA) & 1);
    const std::uint32_t stage = sm.staging + s * Cfg::kStageBytes;
#pragma unroll
    for (int j = 0; j < kIPT; ++j) {
      if (!aon[j]) continue;
      uint4 v[kT];
#pragma unroll
      for (int i = 0; i < kT; ++i) v[i] = lds128(stage + src_off[j] + 32 * i);
      const std::uint32_t base = sm.slots + slot * Cfg::kSlotBytes + dst_off[j];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const std::uint32_t addr = base + (((4 * ahf[j] + w) ^ axor[j]) << 4);
        if constexpr (kT == 4)
          sts128(addr, word_of(v[0], w), word_of(v[1], w), word_of(v[2], w), word_of(v[3], w));
        else
          sts64(addr, word_of(v[0], w), word_of(v[1], w));
      }
    }
  };
  // This thread's shared stores -> async proxy (wgmma reads), and its shared
  // loads ordered before later bulk writes into the same bytes; then the
  // barrier publishes them.
  auto publish = [&] {
    if constexpr (Cfg::kFence) fence_proxy_async_smem();
  };

  float acc[kN / 8][4];
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[i][r] = 0.0f;

  if (lane == 0)
    for (int c = 0; c < kW - 1 && c < chunks; ++c) issue_w(c);
  for (int c = 0; c < kA; ++c) issue_act(c);
  act_wait();  // chunks 0 and 1 (kA groups issued)
  if constexpr (!Cfg::kActBulk) __syncthreads();
  permute(0, 0);
  publish();
  __syncthreads();

  std::uint32_t a[2][4][4];
  int slot = 0;  // slot of chunk c
  for (int c0 = 0; c0 < chunks; c0 += 2) {
#pragma unroll
    for (int ab = 0; ab < 2; ++ab) {
      const int c = c0 + ab;
      if (c < chunks) {  // CTA-uniform
        const std::uint32_t ws = (seq + c) % kW;
        mbar_wait(sm.w_bar(warp, ws), ((seq + c) / kW) & 1);
        const std::uint32_t wstage = wstage0 + ws * Cfg::kWStageBytes;
        const uint4 q = lds128(wstage + lane * 16);
        const std::uint32_t sc = lds_u16(wstage + scale_off);
        const std::uint32_t sc_lo = lut[sc & 0xFF], sc_hi = lut[sc >> 8];
        dequant_word(q.x, sc_lo, sc_hi, a[ab][0]);
        dequant_word(q.y, sc_lo, sc_hi, a[ab][1]);
        dequant_word(q.z, sc_lo, sc_hi, a[ab][2]);
        dequant_word(q.w, sc_lo, sc_hi, a[ab][3]);
        // Refills: weight stage of chunk c - 1 and staging of chunk c, both
        // read before the last barrier.
        if (lane == 0 && c + kW - 1 < chunks) issue_w(c + kW - 1);
        issue_act(c + kA);
#pragma unroll
        for (int i = 0; i < kN / 8; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
        wgmma_fence();
        const std::uint64_t desc = smem_desc_k_major_sw128(sm.slots + slot * Cfg::kSlotBytes);
#pragma unroll
        for (int j = 0; j < 4; ++j) WgmmaRS<kN>::run(acc, a[ab][j], desc + 2 * j, 1);
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < kN / 8; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
        wgmma_wait<1>();  // chunk c - 1 retired: its A registers and slot are
                          // free
        const int next = slot + 1 == Cfg::kSlots ? 0 : slot + 1;
        if (c + 1 < chunks) permute(c + 1, next);
        act_wait();  // chunk c + 2 (chunks up to c + kA issued), for the next
                     // iteration's permute
        publish();
        __syncthreads();
        slot = next;
      }
    }
  }
  wgmma_wait<0>();
  if constexpr (!Cfg::kActBulk) cp_async_wait<0>();  // the trailing (empty) groups
#pragma unroll
  for (int i = 0; i < kN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 4; ++r) fence_operand(acc[i][r]);
  __syncthreads();  // both warpgroups are done with the slots before the next
                    // unit fills them

  if (tile_ok) {
#pragma unroll
    for (int i = 0; i < kN / 8; ++i)
      store_tile<kEpi>(p, acc[i], e, rt, row_begin + 8 * i, row_end, g, t);
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
  if (warp == 0) {
    prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  }
  __syncthreads();

  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = tile_start[p.num_experts] * cta_row_tiles;
  const std::uint32_t chunks = p.k / 64;
  std::uint32_t seq = 0;  // chunks consumed so far (ring stage / mbarrier parity)
  for (int u = blockIdx.x; u < units; u += gridDim.x, seq += chunks) {
    // Expert-major: expert e owns units [tile_start[e], tile_start[e + 1]) x
    // cta_row_tiles, row tile major, token tile minor.
    int lo = 0, hi = p.num_experts - 1;  // largest e with tile_start[e] * rows tiles <= u
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_start[mid] * cta_row_tiles <= u)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int e = lo;
    const int tiles_e = tile_start[e + 1] - tile_start[e];
    const int local = u - tile_start[e] * cta_row_tiles;
    const int cta_rt = local / tiles_e, tt = local % tiles_e;
    const int row_begin = expert_offset(p, e) + tt * Cfg::kTokens;
    const int row_end = expert_offset(p, e + 1);
    const int rows = row_end - row_begin;
    if (!Cfg::kNarrowTails || rows > Cfg::kTokens / 2) {
      wgmma_unit<Cfg, Cfg::kTokens, kNvfp4, kEpi>(p, lut, sm, seq, e, cta_rt, row_begin, row_end);
    } else if (Cfg::kTokens / 4 >= 32 && rows <= Cfg::kTokens / 4) {
      wgmma_unit<Cfg, (Cfg::kTokens / 4 >= 32 ? Cfg::kTokens / 4 : 32), kNvfp4, kEpi>(
          p, lut, sm, seq, e, cta_rt, row_begin, row_end);
    } else {
      wgmma_unit<Cfg, Cfg::kTokens / 2, kNvfp4, kEpi>(p, lut, sm, seq, e, cta_rt, row_begin,
                                                      row_end);
    }
  }
}

// Host: launches the persistent grid (one CTA per SM: ~200 registers x 256
// threads) for Cfg. Returns the CUDA error of the attribute / occupancy calls
// or the launch.
template <typename Cfg, bool kNvfp4, int kEpi>
cudaError_t launch_w4a16_wgmma(const Params& params, std::int64_t m, int max_ctas,
                               cudaStream_t stream) {
  auto kernel = w4a16_wgmma_gemm_kernel<Cfg, kNvfp4, kEpi>;
  const int smem = Cfg::smem_bytes(params.num_experts);
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
  // Upper bound of the units: every expert adds at most one partial token tile.
  const std::int64_t token_tiles =
      (m + Cfg::kTokens - 1) / Cfg::kTokens + std::min<std::int64_t>(params.num_experts, m);
  const std::int64_t row_tiles = (params.n + Cfg::kRows - 1) / Cfg::kRows;
  std::int64_t grid =
      std::min<std::int64_t>(token_tiles * row_tiles, static_cast<std::int64_t>(per_sm) * sms);
  if (max_ctas > 0) grid = std::min<std::int64_t>(grid, max_ctas);
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, stream>>>(params);
  return cudaGetLastError();
}

// The library's wgmma tile (W4Tile::kWgmma; sm90_w4a16_wgmma_gemm.cu): format
// and epilogue dispatch, moekit::Error on a CUDA failure.
void w4a16_wgmma_launch(const W4A16GemmArgs& args, const Params& params);
// Whether w4a16_wgmma_launch runs the 128 x 256 configuration for these arguments (many rows per
// expert and enough shared memory); otherwise it runs 128 x 128.
bool w4a16_wgmma_runs_wide(const W4A16GemmArgs& args);

}  // namespace moekit::gemm::sm90_w4a16
