// The FP4 quantize kernel for 2-byte inputs (bf16 / f16), NVFP4 (per-matrix gs, or per-token gs
// computed from the row) and MXFP4: the same bytes as the chunk / row kernels of
// quantize_kernels.cuh (and so the CPU reference), with fewer instructions per byte.
//
// Why a second FP4 kernel: the chunk kernel is issue-bound on FP4 (ncu: ~400 instructions per
// 16-element unit) and its per-token variant needs two CTA barriers per row. Here:
//  * a thread owns whole 16-element units (one NVFP4 block: its scale once, no shuffle);
//  * a group of 256 threads (224 for 6144 < K <= 7168) owns a row, each thread up to 2 (3) units
//    of it (K <= 8192); per-row work (the scale-byte row offset, the gs invariants, the per-token
//    amax) is paid once per row, and the per-token amax needs one named barrier of the group;
//  * rows arrive in shared memory through the copy engine (one bulk copy per row, two row buffers
//    per group), so the next rows are in flight while one is encoded, at no register cost;
//  * e2m1 codes come two at a time from a 64 KB shared-memory table indexed by the two e4m3 bytes
//    of an element pair (kE2m1OfE4m3 applied to both bytes, packed as the output byte, stored
//    XOR-swizzled against bank conflicts): one LDS per two elements and no per-element shifts;
//  * with one NVFP4 gs, the block multipliers come from a 256-entry table per CTA;
//  * the CTAs are persistent (one per SM), so the tables are built once per SM.
// The element math (scale multiply, round-to-odd, e4m3 conversion, table) and the block scales
// are the exhaustively verified ones of fast_codecs.cuh. quantize_cuda.cu picks this kernel or the
// chunk / row kernels by size (Fp4QuantizeKernel); both are tested byte for byte.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quant/absmax_packed.cuh"
#include "cuda/quant/fast_codecs.cuh"
#include "cuda/quant/quant_device.cuh"
#include "cuda/quant/quantize_kernels.cuh"
#include "cuda/runtime/sm90_bulk_copy.cuh"

