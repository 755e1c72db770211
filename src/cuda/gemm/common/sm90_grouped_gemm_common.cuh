// Shared pieces of the SM90 grouped GEMM kernels (W4A16 mma.sync and wgmma, the decode kernel,
// the bf16 / fp8 wgmma kernel, W4A8): the kernel parameters, programmatic dependent launch, the
// expert / token-tile geometry of a persistent grouped grid, cp.async and 16-byte loads, the
// mma.sync bf16 step, the 4-bit weight dequant and its scale multipliers.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/activation/gated_math.cuh"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/runtime/sorted_search.cuh"

namespace moekit::gemm::sm90 {

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
  // (cuda/gemm/decode_routing.hpp); topk_ids null = off.
  const std::int32_t* topk_ids;
  int top_k;
  int a_by_token;
  __nv_bfloat16* reduce_out;
  const float* topk_weights;
  const float* reduce_bias;
  int* counters;
  int* clear;
  int clear_count;
  // The wgmma kernel's epilogue only: out in the wgmma K order (KOrder::kWgmma).
  int out_wgmma_k;
};

// The kernel parameters of a grouped GEMM's arguments (lda / ldo resolved by grouped_gemm). The
// 4-bit kernels read every field; the bf16 / fp8 kernels read the expert geometry, the output and
// the gated epilogue's bias / SwiGLU constants, and their operands through tensor maps or their
// own fields (grouped_gemm_output_params). The fused routing's fields stay zero
// (set_decode_routing).
inline Params grouped_gemm_output_params(const GroupedGemmArgs& args) {
  Params p{};
  p.expert_offsets = args.expert_offsets;
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.ldo = args.ldo;
  p.num_experts = args.num_experts;
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  p.m = static_cast<int>(args.rows);
  if (args.epilogue.gated()) {
    p.bias = args.epilogue.bias;
    p.swiglu_alpha = args.epilogue.swiglu_alpha;
    p.swiglu_limit = args.epilogue.swiglu_limit;
  }
  return p;
}

inline Params grouped_gemm_params(const GroupedGemmArgs& args, const GemmConfig& config) {
  Params p{};
  p.expert_offsets = args.expert_offsets;
  p.a = static_cast<const __nv_bfloat16*>(args.a);
  p.lda = args.lda;
  p.row_index = args.row_index;
  p.w = static_cast<const std::uint8_t*>(args.w);
  p.w_scales = static_cast<const std::uint8_t*>(args.w_scales);
  p.alpha = args.w_expert_scale;
  p.bias = args.epilogue.bias;
  p.row_scale = args.epilogue.row_scale;
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.ldo = args.ldo;
  p.num_experts = args.num_experts;
  p.n = static_cast<int>(args.n);
  p.k = static_cast<int>(args.k);
  p.swiglu_alpha = args.epilogue.swiglu_alpha;
  p.swiglu_limit = args.epilogue.swiglu_limit;
  p.m = static_cast<int>(args.rows);
  p.out_wgmma_k = config.out_order == KOrder::kWgmma;
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
// The W4A16 wgmma tile's token tiles (GemmConfig::tokens, WgmmaConfig).
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

}  // namespace moekit::gemm::sm90
