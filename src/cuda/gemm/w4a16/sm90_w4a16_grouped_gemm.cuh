// SM90 W4A16 grouped GEMM kernel (Marlin-like): 4-bit weights streamed once
// with 16-byte loads into a register ring, dequantized to bf16 in registers,
// tokens as the MMA's narrow N dimension (mma.sync m16n8k16 bf16, fp32
// accumulators), activations staged through a cp.async ring in shared memory,
// split-K across the warps of a CTA reduced in a fixed order. Weight layout:
// sm90_w4a16_weight_shuffle.cpp. Launcher: sm90_w4a16_grouped_gemm.cu.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/gemm/common/sm90_grouped_gemm_common.cuh"

namespace moekit::gemm::sm90::w4a16 {

// kWarpsM x kWarpsN x kWarpsK warps; each warp owns kTilesM 16-row tiles x
// kTilesN 8-token tiles and every kWarpsK-th 64-wide K chunk.
template <int kWarpsM_, int kWarpsN_, int kWarpsK_, int kTilesM_, int kTilesN_, int kStages_,
          bool kL2Prefetch_ = true>
struct TileConfig {
  static constexpr bool kL2Prefetch = kL2Prefetch_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kWarpsK = kWarpsK_;
  static constexpr int kTilesM = kTilesM_, kTilesN = kTilesN_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN * kWarpsK;
  static constexpr int kRows = 16 * kTilesM * kWarpsM;
  static constexpr int kTokens = 8 * kTilesN * kWarpsN;
  static constexpr int kStepK = 64 * kWarpsK;
  static constexpr int kRowBytes = kStepK * 2 + 16;  // +16: conflict-free 16-byte reads
  static constexpr int kStageBytes = kTokens * kRowBytes;
  static constexpr int kCopiesPerStage = kTokens * kStepK / 8;  // 16-byte cp.async per stage
  static constexpr int kCopiesPerThread = (kCopiesPerStage + kThreads - 1) / kThreads;
  static constexpr int kReduceBytes =
      (kWarpsK - 1) * kWarpsM * kWarpsN * kTilesM * kTilesN * 4 * 32 * 4;
  static constexpr int kRingBytes =
      kStages * kStageBytes > kReduceBytes ? kStages* kStageBytes : kReduceBytes;
  static constexpr int kLutBytes = 256 * 4;
  static int smem_bytes(int num_experts) {
    return kLutBytes + ((num_experts + 1) * 4 + 127) / 128 * 128 + kRingBytes;
  }
};


// ---- the kernel ----
// kSkipDequant: measurement only (benchmarks): feeds raw code words to the MMA,
// wrong results.
template <typename Cfg, bool kNvfp4, int kEpi, bool kSkipDequant = false>
__global__ void __launch_bounds__(Cfg::kThreads) w4a16_grouped_gemm_kernel(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  std::uint32_t* lut = reinterpret_cast<std::uint32_t*>(smem);
  int* tile_start = reinterpret_cast<int*>(smem + Cfg::kLutBytes);
  unsigned char* ring = smem + Cfg::kLutBytes + ((p.num_experts + 1) * 4 + 127) / 128 * 128;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wk = warp % Cfg::kWarpsK;
  const int wn = (warp / Cfg::kWarpsK) % Cfg::kWarpsN;
  const int wm = warp / (Cfg::kWarpsK * Cfg::kWarpsN);
  const int g = lane / 4, t = lane % 4;

  for (int i = tid; i < 256; i += Cfg::kThreads) lut[i] = scale_multiplier<kNvfp4>(i);
  // Token tiles per expert, prefix-summed: tile_start[e] .. tile_start[e + 1].
  if (warp == 0) {
    prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  }
  __syncthreads();

  const int total_tiles = tile_start[p.num_experts];
  const int row_tiles16 = p.n / 16;
  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = total_tiles * cta_row_tiles;
  const int chunks = p.k / 64;
  const int steps = (chunks + Cfg::kWarpsK - 1) / Cfg::kWarpsK;
  constexpr int kScaleRecord = kNvfp4 ? 64 : 32;
  const int scale_lane = kNvfp4 ? lane * 2 : (g * 2 + t / 2) * 2;
  const float unscale = 18446744073709551616.0f;  // 2^kUnscaleLog2
  static_assert(kUnscaleLog2 == 64, "unscale constant");

  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const int tt = u % total_tiles;
    const int cta_rt = u / total_tiles;
    const int e = expert_of_tile(tile_start, p.num_experts, tt);
    const int row_begin = expert_offset(p, e) + (tt - tile_start[e]) * Cfg::kTokens;
    const int row_end = expert_offset(p, e + 1);

    // Activation copies: thread's (token, 16-byte segment) pairs are the same
    // in every stage.
    const __nv_bfloat16* src_row[Cfg::kCopiesPerThread];
    std::uint32_t dst_off[Cfg::kCopiesPerThread];
    int seg_k[Cfg::kCopiesPerThread];
    bool copy_ok[Cfg::kCopiesPerThread];
#pragma unroll
    for (int j = 0; j < Cfg::kCopiesPerThread; ++j) {
      const int idx = tid + j * Cfg::kThreads;
      const int tok = idx / (Cfg::kStepK / 8), seg = idx % (Cfg::kStepK / 8);
      const int row = row_begin + tok;
      copy_ok[j] = idx < Cfg::kCopiesPerStage && row < row_end;
      const std::int64_t src = copy_ok[j] ? (p.row_index ? p.row_index[row] : row) : 0;
      src_row[j] = p.a + src * p.lda;
      dst_off[j] = smem_addr(ring) + tok * Cfg::kRowBytes + seg * 16;
      seg_k[j] = seg * 8;
      if (idx >= Cfg::kCopiesPerStage) dst_off[j] = smem_addr(ring);  // never issued
    }
    auto issue_stage = [&](int step, int slot) {
      if (step >= steps) return;  // uniform: nothing left to stage
#pragma unroll
      for (int j = 0; j < Cfg::kCopiesPerThread; ++j) {
        if (Cfg::kCopiesPerStage % Cfg::kThreads != 0 &&
            tid + j * Cfg::kThreads >= Cfg::kCopiesPerStage)
          continue;
        const int kk = step * Cfg::kStepK + seg_k[j];
        const bool ok = copy_ok[j] && kk < p.k;
        cp_async16(dst_off[j] + slot * Cfg::kStageBytes, ok ? src_row[j] + kk : p.a, ok);
      }
    };

    // Weight pointers of this warp's row tiles (lane-offset included); a chunk
    // is 512 bytes.
    const std::uint8_t* wptr[Cfg::kTilesM];
    const std::uint8_t* sptr[Cfg::kTilesM];
    bool tile_ok[Cfg::kTilesM];
#pragma unroll
    for (int i = 0; i < Cfg::kTilesM; ++i) {
      const int rt = cta_rt * (Cfg::kRows / 16) + wm * Cfg::kTilesM + i;
      tile_ok[i] = rt < row_tiles16;
      const std::int64_t tile =
          (static_cast<std::int64_t>(e) * row_tiles16 + (tile_ok[i] ? rt : 0)) * chunks;
      wptr[i] = p.w + tile * 512 + lane * 16;
      sptr[i] = p.w_scales + tile * kScaleRecord + scale_lane;
    }

    uint4 wring[Cfg::kStages][Cfg::kTilesM];
    std::uint32_t sring[Cfg::kStages][Cfg::kTilesM];
    auto load_w = [&](int step, uint4(&wr)[Cfg::kTilesM], std::uint32_t(&sr)[Cfg::kTilesM]) {
      const int c = step * Cfg::kWarpsK + wk;
      const bool ok = step < steps && c < chunks;
#pragma unroll
      for (int i = 0; i < Cfg::kTilesM; ++i) {
        wr[i] = load_weights<Cfg::kL2Prefetch>(wptr[i] + static_cast<std::int64_t>(c) * 512,
                                               ok && tile_ok[i]);
        sr[i] = load_scales<Cfg::kL2Prefetch>(sptr[i] + static_cast<std::int64_t>(c) * kScaleRecord,
                                              ok && tile_ok[i]);
      }
    };

    float acc[Cfg::kTilesM][Cfg::kTilesN][4];
#pragma unroll
    for (int i = 0; i < Cfg::kTilesM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kTilesN; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

#pragma unroll
    for (int st = 0; st < Cfg::kStages - 1; ++st) {
      issue_stage(st, st);
      cp_async_commit();
    }
#pragma unroll
    for (int st = 0; st < Cfg::kStages; ++st) load_w(st, wring[st], sring[st]);

    const std::uint32_t b_base =
        smem_addr(ring) + (wn * Cfg::kTilesN * 8 + g) * Cfg::kRowBytes + wk * 128 + t * 32;

    for (int s0 = 0; s0 < steps; s0 += Cfg::kStages) {
#pragma unroll
      for (int st = 0; st < Cfg::kStages; ++st) {
        const int s = s0 + st;
        if (s < steps) {
          cp_async_wait<Cfg::kStages - 2>();
          __syncthreads();
          issue_stage(s + Cfg::kStages - 1, (st + Cfg::kStages - 1) % Cfg::kStages);
          cp_async_commit();
          if (s * Cfg::kWarpsK + wk < chunks) {
            // Dequantize this warp's row tiles for the 4 k16 steps of its
            // chunk.
            std::uint32_t a[Cfg::kTilesM][4][4];
#pragma unroll
            for (int i = 0; i < Cfg::kTilesM; ++i) {
              const std::uint32_t sc_lo = lut[sring[st][i] & 0xFF];
              const std::uint32_t sc_hi = lut[sring[st][i] >> 8];
              if constexpr (kSkipDequant) {
                const std::uint32_t q[4] = {wring[st][i].x, wring[st][i].y, wring[st][i].z,
                                            wring[st][i].w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                  for (int r = 0; r < 4; ++r) a[i][j][r] = q[j] ^ (r == 0 ? sc_lo : sc_hi);
              } else {
                dequant_word(wring[st][i].x, sc_lo, sc_hi, a[i][0]);
                dequant_word(wring[st][i].y, sc_lo, sc_hi, a[i][1]);
                dequant_word(wring[st][i].z, sc_lo, sc_hi, a[i][2]);
                dequant_word(wring[st][i].w, sc_lo, sc_hi, a[i][3]);
              }
            }
            const std::uint32_t slot_base = b_base + st * Cfg::kStageBytes;
#pragma unroll
            for (int nt = 0; nt < Cfg::kTilesN; ++nt) {
              const uint4 b0 = lds128(slot_base + nt * 8 * Cfg::kRowBytes);
              const uint4 b1 = lds128(slot_base + nt * 8 * Cfg::kRowBytes + 16);
#pragma unroll
              for (int i = 0; i < Cfg::kTilesM; ++i) {
                mma_bf16(acc[i][nt], a[i][0], b0.x, b0.y);
                mma_bf16(acc[i][nt], a[i][1], b0.z, b0.w);
                mma_bf16(acc[i][nt], a[i][2], b1.x, b1.y);
                mma_bf16(acc[i][nt], a[i][3], b1.z, b1.w);
              }
            }
          }
          load_w(s + Cfg::kStages, wring[st], sring[st]);
        }
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: reuse it for the split-K reduction

    if constexpr (Cfg::kWarpsK > 1) {
      float* red = reinterpret_cast<float*>(ring);
      constexpr int kRegs = Cfg::kTilesM * Cfg::kTilesN * 4;
      const int mn = wm * Cfg::kWarpsN + wn;
      if (wk > 0) {
#pragma unroll
        for (int i = 0; i < Cfg::kTilesM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kTilesN; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const int reg = (i * Cfg::kTilesN + j) * 4 + r;
              red[(((wk - 1) * Cfg::kWarpsM * Cfg::kWarpsN + mn) * kRegs + reg) * 32 + lane] =
                  acc[i][j][r];
            }
      }
      __syncthreads();
      if (wk == 0) {
        for (int kw = 1; kw < Cfg::kWarpsK; ++kw) {  // fixed order: deterministic
#pragma unroll
          for (int i = 0; i < Cfg::kTilesM; ++i)
#pragma unroll
            for (int j = 0; j < Cfg::kTilesN; ++j)
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                const int reg = (i * Cfg::kTilesN + j) * 4 + r;
                acc[i][j][r] +=
                    red[(((kw - 1) * Cfg::kWarpsM * Cfg::kWarpsN + mn) * kRegs + reg) * 32 + lane];
              }
        }
      }
    }

    if (wk == 0) {
      const float scale = (p.alpha ? p.alpha[e] : 1.0f) * unscale;
      const float* bias = p.bias ? p.bias + static_cast<std::int64_t>(e) * p.n : nullptr;
#pragma unroll
      for (int i = 0; i < Cfg::kTilesM; ++i) {
        if (!tile_ok[i]) continue;
        const int rt = cta_rt * (Cfg::kRows / 16) + wm * Cfg::kTilesM + i;
#pragma unroll
        for (int j = 0; j < Cfg::kTilesN; ++j) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // token column 2t + h
            const int row = row_begin + (wn * Cfg::kTilesN + j) * 8 + 2 * t + h;
            if (row >= row_end) continue;
            const float rs = p.row_scale ? p.row_scale[row] : 1.0f;
            __nv_bfloat16* out = p.out + static_cast<std::int64_t>(row) * p.ldo;
            const float lo = acc[i][j][h] * scale, hi = acc[i][j][2 + h] * scale;
            if constexpr (kEpi == 0) {
              const int n0 = rt * 16 + g;
              out[n0] = __float2bfloat16_rn((lo + (bias ? bias[n0] : 0.0f)) * rs);
              out[n0 + 8] = __float2bfloat16_rn((hi + (bias ? bias[n0 + 8] : 0.0f)) * rs);
            } else {
              const int col = rt * 8 + g;
              const float gate = lo + (bias ? bias[col] : 0.0f);
              const float up = hi + (bias ? bias[p.n / 2 + col] : 0.0f);
              out[col] =
                  __float2bfloat16_rn(gated<kEpi>(gate, up, p.swiglu_alpha, p.swiglu_limit) * rs);
            }
          }
        }
      }
    }
    __syncthreads();  // before the next unit reuses the ring
  }
}

}  // namespace moekit::gemm::sm90::w4a16