namespace moekit::cuda::quant_detail {

// Units of a row: at most 512 (K <= 8192, a 16 KB row of bf16).
constexpr int kFp4MaxUnits = 512;
constexpr int kPairTableBytes = 65536;

// Kernel configurations: kRowThreads threads own a row (each up to kUnits units of it), kGroups
// rows are encoded at once per CTA, each group streams its rows through kStages shared-memory
// row buffers, kMinBlocks CTAs per SM.
template <int kRowThreads_, int kGroups_, int kStages_, int kMinBlocks_>
struct Fp4RowsConfig {
  static constexpr int kRowThreads = kRowThreads_, kGroups = kGroups_, kStages = kStages_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kUnits = (kFp4MaxUnits + kRowThreads - 1) / kRowThreads;
  static constexpr int kThreads = kGroups * kRowThreads;
  static constexpr int kWarpsPerRow = kRowThreads / 32;
  // Per-token warp maxima slots per group, padded to whole 16-byte words (read as float4).
  static constexpr int kSlotStride = (kWarpsPerRow + 3) / 4 * 4;
  // Shared memory: the pair table, the row buffers, their barriers, the per-token warp maxima,
  // the NVFP4 out-scale table.
  static constexpr int kRowBytes = kFp4MaxUnits * 32;
  static constexpr int kRowsOffset = kPairTableBytes;
  static constexpr int kBarsOffset = kRowsOffset + kGroups * kStages * kRowBytes;
  static constexpr int kSlotsOffset = kBarsOffset + kGroups * kStages * 8;
  static constexpr int kScaleTableOffset = kSlotsOffset + 2 * kGroups * kSlotStride * 4;
  static constexpr int kSmemBytes = kScaleTableOffset + 256 * 4;
  static_assert(kRowThreads % 32 == 0, "whole warps per row group");
};
// 4 groups of 256 threads x 2 row buffers (~193 KB of shared memory, 1024 threads, 2 units per
// thread), one CTA per SM: up to 8 rows (~115 KB at K = 7168) in flight per SM. Measured against
// the alternatives (H200, bf16 [M, 7168], docs/kernels/quant_routing.md "Quantize"): 128-thread groups
// (4 units per thread, 16 warps per SM) and half-row items for 8 groups of 128 threads were
// slower once the pair table's bank conflicts were gone; before that, 6 groups with the row in
// registers were within +-3% and a whole CTA of 512 threads per row 15-35% slower.
using Fp4RowsGroups = Fp4RowsConfig<256, 4, 2, 1>;
// 224 threads per group: for rows of 385..448 units (the rule: tuning::sm90::fp4_quantize_rows_224).
using Fp4RowsGroups224 = Fp4RowsConfig<224, 4, 2, 1>;

// Whether this kernel handles a row of K elements (K % 16 == 0: FP4 schemes guarantee it).
__host__ __device__ constexpr bool fp4_rows_kernel_fits(std::int64_t k) {
  return k > 0 && k % 16 == 0 && k / 16 <= kFp4MaxUnits;
}

// The pair table: the output byte e2m1(b0) | e2m1(b1) << 4 of the e4m3 bytes b0, b1 of an element
// pair (kE2m1OfE4m3 of each), stored at byte pair_slot(b0 | b1 << 8). The slot XORs the word
// within b1's 256-byte row with b1's low 5 bits: the bank of an entry would otherwise depend on
// b0 alone, and scaled FP4 inputs have their e4m3 bytes in ~36 magnitudes (0x28..0x4B), i.e. in
// 9 of the 32 banks (ncu, H200: 7.9-way bank conflicts on these loads, shared memory 79% busy, the
// kernel's limit); with the XOR the lanes of a warp spread over all banks.
__device__ __forceinline__ std::uint32_t pair_slot(std::uint32_t pair) {
  return pair ^ ((pair >> 6) & 0x7Cu);
}

// Builds the table from the 256-byte table `t1` in shared memory, one 32-bit word (four entries:
// four consecutive b0 of one b1) per step; all threads of the CTA; the caller synchronizes.
__device__ __forceinline__ void build_e2m1_pair_table(std::uint8_t* pairs, const std::uint8_t* t1) {
  auto* words = reinterpret_cast<std::uint32_t*>(pairs);
  const auto* t1w = reinterpret_cast<const std::uint32_t*>(t1);
  for (int i = static_cast<int>(threadIdx.x); i < kPairTableBytes / 4; i += static_cast<int>(blockDim.x)) {
    // Stored word i = slot word: b1 = i / 64, logical word (b0 / 4) = (i % 64) ^ (b1 % 32).
    const std::uint32_t b1 = static_cast<std::uint32_t>(i) / 64;
    const std::uint32_t lo = t1w[(static_cast<std::uint32_t>(i) % 64) ^ (b1 % 32)];
    const std::uint32_t hi = t1[b1];
    words[i] = lo | (hi * 0x01010101u) << 4;
  }
}

// Four e4m3 bytes (element 4j + i in byte i) -> their four e2m1 codes as two output bytes
// (element pairs), in the low 16 bits.
__device__ __forceinline__ std::uint32_t e2m1x4_from_e4m3(std::uint32_t w, const std::uint8_t* pairs) {
  const std::uint32_t lo = pairs[pair_slot(w & 0xFFFFu)];
  const std::uint32_t hi = pairs[pair_slot(w >> 16)];
  return __byte_perm(lo, hi, 0x0040);
}

// 16 scaled fp32 values -> 16 e2m1 codes (8 bytes, element 2j in the low nibble of byte j).
__device__ __forceinline__ uint2 e2m1x16(const float (&s)[16], const std::uint8_t* pairs) {
  std::uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q)
    w[q] = e4m3x4_raw(round_to_odd_m3(s[4 * q]), round_to_odd_m3(s[4 * q + 1]),
                      round_to_odd_m3(s[4 * q + 2]), round_to_odd_m3(s[4 * q + 3]));
  uint2 out;
  out.x = __byte_perm(e2m1x4_from_e4m3(w[0], pairs), e2m1x4_from_e4m3(w[1], pairs), 0x5410);
  out.y = __byte_perm(e2m1x4_from_e4m3(w[2], pairs), e2m1x4_from_e4m3(w[3], pairs), 0x5410);
  return out;
}

