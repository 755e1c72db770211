// SM90 W4A16 grouped GEMM, decode path with the weights streamed by the bulk-copy engine
// (2026-12-01b): the same work split as the register-ring decode kernel
// (sm90_w4a16_decode_gemm.cuh: units of kRows weight rows x kTokens tokens x all of K, K split
// over the kWarpsK warps of a CTA or the CTAs of a cluster, reduced once per unit in a fixed
// order), but each warp's weight and scale bytes go global -> shared memory through
// `cp.async.bulk` into a per-warp ring of kStages stages, completed on one mbarrier per stage.
//
// Why: the register ring holds at most ~2 items (2 KB) per warp in flight, so the bytes in
// flight per SM are bounded by registers (~32 KB at 16 warps per SM); at ~4 TB/s and a loaded
// latency of ~1-2 us an SM needs ~30-60 KB in flight (Little's law). A shared-memory ring of
// kStages x kTilesM x kChunks x 576 bytes per warp keeps (kStages - 1) stages in flight without
// registers, and one bulk copy moves kChunks consecutive 512-byte chunks of a 16-row tile (the
// shuffled layout stores a row tile's K chunks contiguously), so the copy instructions are few.
//
// K split: warp slot kw of the unit takes the CONTIGUOUS chunk range [kw * P, kw * P + P) (P =
// ceil(chunks / K-slots); the register kernel interleaves chunks instead), so a stage is
// kChunks consecutive chunks of each row tile. Every warp walks the same number of stages per
// unit (empty stages complete their mbarrier phase with 0 bytes), so the unit-end barrier is
// uniform. The ring runs across unit boundaries. A warp refills the stage it has just consumed
// (same warp: program order + __syncwarp order the lanes' shared-memory reads before the
// async-proxy writes). Activations stay in a 2-stage register ring (L2-resident).
//
// Requires w_scales 16-byte aligned (bulk copies move 16-byte multiples from 16-byte aligned
// addresses: scale records are 64 / 32 bytes, a tile's records contiguous); the launcher runs
// the register kernel otherwise.
#pragma once

#include "sm90_w4a16_decode_gemm.cuh"
#include "sm90_w4a16_grouped_gemm.cuh"
#include "sm90_w4a16_wgmma_ops.cuh"

namespace moekit::gemm::sm90_w4a16 {

template <int kWarpsK_, int kTilesM_, int kTilesN_, int kChunks_, int kStages_, int kMinBlocks_>
struct BulkDecodeConfig {
  static constexpr bool kBulk = true;
  static constexpr int kMinBlocks = kMinBlocks_;  // __launch_bounds__ occupancy target
  static constexpr int kWarpsK = kWarpsK_, kTilesM = kTilesM_, kTilesN = kTilesN_;
  static constexpr int kChunks = kChunks_;  // 64-wide K chunks per stage and row tile
  static constexpr int kStages = kStages_;  // per-warp ring depth (stages)
  static constexpr int kThreads = 32 * kWarpsK;
  static constexpr int kRows = 16 * kTilesM;
  static constexpr int kTokens = 8 * kTilesN;
  static constexpr int kAccRegs = kTilesM * kTilesN * 4;
  static constexpr int kLutBytes = 256 * 4;
  // Stage: codes [kTilesM][kChunks][512 B], then scales [kTilesM][kChunks][64 B] (MXFP4 records
  // are 32 B: the same offsets with half of each record slot used).
  static constexpr int kCodeBytes = kTilesM * kChunks * 512;
  static constexpr int kStageBytes = kCodeBytes + kTilesM * kChunks * 64;
  static constexpr int kRingBytes = kWarpsK * kStages * kStageBytes;
  static constexpr int kRedBytes = 2 * kWarpsK * kAccRegs * 32 * 4;  // double-buffered
  static constexpr int kBarBytes = (kWarpsK * kStages * 8 + 127) / 128 * 128;
  static_assert(kStages >= 2, "ring depth");
  static int smem_bytes(int num_experts) {
    return kLutBytes + kRingBytes + kRedBytes + kBarBytes + (num_experts + 1) * 4;
  }
};

// Shared-memory loads that return 0 when `valid` is false (one asm each, predicated inside: the
// stage body stays one basic block, so the compiler interleaves the row tiles' chains).
__device__ __forceinline__ uint4 lds128_or_zero(std::uint32_t addr, bool valid) {
  uint4 v;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n"
      "mov.b32 %0, 0;\nmov.b32 %1, 0;\nmov.b32 %2, 0;\nmov.b32 %3, 0;\n"
      "@p ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "r"(addr), "r"(static_cast<int>(valid)));
  return v;
}
__device__ __forceinline__ std::uint32_t lds16_or_zero(std::uint32_t addr, bool valid) {
  unsigned short v;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %2, 0;\nmov.u16 %0, 0;\n"
      "@p ld.shared.u16 %0, [%1];\n}\n"
      : "=h"(v)
      : "r"(addr), "r"(static_cast<int>(valid)));
  return v;
}

