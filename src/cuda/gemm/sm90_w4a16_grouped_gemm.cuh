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

#include "cuda/activation/gated_math.cuh"
#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/runtime/sorted_search.cuh"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::gemm::sm90_w4a16 {

// The weight dequant yields e2m1 * 2^-126 (bit placement), the scale multiplier
// is scale * 2^(126 - kUnscaleLog2); the epilogue multiplies the fp32
// accumulator by 2^kUnscaleLog2. 64 keeps every NVFP4 product (|e2m1 * e4m3| in
// [2^-10, 2688]) a normal bf16.
constexpr int kUnscaleLog2 = 64;

struct Params {
  const std::int32_t* expert_offsets;
  const __nv_bfloat16* a;
  std::int64_t lda;
  const std::int32_t* row_index;
  const std::uint8_t* w;
  const std::uint8_t* w_scales;
  const float* alpha;
  const float* bias;
  const float* row_scale;
  __nv_bfloat16* out;
  std::int64_t ldo;
  int num_experts;
  int n;
  int k;
  float swiglu_alpha;
  float swiglu_limit;
  int m;  // rows; used when expert_offsets is null (dense: one expert, rows [0, m))
  // Decode kernel only (sm90_decode_grouped_gemm.cuh): the fused routing of DecodeRouting
  // (moekit/gemm/decode_routing.hpp); topk_ids null = off.
  const std::int32_t* topk_ids;
  int top_k;
  int a_by_token;
  __nv_bfloat16* reduce_out;
  const float* topk_weights;
  const float* reduce_bias;
  int* counters;
  int* clear;
  int clear_count;
  // The wgmma kernel's epilogue only: out in the wgmma K order (W4KOrder::kWgmma).
  int out_wgmma_k;
};

// The kernel parameters of a 4-bit grouped GEMM's arguments (W4A16GemmArgs, W4A8GemmArgs: the
// same field names; W4A8 has no alpha), lda / ldo resolved by the launcher; the fused routing's
// fields stay zero (set_decode_routing).
template <typename Args>
Params grouped_gemm_params(const Args& args, std::int64_t lda, std::int64_t ldo) {
  Params p{};
  p.expert_offsets = args.expert_offsets;
  p.a = static_cast<const __nv_bfloat16*>(args.a);
  p.lda = lda;
  p.row_index = args.row_index;
  p.w = args.w;
  p.w_scales = args.w_scales;
  if constexpr (requires { args.alpha; }) p.alpha = args.alpha;
  p.bias = args.bias;
  p.row_scale = args.row_scale;
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.ldo = ldo;
  p.num_experts = args.num_experts;
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  p.swiglu_alpha = args.swiglu_alpha;
  p.swiglu_limit = args.swiglu_limit;
  p.m = static_cast<int>(args.m);
  if constexpr (requires { args.out_order; }) p.out_wgmma_k = args.out_order == W4KOrder::kWgmma;
  return p;
}

// Programmatic dependent launch (PDL, decode kernel with kPdl).
// pdl_launch_dependents lets the next kernel on the stream launch once all CTAs
// of this grid have issued it (the grids are persistent, at most one CTA per
// slot: an early dependent only takes slots this grid leaves free); a grid
// that never issues it triggers when its CTAs exit. pdl_wait returns once the
// previous kernel has completed and its writes are visible.
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
// Asynchronous L2 prefetch of [p, p + bytes) (p 16-byte aligned, bytes % 16 == 0).
__device__ __forceinline__ void l2_prefetch(const void* p, std::uint32_t bytes) {
  constexpr std::uint32_t kPiece = 32768;
  const char* c = static_cast<const char*>(p);
  for (std::uint32_t off = 0; off < bytes; off += kPiece) {
    const std::uint32_t n = bytes - off < kPiece ? bytes - off : kPiece;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(c + off), "r"(n) : "memory");
  }
}

// expert_offsets[e], or the dense layer's {0, m} when there is no offsets array.
__device__ __forceinline__ int expert_offset(const Params& p, int e) {
  return p.expert_offsets ? p.expert_offsets[e] : (e == 0 ? 0 : p.m);
}