// The 16 elements of a unit (two 16-byte words of bf16 / f16) as fp32.
template <typename T>
__device__ __forceinline__ void unpack_unit(const uint4 (&raw)[2], float (&v)[16]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const std::uint32_t w[4] = {raw[h].x, raw[h].y, raw[h].z, raw[h].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (InputTraits<T>::kDType == DType::kBF16) {
        v[8 * h + 2 * i] = __uint_as_float(w[i] << 16);
        v[8 * h + 2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      } else {
        v[8 * h + 2 * i] = f16_bits_to_float(w[i] & 0xFFFFu);
        v[8 * h + 2 * i + 1] = f16_bits_to_float(w[i] >> 16);
      }
    }
  }
}

// max |x| over a unit's 16 elements, ignoring NaN, from +0 (absmax_accumulate's value), on the
// packed 2-byte values (absmax_packed.cuh).
template <typename T>
__device__ __forceinline__ float unit_absmax(const uint4 (&raw)[2]) {
  std::uint32_t m = 0u;
  packed_absmax<T>(m, raw[0]);
  packed_absmax<T>(m, raw[1]);
  return packed_absmax_value<T>(m);
}

// Arms `bar` for `bytes` of copy-engine traffic and copies [src, src + bytes) to dst (a row
// buffer in shared memory). bytes % 16 == 0, src and dst 16-byte aligned.
__device__ __forceinline__ void stage_row_copy(void* dst, const void* src, std::uint32_t bytes,
                                               std::uint64_t* bar) {
  const std::uint32_t b = sm90::smem_addr(bar);
  sm90::mbar_arrive_expect_tx(b, bytes);
  sm90::bulk_copy_g2s(sm90::smem_addr(dst), src, bytes, b);
}

// Encodes a thread's first N units of a row (N: its warp's unit count, the same for all lanes):
// the block scales, the codes, then the stores, with no control flow between the units, so their
// dependency chains (division, conversions, table loads) interleave. Lanes whose unit is past the
// row end encode zeros and store nothing. Unit j of the thread is unit gt + kRowThreads * j.
template <int N, int kUnits, int kRowThreads, typename T, Kind kKind, bool kScaleTable>
__device__ __forceinline__ void encode_row_units(const QuantArgs& a, const uint4 (&raw)[kUnits][2],
                                                 const float (&unit_max)[kUnits], const ScaleParam& sp,
                                                 const float* scale_table,
                                                 const std::uint32_t (&sf_col)[kUnits], int gt,
                                                 int units_per_row, bool lead, std::uint8_t* out_row,
                                                 std::uint8_t* sf_out, const std::uint8_t* pairs) {
  constexpr int kScaleBlockUnits = scale_block<kKind>() / 16;
  std::uint8_t sf[N];
  float out_scale[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float gmax = unit_max[j];
    // MXFP4 pairs are whole: units_per_row is even there (K % 32 == 0).
    if constexpr (kScaleBlockUnits == 2) gmax = group_max<2>(gmax);
    if constexpr (kScaleTable) {
      out_scale[j] = nvfp4_block_scale_from_table(gmax, sp.gs_c6, scale_table, &sf[j]);
    } else {
      out_scale[j] = fp4_block_scale<kKind>(a, gmax, sp, &sf[j]);
    }
  }
  uint2 codes[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float v[16];
    unpack_unit<T>(raw[j], v);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = __fmul_rn(v[i], out_scale[j]);
    codes[j] = e2m1x16(v, pairs);
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int u = gt + kRowThreads * j;
    if (u < units_per_row) {
      *reinterpret_cast<uint2*>(out_row + 8 * u) = codes[j];
      if (lead) sf_out[sf_col[j]] = sf[j];
    }
  }
}

// encode_row_units<n> for a warp-uniform n in [1, N] (0: nothing).
template <int N, int kUnits, int kRowThreads, typename T, Kind kKind, bool kScaleTable>
__device__ __forceinline__ void encode_row_units_upto(int n, const QuantArgs& a,
                                                      const uint4 (&raw)[kUnits][2],
                                                      const float (&unit_max)[kUnits],
                                                      const ScaleParam& sp, const float* scale_table,
                                                      const std::uint32_t (&sf_col)[kUnits], int gt,
                                                      int units_per_row, bool lead,
                                                      std::uint8_t* out_row, std::uint8_t* sf_out,
                                                      const std::uint8_t* pairs) {
  if (n == N) {
    encode_row_units<N, kUnits, kRowThreads, T, kKind, kScaleTable>(
        a, raw, unit_max, sp, scale_table, sf_col, gt, units_per_row, lead, out_row, sf_out, pairs);
  } else if constexpr (N > 1) {
    encode_row_units_upto<N - 1, kUnits, kRowThreads, T, kKind, kScaleTable>(
        n, a, raw, unit_max, sp, scale_table, sf_col, gt, units_per_row, lead, out_row, sf_out,
        pairs);
  }
}

