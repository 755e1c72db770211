// Weight codecs of the decode grouped GEMM (sm90_decode_grouped_gemm.cuh): how a warp finds,
// loads and unpacks one item (a 16-row weight tile x a 64-wide K chunk) into the A fragments of
// the chunk's four mma.sync m16n8k16 steps. The kernel owns everything else (units, the register
// ring, activations, split-K reduction, epilogue).
//
// A codec provides:
//   kTails        K past the last full chunk (K % 64 != 0) is masked; false: the launcher
//                 guarantees K % 64 == 0
//   kRowTails     rows past N (N % 16 == 8) are masked; false: N % 16 == 0
//   kUnscale      the epilogue's accumulator multiplier
//   kStageFence   the kernel ends each stage's basic block after its refill loads, so that ptxas
//                 issues them where they stand instead of sinking them past the next stages' MMAs
//                 (the bf16 codec, whose items are 4x the bytes: its loads' distance is its speed)
//   kSmemBytes    its shared-memory table (init_smem fills it before the kernel's first barrier)
//   lane_k(t), kHalfStride  where lane (g, t) finds its two 16-byte activation halves in a chunk:
//                 K lane_k(t) + kHalfStride h + [0, 8), h = 0, 1 (the same K its weight registers
//                 hold, in the word order of sm90_bf16_decode_fragments.hpp)
//   chunks(k), row_tiles(n)
//   Item          the registers of one item (one ring slot of one 16-row tile)
//   Cursor        set(p, e, rt0, lane): the unit's first 16-row tile rt0 of expert e;
//                 load<kL2Prefetch>(p, item, m, c, ok): tile rt0 + m, chunk c (ok = in range)
//   fragments(item, smem, a): a[s] = the A registers of step s
//   prefetch_unit(p, e, rt0, tiles, budget): an L2 prefetch of the unit's first weight bytes
//   kTma          the cursor loads through DecodeMaps::w (the kernel hands it &maps.w)
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/gemm/decode/sm90_bf16_decode_fragments.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_grouped_gemm.cuh"

namespace moekit::gemm::sm90::decode {

using sm90::Params;
using sm90::word_of;

// W4A16: NVFP4 / MXFP4 codes in the shuffled 512-byte-per-item layout with their scale records
// (sm90_w4a16_weight_shuffle.cpp); dequantized through a scale LUT in shared memory.
template <bool kNvfp4>
struct W4Codec {
  static constexpr bool kTails = false;
  static constexpr bool kRowTails = false;
  static constexpr bool kStageFence = false;
  static constexpr float kUnscale = 18446744073709551616.0f;  // 2^kUnscaleLog2
  static_assert(sm90::kUnscaleLog2 == 64, "unscale constant");
  static constexpr int kSmemBytes = 256 * 4;
  static constexpr int kScaleRecord = kNvfp4 ? 64 : 32;
  // The shuffle stores lane t's codes for K [16t, 16t + 16) (sm90_w4a16_weight_shuffle.cpp).
  static constexpr int kHalfStride = 8;
  __host__ __device__ static constexpr int lane_k(int t) { return 16 * t; }
  __host__ __device__ static constexpr int chunks(int k) { return k / 64; }
  __host__ __device__ static constexpr int row_tiles(int n) { return n / 16; }

  __device__ static void init_smem(unsigned char* smem, int tid, int threads) {
    auto* lut = reinterpret_cast<std::uint32_t*>(smem);
    for (int i = tid; i < 256; i += threads) lut[i] = sm90::scale_multiplier<kNvfp4>(i);
  }

  struct Item {
    uint4 codes;
    std::uint32_t scales;
  };

  // The unit's row tiles are consecutive: tile m's chunk c is at base + (m * chunks + c) * 512
  // (one base pointer instead of one per tile: fewer registers).
  struct Cursor {
    const std::uint8_t* codes;
    const std::uint8_t* scales;
    int chunks;
    __device__ void set(const Params& p, int e, int rt0, int lane) {
      chunks = p.k / 64;
      const int g = lane / 4, t = lane % 4;
      const int scale_lane = kNvfp4 ? lane * 2 : (g * 2 + t / 2) * 2;
      const std::int64_t tile = (static_cast<std::int64_t>(e) * (p.n / 16) + rt0) * chunks;
      codes = p.w + tile * 512 + lane * 16;
      scales = p.w_scales + tile * kScaleRecord + scale_lane;
    }
    template <bool kL2Prefetch>
    __device__ void load(const Params&, Item& it, int m, int c, bool ok) const {
      const std::int64_t item = static_cast<std::int64_t>(m) * chunks + c;
      // Not zero-filled: an invalid item (tile past N, chunk past K, past the last unit) is never
      // consumed by a stored output (sm90_decode_grouped_gemm.cuh).
      it.codes = sm90::load_weights<kL2Prefetch, false>(codes + item * 512, ok);
      it.scales = sm90::load_scales<kL2Prefetch, false>(scales + item * kScaleRecord, ok);
    }
  };