// kSkipCompute: measurement only (variant sweep): waits for every stage but neither reads nor
// multiplies it: the streaming rate of the copies alone; wrong results.
template <typename Cfg, bool kNvfp4, int kEpi, bool kPdl = false, bool kSkipCompute = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    w4a16_bulk_decode_gemm_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  std::uint32_t* lut = reinterpret_cast<std::uint32_t*>(smem);
  unsigned char* ring = smem + Cfg::kLutBytes;
  float* red = reinterpret_cast<float*>(ring + Cfg::kRingBytes);
  unsigned char* bars = ring + Cfg::kRingBytes + Cfg::kRedBytes;
  int* tile_start = reinterpret_cast<int*>(bars + Cfg::kBarBytes);
  const int tid = threadIdx.x, lane = tid % 32, wk = tid / 32;
  const int g = lane / 4, t = lane % 4;
  // This warp's ring and mbarriers.
  const std::uint32_t ring_base = smem_addr(ring) + wk * Cfg::kStages * Cfg::kStageBytes;
  const std::uint32_t bar_base = smem_addr(bars) + wk * Cfg::kStages * 8;

  if constexpr (kPdl) pdl_launch_dependents();
  for (int i = tid; i < 256; i += Cfg::kThreads) lut[i] = scale_multiplier<kNvfp4>(i);
  if (wk == 0) prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  if (lane == 0) {
    for (int st = 0; st < Cfg::kStages; ++st) mbar_init(bar_base + st * 8, 1);
    fence_mbar_init();
  }
  __syncthreads();

  const int total_tiles = tile_start[p.num_experts];
  const int row_tiles16 = p.n / 16;
  const int cta_row_tiles = (row_tiles16 + Cfg::kTilesM - 1) / Cfg::kTilesM;
  const int units = total_tiles * cta_row_tiles;
  const int csize = static_cast<int>(cluster_reg_nctarank());
  const int crank = static_cast<int>(cluster_reg_ctarank());
  const int cid = static_cast<int>(blockIdx.x) / csize;
  const int nclusters = static_cast<int>(gridDim.x) / csize;
  if (cid >= units) return;  // uniform over the cluster (no copy was issued)
  const int my_units = (units - 1 - cid) / nclusters + 1;
  const int chunks = p.k / 64;
  const int ksplit = csize * Cfg::kWarpsK;
  const int kw = crank * Cfg::kWarpsK + wk;
  const int per_warp = (chunks + ksplit - 1) / ksplit;  // contiguous chunks per K slot
  const int c_begin = min(chunks, kw * per_warp);
  const int c_end = min(chunks, c_begin + per_warp);
  const int spu = (per_warp + Cfg::kChunks - 1) / Cfg::kChunks;  // stages per unit (all warps)
  const int items = my_units * spu;
  constexpr int kScaleRecord = kNvfp4 ? 64 : 32;
  const int scale_lane = kNvfp4 ? lane * 2 : (g * 2 + t / 2) * 2;

  struct Unit {
    int e, row_begin, row_end, rt0;
  };
  auto decode_unit = [&](int i) {
    const int u = cid + i * nclusters;
    const int tt = u % total_tiles;
    int lo = 0, hi = p.num_experts - 1;  // largest e with tile_start[e] <= tt
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (tile_start[mid] <= tt)
        lo = mid;
      else
        hi = mid - 1;
    }
    Unit un;
    un.e = lo;
    un.row_begin = expert_offset(p, lo) + (tt - tile_start[lo]) * Cfg::kTokens;
    un.row_end = expert_offset(p, lo + 1);
    un.rt0 = (u / total_tiles) * Cfg::kTilesM;
    return un;
  };
  // Chunks of stage s of a unit for this warp: [c_begin + s * kChunks, + count).
  auto stage_count = [&](int s) {
    return max(0, min(Cfg::kChunks, c_end - (c_begin + s * Cfg::kChunks)));
  };

  // ---- producer cursor (lane 0 issues; every lane tracks it: uniform control flow) ----
  int ld_unit = 0, ld_s = 0, ld_slot = 0;
  const std::uint8_t* wtile = nullptr;  // the unit's first row tile, chunk 0
  const std::uint8_t* stile = nullptr;
  int ld_tiles = 0;  // row tiles of the unit inside N
  auto set_load_unit = [&](int i) {
    const Unit un = decode_unit(i);
    ld_tiles = min(Cfg::kTilesM, row_tiles16 - un.rt0);
    const std::int64_t tile = (static_cast<std::int64_t>(un.e) * row_tiles16 + un.rt0) * chunks;
    wtile = p.w + tile * 512;
    stile = p.w_scales + tile * kScaleRecord;
  };
  // One stage: lane 0 arms the mbarrier with the byte count, then lanes 2m (codes of row tile m)
  // and 2m + 1 (its scales) each issue one bulk copy (ptxas runs per-lane bulk copies one lane at
  // a time, but the lanes compute their addresses in parallel: about half the instructions of one
  // lane issuing all of them).
  auto issue_stage = [&]() {
    const int cnt = stage_count(ld_s);
    const std::uint32_t bar = bar_base + ld_slot * 8;
    if (lane == 0)
      mbar_arrive_expect_tx(bar, static_cast<std::uint32_t>(cnt * ld_tiles * (512 + kScaleRecord)));
    __syncwarp();
    if (cnt > 0 && lane < 2 * ld_tiles) {
      const int m = lane / 2;
      const std::int64_t item = static_cast<std::int64_t>(m) * chunks + c_begin + ld_s * Cfg::kChunks;
      const std::uint32_t dst = ring_base + ld_slot * Cfg::kStageBytes;
      if (lane % 2 == 0)
        bulk_copy_g2s(dst + m * Cfg::kChunks * 512, wtile + item * 512,
                      static_cast<std::uint32_t>(cnt * 512), bar);
      else
        bulk_copy_g2s(dst + Cfg::kCodeBytes + m * Cfg::kChunks * 64, stile + item * kScaleRecord,
                      static_cast<std::uint32_t>(cnt * kScaleRecord), bar);
    }
    if (++ld_slot == Cfg::kStages) ld_slot = 0;
    if (++ld_s == spu) {
      ld_s = 0;
      if (++ld_unit < my_units) set_load_unit(ld_unit);
    }
  };
  set_load_unit(0);
  // Weights first: they do not depend on the previous kernel (PDL precondition).
  for (int st = 0; st < Cfg::kStages && st < items; ++st) issue_stage();
  if constexpr (kPdl) pdl_wait();

  // ---- activation cursor: one stage ahead of compute, 2-stage register ring ----
  int x_unit = 0, x_s = 0;
  const __nv_bfloat16* xptr[Cfg::kTilesN];
  bool x_ok[Cfg::kTilesN];
  auto set_x_unit = [&](int i) {
    const Unit un = decode_unit(i);
#pragma unroll
    for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
      const int row = un.row_begin + nt * 8 + g;
      x_ok[nt] = row < un.row_end;
      const std::int64_t src = x_ok[nt] ? (p.row_index ? p.row_index[row] : row) : 0;
      xptr[nt] = p.a + src * p.lda + t * 16;
    }
  };
  using XStage = uint4[Cfg::kChunks][Cfg::kTilesN][2];
  auto load_x = [&](XStage& xr) {
    const int c0 = c_begin + x_s * Cfg::kChunks;
    const bool live = x_unit < my_units;
#pragma unroll
    for (int j = 0; j < Cfg::kChunks; ++j) {
      const bool ok = live && c0 + j < c_end;
#pragma unroll
      for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
        xr[j][nt][0] = load_activation(xptr[nt] + (c0 + j) * 64, ok && x_ok[nt]);
        xr[j][nt][1] = load_activation(xptr[nt] + (c0 + j) * 64 + 8, ok && x_ok[nt]);
      }
    }
    if (++x_s == spu) {
      x_s = 0;
      if (++x_unit < my_units) set_x_unit(x_unit);
    }
  };
  set_x_unit(0);
  XStage xring[2];
  load_x(xring[0]);

  float acc[Cfg::kTilesM][Cfg::kTilesN][4];