// Token tiles of kTokens rows per expert, prefix-summed by one warp (lane = its lane):
// tile_start[e] .. tile_start[e + 1] are expert e's tiles; tile_start[E] is the total. The caller
// synchronizes before reading tile_start.
template <int kTokens>
__device__ __forceinline__ void prefix_token_tiles(const Params& p, int lane, int* tile_start) {
  int carry = 0;
  if (lane == 0) tile_start[0] = 0;
  for (int base = 0; base < p.num_experts; base += 32) {
    const int e = base + lane;
    const int rows = e < p.num_experts ? expert_offset(p, e + 1) - expert_offset(p, e) : 0;
    int incl = (rows + kTokens - 1) / kTokens;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
      if (lane >= d) incl += v;
    }
    if (e < p.num_experts) tile_start[e + 1] = carry + incl;
    carry += __shfl_sync(0xFFFFFFFFu, incl, 31);
  }
}

// Unit u of a wgmma kernel's persistent grid (W4A16 / W4A8). Units are (expert, 128-row tile,
// token tile), expert-major: expert e owns units [tile_start[e], tile_start[e + 1]) x
// cta_row_tiles, row tile major, token tile minor, so one wave of the grid shares the expert's
// activations and each weight tile through L2. Empty experts share their successor's start and
// lose the tie.
struct WgmmaUnit {
  int e, cta_rt, row_begin, row_end;
};
template <int kTokens>
__device__ __forceinline__ WgmmaUnit wgmma_unit_at(const Params& p, const int* tile_start,
                                                   int cta_row_tiles, int u) {
  // The largest e with tile_start[e] * cta_row_tiles <= u, i.e. tile_start[e] <= u / row tiles.
  const int e = cuda::last_at_most(tile_start, p.num_experts, u / cta_row_tiles);
  const int tiles_e = tile_start[e + 1] - tile_start[e];
  const int local = u - tile_start[e] * cta_row_tiles;
  const int cta_rt = local / tiles_e, tt = local % tiles_e;
  const int row_begin = expert_offset(p, e) + tt * kTokens;
  const int row_end = expert_offset(p, e + 1);
  return {e, cta_rt, row_begin, row_end};
}

// Host: the expected rows per active expert of m routed rows (uniform routing: m spread over
// min(E, m) experts), what the 4-bit launchers pick their tiles by.
inline std::int64_t rows_per_active_expert(std::int64_t m, int num_experts) {
  const std::int64_t active = std::max<std::int64_t>(1, std::min<std::int64_t>(num_experts, m));
  return (m + active - 1) / active;
}
// The W4A16 wgmma tile's token tiles (W4A16GemmArgs::wgmma_tokens, WgmmaConfig).
__host__ __device__ constexpr bool is_wgmma_token_tile(int tokens) {
  return tokens == 32 || tokens == 128 || tokens == 160 || tokens == 256;
}
// Host: an upper bound of the units of a persistent grouped kernel with token tiles of `tokens`
// rows and weight tiles of `rows` rows: every expert adds at most one partial token tile.
inline std::int64_t grouped_units_bound(std::int64_t m, int num_experts, std::int64_t n, int tokens,
                                        int rows) {
  const std::int64_t token_tiles =
      (m + tokens - 1) / tokens + std::min<std::int64_t>(num_experts, m);
  return token_tiles * ((n + rows - 1) / rows);
}

// The expert of token tile tt: the largest e with tile_start[e] <= tt (binary search over the
// prefix of prefix_token_tiles; empty experts share their successor's start and lose the tie).
__device__ __forceinline__ int expert_of_tile(const int* tile_start, int num_experts, int tt) {
  return cuda::last_at_most(tile_start, num_experts, tt);
}

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

// ---- device helpers ----
using cuda::sm90::smem_addr;

__device__ __forceinline__ void cp_async16(std::uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: zero-fill (rows past the expert's end, K tail)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// kL2Prefetch: ask L2 to fetch the whole 256-byte block (the scale records of
// 4-8 consecutive chunks of a row tile are contiguous, so one DRAM burst serves
// the next loads). kZeroFill: an invalid load reads zero; false: one predicated load and no
// register clears, an invalid load's registers keep whatever they held (for the decode kernel's
// W4A16 items, whose invalid loads are never consumed: rows past N are not stored, chunks past K
// and items past the last unit are not computed).
template <bool kL2Prefetch, bool kZeroFill = true>
__device__ __forceinline__ uint4 load_weights(const std::uint8_t* p, bool valid) {
  uint4 v;
  if constexpr (kZeroFill) v = make_uint4(0, 0, 0, 0);
  if (valid) {
    if constexpr (kL2Prefetch)
      asm volatile(
          "ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, "
          "%3}, [%4];\n"
          : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
          : "l"(p));
    else
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p));
  }
  return v;
}
template <bool kL2Prefetch, bool kZeroFill = true>
__device__ __forceinline__ std::uint32_t load_scales(const std::uint8_t* p, bool valid) {
  unsigned short v;  // kZeroFill false: the caller takes 16 bits of whatever it holds
  if constexpr (kZeroFill) v = 0;
  if (valid) {
    if constexpr (kL2Prefetch)
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
    else
      asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
  }
  return v;
}