// One CTA per SM; row group g of CTA b takes rows g + groups * (b + gridDim.x * i) of the flattened
// [B*M, K] input (counted from the last row when reverse_rows); thread t of a group takes units t, t + kRowThreads, ... of its row. Each group
// streams its rows through kStages shared-memory buffers filled by the copy engine (one bulk copy
// per row, issued by the group's first thread once the group is done with the buffer), so the
// next rows are in flight while this one is encoded, at no register cost.
//   kKind = kNvfp4, !kPerToken: gs = a.scale_in per matrix (or per row, a.scale_per_row); when
//     row_scale_out is set (a static gs), the a.batch per-matrix values are copied there;
//     kScaleTable (one gs for every row: a.batch == 1, !a.scale_per_row): the block scale's
//     division comes from a 256-entry table of its e4m3 byte, built once per CTA;
//   kKind = kNvfp4,  kPerToken: gs = nvfp4_global_scale(row amax), written to row_scale_out[row];
//   kKind = kMxfp4: e8m0 block scales under a.rule (a block of 32 is two units in adjacent lanes).
// Also writes the scale layout's padding bytes. A warp encodes as many units as its row has for
// it (warp-uniform), so one instantiation serves every K.
// Requires fp4_rows_kernel_fits(a.k), a 16-byte aligned input (K % 8 == 0) and 8-byte aligned codes.
template <typename Cfg, typename T, Kind kKind, bool kPerToken, bool kScaleTable>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    quantize_fp4_rows_kernel(QuantArgs a, float* row_scale_out, bool reverse_rows) {
  static_assert(sizeof(T) == 2, "2-byte inputs only");
  static_assert(is_fp4<kKind>(), "FP4 kinds only");
  static_assert(!kPerToken || kKind == Kind::kNvfp4, "per-token scales are NVFP4's");
  static_assert(!kScaleTable || (kKind == Kind::kNvfp4 && !kPerToken), "one NVFP4 gs");
  static_assert(1 + (kPerToken ? 2 : 1) * Cfg::kGroups <= 16, "named barriers 1..15");
  constexpr int kUnits = Cfg::kUnits;
  constexpr int kRowThreads = Cfg::kRowThreads;
  constexpr int kStages = Cfg::kStages;
  constexpr int kScaleBlockUnits = scale_block<kKind>() / 16;  // 1 (NVFP4) or 2 (MXFP4)
  extern __shared__ __align__(128) std::uint8_t fp4_smem[];
  std::uint8_t* pairs = fp4_smem;
  __shared__ __align__(4) std::uint8_t s_e2m1[256];

  const int group = static_cast<int>(threadIdx.x) / kRowThreads;
  const int gt = static_cast<int>(threadIdx.x) % kRowThreads;
  const int warp_in_group = gt / 32;
  const int units_per_row = static_cast<int>(a.k / 16);
  const auto row_bytes = static_cast<std::uint32_t>(a.k * 2);
  const std::int64_t total_rows = a.batch * a.rows;
  constexpr int groups = Cfg::kGroups;
  const std::int64_t row_step = static_cast<std::int64_t>(gridDim.x) * groups;
  const std::int64_t first_row = static_cast<std::int64_t>(blockIdx.x) * groups + group;
  // Visit order i -> row: reversed, the rows read last by a preceding pass over the input (the
  // computed-gs amax pre-pass) come first, while they are still in L2.
  auto row_of = [&](std::int64_t i) { return reverse_rows ? total_rows - 1 - i : i; };
  std::uint8_t* stage_buf = fp4_smem + Cfg::kRowsOffset + group * kStages * Cfg::kRowBytes;
  auto* bars = reinterpret_cast<std::uint64_t*>(fp4_smem + Cfg::kBarsOffset) + group * kStages;
  float* group_max_slots = reinterpret_cast<float*>(fp4_smem + Cfg::kSlotsOffset);  // [2][groups][kSlotStride]
  float* scale_table = reinterpret_cast<float*>(fp4_smem + Cfg::kScaleTableOffset);
  const auto* x = static_cast<const std::uint8_t*>(a.x);
  // Global loads the prologue needs go out before the row copies: issued after them, they would
  // queue behind ~15 MB of copy traffic (H200: 2.5 us of a 30 us kernel for a 256-byte table
  // load; the e2m1 table is computed instead, fill_e2m1_table).
  float gs0 = 0.0f;
  if constexpr (kScaleTable) gs0 = a.scale_in[0];
  // The first kStages rows of each group go out before the tables are built (they overlap it).
  if (gt == 0) {
    for (int st = 0; st < kStages; ++st) sm90::mbar_init(sm90::smem_addr(&bars[st]), 1);
    sm90::fence_mbar_init();
    for (int st = 0; st < kStages; ++st) {
      const std::int64_t i = first_row + st * row_step;
      if (i < total_rows)
        stage_row_copy(stage_buf + st * Cfg::kRowBytes, x + row_of(i) * row_bytes, row_bytes, &bars[st]);
    }
  }
  // A static NVFP4 gs is also the op's global-scale output: copied here instead of by a separate
  // memcpy node (one kernel per call).
  if constexpr (kKind == Kind::kNvfp4 && !kPerToken) {
    if (row_scale_out != nullptr && blockIdx.x == 0) {
      if constexpr (kScaleTable) {
        if (threadIdx.x == 0) row_scale_out[0] = gs0;
      } else {
        for (std::int64_t i = threadIdx.x; i < a.batch; i += blockDim.x) row_scale_out[i] = a.scale_in[i];
      }
    }
  }
  ScaleParam sp;
  if constexpr (kScaleTable) {
    sp = make_scale_param<kKind>(gs0);
    for (int b = static_cast<int>(threadIdx.x); b < 256; b += static_cast<int>(blockDim.x))
      scale_table[b] = nvfp4_out_scale_of_byte(static_cast<std::uint8_t>(b), sp.inv_gs);
  }
  if constexpr (kPerToken) {  // the padding slots of the warp maxima stay +0
    for (int i = static_cast<int>(threadIdx.x); i < 2 * Cfg::kGroups * Cfg::kSlotStride;
         i += static_cast<int>(blockDim.x))
      group_max_slots[i] = 0.0f;
  }
  fill_e2m1_table(s_e2m1);
  __syncthreads();
  build_e2m1_pair_table(pairs, s_e2m1);
  __syncthreads();

  const std::int64_t sf_matrix =
      scale_padded_rows(a.layout, a.rows) * scale_padded_cols(a.layout, a.kb);
  const bool lead = kScaleBlockUnits == 1 || (gt % 2) == 0;
  const int warp_first_unit = gt - gt % 32;
  // Column parts of this thread's scale-byte offsets, the same for every row (32 bits: within
  // one row of 128 padded rows x Kb columns).
  std::uint32_t sf_col[kUnits];
#pragma unroll
  for (int j = 0; j < kUnits; ++j)
    sf_col[j] = static_cast<std::uint32_t>(
        scale_col_offset(a.layout, (gt + kRowThreads * j) / kScaleBlockUnits));
  // The buffer barrier of this group, and (per-token) the one of its row amax.
  const int buffer_barrier = 1 + group;
  const int amax_barrier = 1 + Cfg::kGroups + group;

  // Units of this thread's warp (the same for its 32 lanes up to the row end, which
  // encode_row_units handles per lane): K = 7168 (448 units) gives warps 0-5 two units and
  // warps 6-7 one.
  const int warp_units =
      warp_first_unit >= units_per_row
          ? 0
          : min(kUnits, (units_per_row - warp_first_unit + kRowThreads - 1) / kRowThreads);

  float scale_seen = 0.0f;
  bool have_sp = kScaleTable;
  int it = 0;
  for (std::int64_t i = first_row; i < total_rows; i += row_step, ++it) {
    const std::int64_t row = row_of(i);
    const int st = it % kStages;
    sm90::mbar_wait(sm90::smem_addr(&bars[st]), static_cast<std::uint32_t>((it / kStages) & 1));
    const std::uint8_t* buf = stage_buf + st * Cfg::kRowBytes;
    uint4 raw[kUnits][2];
#pragma unroll
    for (int j = 0; j < kUnits; ++j) {
      const int u = gt + kRowThreads * j;
      if (j < warp_units && u < units_per_row) {
        const uint4* p = reinterpret_cast<const uint4*>(buf + 32 * u);
        raw[j][0] = p[0];
        raw[j][1] = p[1];
      } else {
        raw[j][0] = make_uint4(0u, 0u, 0u, 0u);
        raw[j][1] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    // The buffer is free once every thread of the group holds its part (a named barrier of all
    // the group's warps: a warp that only arrived could run a row ahead and mix two rows'
    // arrivals in one barrier phase); then the group's first thread refills it with the row
    // kStages iterations ahead.
    asm volatile("bar.sync %0, %1;" ::"r"(buffer_barrier), "n"(kRowThreads) : "memory");
    if (gt == 0) {
      const std::int64_t next = i + kStages * row_step;
      if (next < total_rows)
        stage_row_copy(stage_buf + st * Cfg::kRowBytes, x + row_of(next) * row_bytes, row_bytes,
                       &bars[st]);
    }
    const std::int64_t b = a.batch == 1 ? 0 : row / a.rows;
    const std::int64_t r = a.batch == 1 ? row : row % a.rows;
    const std::int64_t sf_row = b * sf_matrix + scale_row_offset(a.layout, r, a.kb);

    float unit_max[kUnits];
#pragma unroll
    for (int j = 0; j < kUnits; ++j) unit_max[j] = j < warp_units ? unit_absmax<T>(raw[j]) : 0.0f;
    if constexpr (kKind == Kind::kNvfp4 && !kScaleTable) {
      float s;
      if constexpr (kPerToken) {
        // Row amax: the group's warp maxima through shared memory (double-buffered by row
        // parity, so one named barrier per row orders the slot's reuse), then gs.
        float m = unit_max[0];
#pragma unroll
        for (int j = 1; j < kUnits; ++j) m = fmaxf(m, unit_max[j]);
        // The maxima are in [+0, +inf] (NaN ignored), where the bits order as unsigned
        // integers: one warp reduction instruction and a max over 16-byte slot words (the
        // padding slots stay +0) give the same (exact) max as a float tree.
        m = __uint_as_float(__reduce_max_sync(0xFFFFFFFFu, __float_as_uint(m)));
        float* slots = group_max_slots + ((it & 1) * Cfg::kGroups + group) * Cfg::kSlotStride;
        if (gt % 32 == 0) slots[warp_in_group] = m;
        asm volatile("bar.sync %0, %1;" ::"r"(amax_barrier), "n"(kRowThreads) : "memory");
        std::uint32_t rm_bits = 0u;
#pragma unroll
        for (int w = 0; w < Cfg::kSlotStride; w += 4) {
          const uint4 q = *reinterpret_cast<const uint4*>(slots + w);
          rm_bits = max(rm_bits, max(max(q.x, q.y), max(q.z, q.w)));
        }
        const float rm = __uint_as_float(rm_bits);
        s = nvfp4_global_scale(rm);
        if (gt == 0) row_scale_out[row] = s;
      } else {
        s = a.scale_in[a.scale_per_row ? row : b];
      }
      if (!have_sp || __float_as_uint(s) != __float_as_uint(scale_seen)) {
        sp = make_scale_param<kKind>(s);
        scale_seen = s;
        have_sp = true;
      }
    }

    encode_row_units_upto<kUnits, kUnits, kRowThreads, T, kKind, kScaleTable>(
        warp_units, a, raw, unit_max, sp, scale_table, sf_col, gt, units_per_row, lead,
        static_cast<std::uint8_t*>(a.values) + row * (a.k / 2),
        static_cast<std::uint8_t*>(a.scales) + sf_row, pairs);
  }
  // The scale buffer's layout padding (rows past M, columns past Kb): this CTA's share.
  zero_scale_padding_share(static_cast<std::uint8_t*>(a.scales), a.batch, a.rows, a.kb, a.layout,
                           static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                           static_cast<std::int64_t>(gridDim.x) * blockDim.x);
}

}  // namespace moekit::cuda::quant_detail