  __device__ static void fragments(const Item& it, const unsigned char* smem,
                                   std::uint32_t (&a)[4][4]) {
    const auto* lut = reinterpret_cast<const std::uint32_t*>(smem);
    const std::uint32_t sc_lo = lut[it.scales & 0xFF];
    const std::uint32_t sc_hi = lut[it.scales >> 8];
    sm90::dequant_word(it.codes.x, sc_lo, sc_hi, a[0]);
    sm90::dequant_word(it.codes.y, sc_lo, sc_hi, a[1]);
    sm90::dequant_word(it.codes.z, sc_lo, sc_hi, a[2]);
    sm90::dequant_word(it.codes.w, sc_lo, sc_hi, a[3]);
  }

  // The first K chunks of every tile (in the order the warps consume them), within `budget`.
  __device__ static void prefetch_unit(const Params& p, int e, int rt0, int tiles,
                                       std::int64_t budget) {
    const int chunks_k = p.k / 64;
    const std::int64_t fit = budget / (tiles * (512 + kScaleRecord));
    const int pc = fit < chunks_k ? static_cast<int>(fit) : chunks_k;
    const std::int64_t tile = (static_cast<std::int64_t>(e) * (p.n / 16) + rt0) * chunks_k;
    const bool scales_aligned = reinterpret_cast<std::uintptr_t>(p.w_scales) % 16 == 0;
    for (int m = 0; m < tiles && pc > 0; ++m) {
      const std::int64_t item = tile + static_cast<std::int64_t>(m) * chunks_k;
      sm90::l2_prefetch(p.w + item * 512, static_cast<std::uint32_t>(pc * 512));
      if (scales_aligned)
        sm90::l2_prefetch(p.w_scales + item * kScaleRecord,
                                static_cast<std::uint32_t>(pc * kScaleRecord));
    }
  }
};

// bf16 weights in the checkpoint layout [E, N, K] (row-major per expert, no re-layout): lane
// (g, t) loads the halves K 8t + 32h + [0, 8) (h = 0, 1) of rows g and g + 8 of the tile: each
// load instruction reads 64 contiguous bytes per row (two full 32-byte sectors), the two together
// the row's 128-byte line of the chunk. The register map: sm90_bf16_decode_fragments.hpp. Tails:
// N % 8 == 0 and K % 8 == 0 (whole 16-byte halves).
// kGated (GEMM1 with its activation in the epilogue, N = 2I, gate | up halves): tile rt's row g is
// gate row 8 rt + g and its row g + 8 the matching up row I + 8 rt + g, so one thread's
// accumulators hold both inputs of an output column (store_tile's gated epilogue); N % 16 == 0.
template <bool kGated>
struct Bf16CodecT {
  static constexpr bool kTails = true;
  static constexpr bool kRowTails = !kGated;
  static constexpr bool kStageFence = true;
  static constexpr float kUnscale = 1.0f;
  static constexpr int kSmemBytes = 0;
  static constexpr int kHalfStride = kBf16HalfStride;
  __host__ __device__ static constexpr int lane_k(int t) { return bf16_lane_k(t); }
  __host__ __device__ static constexpr int chunks(int k) { return (k + 63) / 64; }
  __host__ __device__ static constexpr int row_tiles(int n) { return (n + 15) / 16; }
  __device__ static void init_smem(unsigned char*, int, int) {}

  struct Item {
    uint4 half[2][2];  // [row g, row g + 8][K half]
  };