__device__ __forceinline__ uint4 lds128(std::uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// Word w (0..3, a compile-time constant after unrolling) of a 16-byte register vector.
__device__ __forceinline__ std::uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}

__device__ __forceinline__ std::uint32_t bf16x2_mul(std::uint32_t a, std::uint32_t b) {
  std::uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// One 32-bit word of 8 e2m1 codes -> the four bf16x2 A registers of one k16
// step (a0: row g, a1: row g + 8, a2: row g, a3: row g + 8). Each register is
// sign | exponent | mantissa bits placed so that the bf16 equals
// e2m1 * 2^-126 (kTargetBits: sign 15, e1 e0 m at 8..6, in both halves; code
// 0.5 becomes a bf16 subnormal, bf16 multiplies keep subnormals). The offline
// shuffle stores the bits so that a left rotation by 0, 4, 10 lines up a0, a1,
// a2 with kTargetBits (three disjoint rotations of the pattern), and a3 is the
// rest: bit 6 after a rotation by 6, bits 15, 8, 7 after one by 14 (searched
// exhaustively; a fourth disjoint rotation does not exist). 9 integer ops per
// word instead of 15.
constexpr std::uint32_t kTargetBits = 0x81C081C0u;  // bits 6, 7, 8, 15 of each half
constexpr std::uint32_t kA3LowBits = 0x00400040u;   // bit 6 of each half (rotation 6)
constexpr int kRotation1 = 4, kRotation2 = 10;      // a1, a2 (a0: none)
constexpr int kA3HighRotation = 14;                 // a3's bits 7, 8, 15
constexpr int kA3LowRotation = 6;                   // a3's bit 6

__device__ __forceinline__ std::uint32_t rotl(std::uint32_t x, int r) {
  return __funnelshift_l(x, x, r);
}

__device__ __forceinline__ void dequant_word(std::uint32_t q, std::uint32_t scale_lo,
                                             std::uint32_t scale_hi, std::uint32_t (&a)[4]) {
  a[0] = bf16x2_mul(q & kTargetBits, scale_lo);
  a[1] = bf16x2_mul(rotl(q, kRotation1) & kTargetBits, scale_hi);
  a[2] = bf16x2_mul(rotl(q, kRotation2) & kTargetBits, scale_lo);
  const std::uint32_t hi3 = rotl(q, kA3HighRotation) & (kTargetBits & ~kA3LowBits);
  a[3] = bf16x2_mul((rotl(q, kA3LowRotation) & kA3LowBits) | hi3, scale_hi);
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, "
      "%2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bf16x2 scale multiplier for a scale byte, pre-multiplied by 2^(126 -
// kUnscaleLog2).
template <bool kNvfp4>
__device__ std::uint32_t scale_multiplier(int byte) {
  float v;
  if (kNvfp4) {
    const int e = (byte >> 3) & 0xF, m = byte & 7;
    if ((byte & 0x7F) == 0x7F) {
      v = __int_as_float(0x7FC00000);
    } else {
      v = e == 0 ? ldexpf(static_cast<float>(m), -9) : ldexpf(1.0f + m / 8.0f, e - 7);
    }
    if (byte & 0x80) v = -v;
    v = ldexpf(v, 126 - kUnscaleLog2);
  } else {
    v = byte == 0xFF ? __int_as_float(0x7FC00000) : ldexpf(1.0f, byte - 127 + 126 - kUnscaleLog2);
  }
  const std::uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  return h | (h << 16);
}

// The gated epilogue (cuda/activation/gated_math.cuh): kEpi 1 silu-and-mul, else swiglu-oai.
template <int kEpi>
__device__ __forceinline__ float gated(float g, float u, float alpha, float limit) {
  return cuda::gated_f32<kEpi == 1 ? 1 : 2>(g, u, alpha, limit);
}

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

}  // namespace moekit::gemm::sm90_w4a16