#pragma unroll
  for (int m = 0; m < Cfg::kTilesM; ++m)
#pragma unroll
    for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[m][nt][r] = 0.0f;
  int cu_unit = 0, cu_s = 0, cu_slot = 0;
  std::uint32_t cu_phase = 0;

  // One stage: xc = its activations, xn = the next stage's (loaded here first).
  auto step = [&](XStage& xc, XStage& xn) {
    load_x(xn);
    const int cnt = stage_count(cu_s);
    const std::uint32_t slot = ring_base + cu_slot * Cfg::kStageBytes;
    mbar_wait(bar_base + cu_slot * 8, cu_phase);
    if (!kSkipCompute && cnt > 0) {
      // All of the stage's shared-memory loads first (the asm statements keep program order),
      // then the dequant / MMA chains of the row tiles, interleaved by the compiler. Chunks past
      // cnt (a partial last stage) read as zero codes with scale byte 0 (a finite multiplier):
      // they add exact zeros. Row tiles past N compute on stale data and are not stored.
      uint4 wv[Cfg::kChunks][Cfg::kTilesM];
      std::uint32_t sv[Cfg::kChunks][Cfg::kTilesM];
#pragma unroll
      for (int j = 0; j < Cfg::kChunks; ++j)
#pragma unroll
        for (int m = 0; m < Cfg::kTilesM; ++m) {
          wv[j][m] = lds128_or_zero(slot + (m * Cfg::kChunks + j) * 512 + lane * 16, j < cnt);
          sv[j][m] = lds16_or_zero(
              slot + Cfg::kCodeBytes + m * Cfg::kChunks * 64 + j * kScaleRecord + scale_lane,
              j < cnt);
        }
#pragma unroll
      for (int j = 0; j < Cfg::kChunks; ++j) {
#pragma unroll
        for (int m = 0; m < Cfg::kTilesM; ++m) {
          const std::uint32_t sc_lo = lut[sv[j][m] & 0xFF];
          const std::uint32_t sc_hi = lut[sv[j][m] >> 8];
          std::uint32_t a[4][4];
          dequant_word(wv[j][m].x, sc_lo, sc_hi, a[0]);
          dequant_word(wv[j][m].y, sc_lo, sc_hi, a[1]);
          dequant_word(wv[j][m].z, sc_lo, sc_hi, a[2]);
          dequant_word(wv[j][m].w, sc_lo, sc_hi, a[3]);
#pragma unroll
          for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
            const uint4 b0 = xc[j][nt][0], b1 = xc[j][nt][1];
            mma_bf16(acc[m][nt], a[0], b0.x, b0.y);
            mma_bf16(acc[m][nt], a[1], b0.z, b0.w);
            mma_bf16(acc[m][nt], a[2], b1.x, b1.y);
            mma_bf16(acc[m][nt], a[3], b1.z, b1.w);
          }
        }
      }
    }
    // The slot's shared-memory reads are done (their values fed the MMAs above): refill it.
    __syncwarp();
    if (ld_unit < my_units) issue_stage();
    if (++cu_slot == Cfg::kStages) {
      cu_slot = 0;
      cu_phase ^= 1u;
    }
    if (++cu_s < spu) return;
    // Unit end (uniform across the cluster): reduce over K warps, epilogue by warp 0 of rank 0.
    cu_s = 0;
    float* buf = red + (cu_unit & 1) * (Cfg::kWarpsK * Cfg::kAccRegs * 32);
    if (Cfg::kWarpsK > 1 || csize > 1) {
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
    if (wk == 0 && crank == 0) {
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
          for (int m = 0; m < Cfg::kTilesM; ++m) {
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
          store_tile<kEpi>(p, acc[m][nt], un.e, un.rt0 + m, un.row_begin + nt * 8, un.row_end, g,
                           t);
      }
    }
#pragma unroll
    for (int m = 0; m < Cfg::kTilesM; ++m)
#pragma unroll
      for (int nt = 0; nt < Cfg::kTilesN; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[m][nt][r] = 0.0f;
    ++cu_unit;
  };

  for (int q = 0; q < items; q += 2) {
    step(xring[0], xring[1]);
    if (q + 1 < items) step(xring[1], xring[0]);
  }
  // No CTA may exit while rank 0 can still read its shared memory.
  if (csize > 1) cluster_barrier();
}

}  // namespace moekit::gemm::sm90_w4a16