  struct Cursor {
    const __nv_bfloat16* row;  // row g of tile rt0 at K lane_k(t)
    int rows_left;             // N - (16 rt0 + g): rows g + 8 of tile m exist when 16m + 8 < it
    int k_left;                // K - lane_k(t): half h of chunk c exists when 64c + 32h < it
    __device__ void set(const Params& p, int e, int rt0, int lane) {
      const int g = lane / 4, t = lane % 4;
      const int row0 = rt0 * (kGated ? 8 : 16) + g;
      row = reinterpret_cast<const __nv_bfloat16*>(p.w) +
            (static_cast<std::int64_t>(e) * p.n + row0) * p.k + lane_k(t);
      rows_left = p.n - row0;  // gated: unused (no row tails)
      k_left = p.k - lane_k(t);
    }
    template <bool kL2Prefetch>
    __device__ void load(const Params& p, Item& it, int m, int c, bool ok) const {
      // Tile m + 1 starts 16 rows (gated: 8) further on; row g + 8 lies 8 rows (gated: I) after g.
      const __nv_bfloat16* r0 =
          row + static_cast<std::int64_t>(m) * (kGated ? 8 : 16) * p.k + c * 64;
      const __nv_bfloat16* r8 = r0 + static_cast<std::int64_t>(kGated ? p.n / 2 : 8) * p.k;
      const bool ok8 = ok && (kGated || m * 16 + 8 < rows_left);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool in_k = c * 64 + kHalfStride * h < k_left;
        it.half[0][h] = sm90::load_weights<kL2Prefetch>(
            reinterpret_cast<const std::uint8_t*>(r0 + kHalfStride * h), ok && in_k);
        it.half[1][h] = sm90::load_weights<kL2Prefetch>(
            reinterpret_cast<const std::uint8_t*>(r8 + kHalfStride * h), ok8 && in_k);
      }
    }
  };

  __device__ static void fragments(const Item& it, const unsigned char*, std::uint32_t (&a)[4][4]) {
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const WordSource src = bf16_a_source(s, r);
        a[s][r] = word_of(it.half[src.row8 ? 1 : 0][src.half], src.word);
      }
  }

  // The unit's first `budget` bytes (budget < 4 GiB): its rows are contiguous in memory (gated:
  // the gate rows; the up rows are as many bytes further on).
  __device__ static void prefetch_unit(const Params& p, int e, int rt0, int tiles,
                                       std::int64_t budget) {
    const int per_tile = kGated ? 8 : 16, last = kGated ? p.n / 2 : p.n;
    const int rows = min(tiles * per_tile, last - rt0 * per_tile);
    std::int64_t bytes = static_cast<std::int64_t>(rows) * p.k * 2;
    if (kGated) budget /= 2;
    if (bytes > budget) bytes = budget / 16 * 16;
    const auto* base = reinterpret_cast<const __nv_bfloat16*>(p.w) +
                       (static_cast<std::int64_t>(e) * p.n + rt0 * per_tile) * p.k;
    sm90::l2_prefetch(base, static_cast<std::uint32_t>(bytes));
    if (kGated)
      sm90::l2_prefetch(base + static_cast<std::int64_t>(p.n / 2) * p.k,
                              static_cast<std::uint32_t>(bytes));
  }
};
using Bf16Codec = Bf16CodecT<false>;

// The decode kernel's tensor maps (a __grid_constant__ kernel parameter); only the TMA codec
// below uses one, the others get a zeroed struct.
struct DecodeMaps {
  CUtensorMap w;
};

// bf16 weights like Bf16CodecT, but each item travels by TMA into a per-warp ring of kSlots
// shared-memory slots (one 16-row x 64-wide box of 2 KB, one mbarrier per slot) instead of
// 16-byte loads into registers: the load issue is one instruction of lane 0 per item, the
// bytes in flight are the ring (kSlots x 2 KB per warp) and the registers hold only the slot's
// number and phase. At consumption the lanes wait for the slot and read the same 16-byte
// halves Bf16CodecT loads from global memory (rows g / g + 8, K lane_k(t) + 32 h), so the A
// fragments, the MMAs and the results are bitwise those of Bf16CodecT. The tensor map (host:
// weight_maps in sm90_bf16_decode_grouped_gemm.cu) covers [E, N, K] in boxes {64, 16, 1} (plain)
// or {64, 8, 1} (gated: two per item, rows 0..7 of the slot are gate rows 8 rt.., rows 8..15 the
// matching up rows I + 8 rt..); rows past N and K past the end arrive as zeros.
// kSlots = the kernel's items in flight per warp (Cfg::kStages x Cfg::kTilesM): a slot is
// refilled only after the MMAs of its previous item, which read it through registers.
template <bool kGated, int kWarps, int kSlots>
struct Bf16TmaCodecT {
  static constexpr bool kTma = true;
  static constexpr bool kTails = true;
  static constexpr bool kRowTails = !kGated;
  static constexpr bool kStageFence = false;
  static constexpr float kUnscale = 1.0f;
  static constexpr int kItemBytes = 16 * 128;
  static constexpr int kRingBytes = kWarps * kSlots * kItemBytes;
  static constexpr int kSmemBytes = kRingBytes + kWarps * kSlots * 8;
  static constexpr int kHalfStride = kBf16HalfStride;
  static_assert(kSmemBytes % 128 == 0, "the kernel's tables follow the ring 128-byte aligned");
  __host__ __device__ static constexpr int lane_k(int t) { return bf16_lane_k(t); }
  __host__ __device__ static constexpr int chunks(int k) { return (k + 63) / 64; }
  __host__ __device__ static constexpr int row_tiles(int n) { return (n + 15) / 16; }
  __device__ static void init_smem(unsigned char* smem, int tid, int threads) {
    const std::uint32_t bars = cuda::sm90::smem_addr(smem) + kRingBytes;
    for (int i = tid; i < kWarps * kSlots; i += threads) cuda::sm90::mbar_init(bars + 8 * i, 1);
    cuda::sm90::fence_mbar_init();
  }

  struct Item {
    std::uint32_t slot;   // this warp's ring slot
    std::uint32_t phase;  // the parity of the slot's fill this item waits for
  };

  struct Cursor {
    const CUtensorMap* map = nullptr;
    std::uint32_t ring = 0, bars = 0;  // this warp's slots and their mbarriers
    std::uint32_t issued = 0;          // items this warp has loaded (slot = issued % kSlots)
    int e = 0, rt0 = 0;
    int half_rows = 0;  // gated: I = N / 2, where the up rows start
    bool issuer = false;
    __device__ void set(const Params& p, int expert, int first_tile, int lane) {
      extern __shared__ __align__(128) unsigned char smem[];
      const int warp = static_cast<int>(threadIdx.x) / 32;
      ring = cuda::sm90::smem_addr(smem) + warp * kSlots * kItemBytes;
      bars = cuda::sm90::smem_addr(smem) + kRingBytes + warp * kSlots * 8;
      e = expert;
      rt0 = first_tile;
      half_rows = p.n / 2;
      issuer = lane == 0;
    }
    template <bool>
    __device__ void load(const Params&, Item& it, int m, int c, bool ok) {
      const std::uint32_t s = issued % kSlots;
      it.slot = s;
      it.phase = (issued / kSlots) & 1u;
      ++issued;
      if (!issuer) return;
      const std::uint32_t bar = bars + 8 * s;
      if (!ok) {  // nothing to load: the phase completes empty (its item is never stored)
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
        return;
      }
      cuda::sm90::mbar_arrive_expect_tx(bar, kItemBytes);
      if constexpr (kGated) {  // gate rows 8 (rt0 + m).. over the matching up rows I + 8 (rt0 + m)
        const int row = 8 * (rt0 + m);
        cuda::sm90::tma_load_3d(ring + s * kItemBytes, map, c * 64, row, e, bar);
        cuda::sm90::tma_load_3d(ring + s * kItemBytes + kItemBytes / 2, map, c * 64,
                                half_rows + row, e, bar);
      } else
        cuda::sm90::tma_load_3d(ring + s * kItemBytes, map, c * 64, (rt0 + m) * 16, e, bar);
    }
  };

  __device__ static void fragments(const Item& it, const unsigned char* smem,
                                   std::uint32_t (&a)[4][4]) {
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    const int g = lane / 4, t = lane % 4;
    const int slot = warp * kSlots + static_cast<int>(it.slot);
    cuda::sm90::mbar_wait(cuda::sm90::smem_addr(smem) + kRingBytes + 8 * slot, it.phase);
    const unsigned char* base = smem + slot * kItemBytes + 2 * lane_k(t);
    typename Bf16CodecT<kGated>::Item item;  // the halves the register ring would have loaded
#pragma unroll
    for (int r8 = 0; r8 < 2; ++r8)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        item.half[r8][h] =
            *reinterpret_cast<const uint4*>(base + (g + 8 * r8) * 128 + 2 * kHalfStride * h);
    Bf16CodecT<kGated>::fragments(item, smem, a);
  }

  __device__ static void prefetch_unit(const Params& p, int e, int rt0, int tiles,
                                       std::int64_t budget) {
    Bf16CodecT<kGated>::prefetch_unit(p, e, rt0, tiles, budget);
  }
};

}  // namespace moekit::gemm::sm90::decode
