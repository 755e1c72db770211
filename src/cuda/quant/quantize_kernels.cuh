// The CUDA quantize kernels (docs/formats.md sections 3-6), byte-identical to the CPU reference.
//
// Design (memory-bound): one thread owns a chunk of 8 consecutive elements of a row (one 16-byte
// load for bf16/f16, two for f32) and stores its codes with one 4-byte (FP4) or 8-byte (FP8) store.
// A scale block of sfv elements is sfv/8 consecutive lanes (2 for NVFP4, 4 for MX, 16 for 1x128);
// they reduce the block absmax with xor-shuffles and the first lane of the group writes the scale.
// Per-row and per-tile schemes (FP8 per-token, NVFP4 per-token, FP8 128x128) run one CTA per row
// or tile: a first pass over its data computes the absmax, a second (L1/L2-resident) quantizes.
// Per-tensor schemes with a computed scale run an absmax pre-pass (atomicMax on the bit pattern of
// a non-negative float: exact and order-independent, hence deterministic) into the output scale
// buffer, a one-thread kernel that turns it into the scale, then the chunk kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quant/fast_codecs.cuh"
#include "cuda/quant/quant_device.cuh"

namespace moekit::cuda::quant_detail {

// What the chunk kernel computes per scale group.
enum class Kind : int {
  kNvfp4,       // e2m1 + e4m3 block scale of 16, per-matrix (or per-row) encode gs
  kMxfp4,       // e2m1 + e8m0 block scale of 32
  kMxfp8,       // e4m3 + e8m0 block scale of 32
  kFp8Group,    // e4m3 + fp32 decode scale per 1x128 group
  kFp8Scaled,   // e4m3 = e4m3(x / s) with a given decode scale s (per tensor / row / tile)
  kBf16,        // plain conversion to bf16
};

template <Kind kKind>
constexpr int lanes_per_group() {
  return kKind == Kind::kNvfp4 ? 2 : (kKind == Kind::kMxfp4 || kKind == Kind::kMxfp8) ? 4
                                 : kKind == Kind::kFp8Group                           ? 16
                                                                                      : 1;
}

struct QuantArgs {
  const void* x = nullptr;       // [B, M, K] bf16 / f16 / f32
  void* values = nullptr;        // [B, M, K/2] e2m1x2, [B, M, K] e4m3 or bf16
  void* scales = nullptr;        // block scales (bytes) or fp32 decode scales
  const float* scale_in = nullptr;  // kNvfp4: gs per matrix (or per row); kFp8Scaled: s per matrix
  bool scale_per_row = false;    // scale_in is indexed by row (per-token) instead of matrix
  std::int64_t batch = 1, rows = 0, k = 0;
  std::int64_t kb = 0;           // scale columns (K / sfv, or ceil(K / 128))
  ScaleLayout layout = ScaleLayout::kLinear;
  MxRule rule = MxRule::kRceil;
};

// The per-matrix (or per-row) scale of a chunk: kNvfp4's encode gs with its invariants
// (gs_c6 = RN(gs * RN(1/6)), inv_gs = RN(1 / gs), see nvfp4_block_scale_fast), or kFp8Scaled's s.
struct ScaleParam {
  float s = 0.0f, gs_c6 = 0.0f, inv_gs = 0.0f;
};

template <Kind kKind>
__device__ __forceinline__ ScaleParam make_scale_param(float s) {
  ScaleParam p;
  p.s = s;
  if constexpr (kKind == Kind::kNvfp4) {
    p.gs_c6 = __fmul_rn(s, kRcp6);
    p.inv_gs = __frcp_rn(s);  // RN(1 / s): the correctly rounded reciprocal
  }
  return p;
}

// Block-scaled kinds (scale bytes in a layout).
template <Kind kKind>
constexpr bool is_fp4() {
  return kKind == Kind::kNvfp4 || kKind == Kind::kMxfp4;
}

template <Kind kKind>
constexpr bool has_scale_bytes() {
  return kKind == Kind::kNvfp4 || kKind == Kind::kMxfp4 || kKind == Kind::kMxfp8;
}

// Elements per scale block of the block-scaled kinds.
template <Kind kKind>
constexpr int scale_block() {
  return kKind == Kind::kNvfp4 ? 16 : 32;
}

// An FP4 block's multiplier and scale byte from its absmax (NVFP4: e4m3 scale under gs; MXFP4:
// e8m0 under the MX rule).
template <Kind kKind>
__device__ __forceinline__ float fp4_block_scale(const QuantArgs& a, float gmax,
                                                 const ScaleParam& sp, std::uint8_t* sf) {
  if constexpr (kKind == Kind::kNvfp4) return nvfp4_block_scale_fast(gmax, sp.gs_c6, sp.inv_gs, sf);
  return mx_block_scale_fast<2>(gmax, a.rule, sf);
}

// Quantizes one chunk of row `grow` of the flattened [B*M, K] given its group's absmax. `lead` =
// this lane writes the group's scale, at byte `sf_off` for the block-scaled kinds (the caller
// adds the row and column parts of the layout offset, see batched_scale_row_offset).
// Element conversions use the exhaustively verified fast codecs (fast_codecs.cuh); FP4 kinds need
// `e2m1_table`, the CTA's shared-memory copy of kE2m1OfE4m3.
template <Kind kKind, bool kVec>
__device__ __forceinline__ void encode_chunk(const QuantArgs& a, const float (&v)[kChunk],
                                             float gmax, const ScaleParam& sp, std::int64_t grow,
                                             std::int64_t col, bool lead, std::int64_t sf_off,
                                             const std::uint8_t* e2m1_table) {
  if constexpr (is_fp4<kKind>()) {
    std::uint8_t sf;
    const float out_scale = fp4_block_scale<kKind>(a, gmax, sp, &sf);
    float scaled[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) scaled[i] = __fmul_rn(v[i], out_scale);
    auto* out = static_cast<std::uint8_t*>(a.values) + (grow * a.k + col) / 2;
    *reinterpret_cast<std::uint32_t*>(out) = e2m1x8(scaled, e2m1_table);
    if (lead) static_cast<std::uint8_t*>(a.scales)[sf_off] = sf;
  } else if constexpr (kKind == Kind::kBf16) {
    auto* out = static_cast<std::uint16_t*>(a.values) + grow * a.k + col;
    if constexpr (kVec) {
      uint4 w;
      w.x = float_to_bf16(v[0]) | (static_cast<std::uint32_t>(float_to_bf16(v[1])) << 16);
      w.y = float_to_bf16(v[2]) | (static_cast<std::uint32_t>(float_to_bf16(v[3])) << 16);
      w.z = float_to_bf16(v[4]) | (static_cast<std::uint32_t>(float_to_bf16(v[5])) << 16);
      w.w = float_to_bf16(v[6]) | (static_cast<std::uint32_t>(float_to_bf16(v[7])) << 16);
      *reinterpret_cast<uint4*>(out) = w;
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        if (col + i < a.k) out[i] = float_to_bf16(v[i]);
    }
  } else {
    // FP8 values: MXFP8 multiplies by its block multiplier, the decode-scaled kinds divide by s
    // (IEEE division, as the spec).
    float q[kChunk];
    if constexpr (kKind == Kind::kMxfp8) {
      std::uint8_t e;
      const float m = mx_block_scale_fast<8>(gmax, a.rule, &e);
      if (lead) static_cast<std::uint8_t*>(a.scales)[sf_off] = e;
#pragma unroll
      for (int i = 0; i < kChunk; ++i) q[i] = __fmul_rn(v[i], m);
    } else {
      float s = sp.s;
      if constexpr (kKind == Kind::kFp8Group) {
        s = fp8_block_scale(gmax);
        if (lead) static_cast<float*>(a.scales)[grow * a.kb + col / 128] = s;
      }
#pragma unroll
      for (int i = 0; i < kChunk; ++i) q[i] = __fdiv_rn(v[i], s);
    }
    uint2 w;
    w.x = e4m3x4(q[0], q[1], q[2], q[3]);
    w.y = e4m3x4(q[4], q[5], q[6], q[7]);
    auto* out = static_cast<std::uint8_t*>(a.values) + grow * a.k + col;
    if constexpr (kVec) {
      *reinterpret_cast<uint2*>(out) = w;
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        if (col + i < a.k) out[i] = static_cast<std::uint8_t>(((i < 4 ? w.x : w.y) >> (8 * (i % 4))) & 0xFFu);
    }
  }
}

// Chunks per row, rounded up to whole scale groups (so groups never straddle rows or warps).
template <Kind kKind>
__host__ __device__ __forceinline__ std::int64_t padded_chunks(std::int64_t k) {
  constexpr int kLanes = lanes_per_group<kKind>();
  const std::int64_t chunks = (k + kChunk - 1) / kChunk;
  return (chunks + kLanes - 1) / kLanes * kLanes;
}

// Rows per thread per step of the chunk kernel: their loads are issued together, so each thread
// keeps kRowsPerThread x 16 bytes in flight (the kernel is memory-bound only with enough bytes in
// flight per SM: ~64 KB at H200 latency and bandwidth).
constexpr int kRowsPerThread = 4;

// Reads chunk (row, col) of a [B*M, K] input as fp32 (the plain quantize input).
template <typename T, bool kVec>
struct RowLoader {
  static constexpr int kRowsPerStep = kRowsPerThread;  // memory-bound: rows for bytes in flight
  // 2-byte elements read with 16-byte vectors: the absmax pre-pass reads the input as one flat
  // array of packed values (flat_absmax_kernel).
  static constexpr bool kFlat2Byte = kVec && sizeof(T) == 2;
  using Elem = T;
  const T* x;
  std::int64_t k;
  __device__ __forceinline__ void operator()(std::int64_t grow, std::int64_t col,
                                             float (&v)[kChunk]) const {
    load_chunk<T, kVec>(x + grow * k, col, k, v);
  }
};

// Threads per CTA of the chunk kernels (a multiple of every group size; 7168 / 8 = 7 x 128).
constexpr int kChunkThreads = 128;

// 8-element chunks per thread of the chunk kernel: 2 for FP4 (a 16-element unit: one NVFP4 block
// per thread, so its scale is computed once and needs no shuffle; half an MX block), 1 otherwise.
template <Kind kKind>
constexpr int chunks_per_unit() {
  return is_fp4<kKind>() ? 2 : 1;
}

// Units per row of the chunk kernel, rounded up to whole scale groups (so groups never straddle
// rows or warps). For FP4, K is a multiple of the scale block (16 or 32), so units are whole.
template <Kind kKind>
__host__ __device__ __forceinline__ std::int64_t padded_units(std::int64_t k) {
  constexpr int kSub = chunks_per_unit<kKind>();
  constexpr int kLanes = lanes_per_group<kKind>() / kSub;
  const std::int64_t units = (k + kChunk * kSub - 1) / (kChunk * kSub);
  return (units + kLanes - 1) / kLanes * kLanes;
}

// Quantizes one 16-element FP4 unit (two chunks) of row `grow` given its group's absmax: one block
// scale, 16 codes through the e2m1 table, two 4-byte stores.
template <Kind kKind>
__device__ __forceinline__ void encode_fp4_unit(const QuantArgs& a, const float (&v)[2][kChunk],
                                                float gmax, const ScaleParam& sp,
                                                std::int64_t grow, std::int64_t col, bool lead,
                                                std::int64_t sf_off,
                                                const std::uint8_t* e2m1_table) {
  std::uint8_t sf;
  const float out_scale = fp4_block_scale<kKind>(a, gmax, sp, &sf);
  float s0[kChunk], s1[kChunk];
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    s0[i] = __fmul_rn(v[0][i], out_scale);
    s1[i] = __fmul_rn(v[1][i], out_scale);
  }
  auto* out = reinterpret_cast<std::uint32_t*>(static_cast<std::uint8_t*>(a.values) +
                                               (grow * a.k + col) / 2);
  out[0] = e2m1x8(s0, e2m1_table);
  out[1] = e2m1x8(s1, e2m1_table);
  if (lead) static_cast<std::uint8_t*>(a.scales)[sf_off] = sf;
}

// Rows per thread per step: the loader's kRowsPerStep chunks-worth, so the plain loader keeps the
// same 64 bytes of input in flight per thread for every kind (4 rows of 8 elements, 2 rows of a
// 16-element FP4 unit) at ~70 registers; at least one row.
template <Kind kKind, typename Loader>
constexpr int rows_per_step() {
  constexpr int r = Loader::kRowsPerStep / chunks_per_unit<kKind>();
  return r > 0 ? r : 1;
}

// One thread per unit (kSub chunks of 8): blockIdx.x * 128 + threadIdx.x is the unit within a
// row (of padded_units); CTA row y handles rows kRows * y + [0, kRows), kRows = rows_per_step,
// then strides by kRows * gridDim.y, so no per-thread 64-bit division is needed. The scale
// (kNvfp4's gs, kFp8Scaled's s) comes from a.scale_in per matrix or per row. `load` produces the
// fp32 values of a chunk (the input itself, or an activation of GEMM1's output for the fused
// activation + quantize op). kVec: the row length is a multiple of 8 (whole-chunk vector stores).
template <typename Loader, Kind kKind, bool kVec>
__global__ void __launch_bounds__(kChunkThreads) quantize_chunks_kernel(QuantArgs a, Loader load) {
  constexpr int kSub = chunks_per_unit<kKind>();
  constexpr int kRows = rows_per_step<kKind, Loader>();
  constexpr int kLanes = lanes_per_group<kKind>() / kSub;
  constexpr bool kScaled = kKind == Kind::kNvfp4 || kKind == Kind::kFp8Scaled;
  __shared__ std::uint8_t s_e2m1[is_fp4<kKind>() ? 256 : 1];
  if constexpr (is_fp4<kKind>()) {
    fill_e2m1_table(s_e2m1);
    __syncthreads();
  }
  const std::int64_t per_row = padded_units<kKind>(a.k);
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t col = c * kChunk * kSub;
  // Whole groups are in or out of a row (per_row is a multiple of kLanes), so shuffles among the
  // lanes of a group only see live lanes; lanes past the end still take part in them.
  const bool active = c < per_row && col < a.k;
  const bool lead = (threadIdx.x % kLanes) == 0;
  const std::int64_t total_rows = a.batch * a.rows;
  // The column part of the scale byte offset is the same for every row of this thread, the
  // matrix stride of the scale buffer for every row.
  std::int64_t sf_col = 0, sf_matrix = 0;
  if constexpr (has_scale_bytes<kKind>()) {
    sf_col = scale_col_offset(a.layout, col / scale_block<kKind>());
    sf_matrix = scale_padded_rows(a.layout, a.rows) * scale_padded_cols(a.layout, a.kb);
  }
  // The scale invariants are recomputed only when the scale changes (per matrix or per row).
  float scale_seen = 0.0f;
  ScaleParam sp;
  bool have_sp = false;
  for (std::int64_t base = static_cast<std::int64_t>(blockIdx.y) * kRows;
       base < total_rows; base += static_cast<std::int64_t>(gridDim.y) * kRows) {
    float v[kRows][kSub][kChunk];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        if (active && base + j < total_rows) {
          load(base + j, col + u * kChunk, v[j][u]);
        } else {
#pragma unroll
          for (int e = 0; e < kChunk; ++e) v[j][u][e] = 0.0f;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const std::int64_t grow = base + j;
      if (grow >= total_rows) break;  // uniform over the CTA
      float gmax = 0.0f;
      if constexpr (kKind == Kind::kNvfp4 || kKind == Kind::kMxfp4 || kKind == Kind::kMxfp8 ||
                    kKind == Kind::kFp8Group) {
        float m = chunk_absmax(v[j][0]);
        if constexpr (kSub > 1) m = fmaxf(m, chunk_absmax(v[j][1]));
        gmax = kLanes > 1 ? group_max<kLanes>(m) : m;
      }
      if (!active) continue;
      const std::int64_t b = a.batch == 1 ? 0 : grow / a.rows;
      std::int64_t sf_off = 0;
      if constexpr (has_scale_bytes<kKind>()) {
        const std::int64_t r = a.batch == 1 ? grow : grow % a.rows;
        sf_off = b * sf_matrix + scale_row_offset(a.layout, r, a.kb) + sf_col;
      }
      if constexpr (kScaled) {
        const float s = a.scale_in[a.scale_per_row ? grow : b];
        if (!have_sp || __float_as_uint(s) != __float_as_uint(scale_seen)) {
          sp = make_scale_param<kKind>(s);
          scale_seen = s;
          have_sp = true;
        }
      }
      if constexpr (is_fp4<kKind>()) {
        encode_fp4_unit<kKind>(a, v[j], gmax, sp, grow, col, lead, sf_off, s_e2m1);
      } else {
        encode_chunk<kKind, kVec>(a, v[j][0], gmax, sp, grow, col, lead, sf_off, s_e2m1);
      }
    }
  }
}

// Chunks per thread that the per-row kernel keeps in registers between its two passes.
constexpr int kRowCache = 4;

// Per-row schemes: one CTA per row of [B*M, K]. Pass 1: row absmax -> row scale (written to
// `row_scale_out[row]`); pass 2: the chunk body with that scale.
//   kFp8Scaled: s = fp8_token_scale(amax)      (FP8 per-token)
//   kNvfp4:     gs = nvfp4_global_scale(amax)  (NVFP4 per-token)
template <typename T, Kind kKind, bool kVec>
__global__ void __launch_bounds__(256) quantize_rows_kernel(QuantArgs a, float* row_scale_out) {
  constexpr int kLanes = lanes_per_group<kKind>();
  __shared__ float warp_max[32];
  __shared__ float row_scale;
  __shared__ std::uint8_t s_e2m1[is_fp4<kKind>() ? 256 : 1];
  if constexpr (is_fp4<kKind>()) fill_e2m1_table(s_e2m1);  // ordered by the barriers below
  const std::int64_t grow = blockIdx.x;
  const T* row = static_cast<const T*>(a.x) + grow * a.k;
  const std::int64_t per_row = padded_chunks<kKind>(a.k);
  // Rows of up to kRowCache chunks per thread stay in registers between the passes (one read of
  // the row, all loads issued at once); longer rows are read again in pass 2 (from L1/L2).
  const bool cached = per_row <= static_cast<std::int64_t>(kRowCache) * blockDim.x;
  float cache[kRowCache][kChunk];
  float m = 0.0f;
  if (cached) {
#pragma unroll
    for (int it = 0; it < kRowCache; ++it) {
      const std::int64_t c = static_cast<std::int64_t>(it) * blockDim.x + threadIdx.x;
      if (c * kChunk < a.k) {
        load_chunk<T, kVec>(row, c * kChunk, a.k, cache[it]);
      } else {
#pragma unroll
        for (int j = 0; j < kChunk; ++j) cache[it][j] = 0.0f;
      }
    }
#pragma unroll
    for (int it = 0; it < kRowCache; ++it) m = absmax_accumulate(m, chunk_absmax(cache[it]));
  } else {
    for (std::int64_t c = threadIdx.x; c * kChunk < a.k; c += blockDim.x) {
      float v[kChunk];
      load_chunk<T, kVec>(row, c * kChunk, a.k, v);
      m = absmax_accumulate(m, chunk_absmax(v));
    }
  }
  m = group_max<32>(m);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float rm = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) rm = absmax_accumulate(rm, warp_max[w]);
    const float s = kKind == Kind::kNvfp4 ? nvfp4_global_scale(rm) : fp8_token_scale(rm);
    row_scale = s;
    row_scale_out[grow] = s;
  }
  __syncthreads();
  const ScaleParam sp = make_scale_param<kKind>(row_scale);
  std::int64_t sf_row = 0;
  if constexpr (has_scale_bytes<kKind>())
    sf_row = batched_scale_row_offset(a.layout, grow / a.rows, grow % a.rows, a.rows, a.kb);
  const bool lead = threadIdx.x % kLanes == 0;
  auto sf_off = [&](std::int64_t c) -> std::int64_t {
    if constexpr (has_scale_bytes<kKind>())
      return sf_row + scale_col_offset(a.layout, c * kChunk / scale_block<kKind>());
    return 0;
  };
  // Every thread runs the same number of iterations (warp-uniform) for the group shuffles.
  if (cached) {
#pragma unroll
    for (int it = 0; it < kRowCache; ++it) {
      const std::int64_t c = static_cast<std::int64_t>(it) * blockDim.x + threadIdx.x;
      if (static_cast<std::int64_t>(it) * blockDim.x >= per_row) break;  // uniform over the CTA
      const bool active = c < per_row && c * kChunk < a.k;
      float gmax = 0.0f;
      if constexpr (kLanes > 1) gmax = group_max<kLanes>(chunk_absmax(cache[it]));
      if (active) encode_chunk<kKind, kVec>(a, cache[it], gmax, sp, grow, c * kChunk, lead, sf_off(c), s_e2m1);
    }
    return;
  }
  for (std::int64_t base = 0; base < per_row; base += blockDim.x) {
    const std::int64_t c = base + threadIdx.x;
    const bool active = c < per_row && c * kChunk < a.k;
    float v[kChunk];
    if (active) {
      load_chunk<T, kVec>(row, c * kChunk, a.k, v);
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) v[j] = 0.0f;
    }
    float gmax = 0.0f;
    if constexpr (kLanes > 1) gmax = group_max<kLanes>(chunk_absmax(v));
    if (active) encode_chunk<kKind, kVec>(a, v, gmax, sp, grow, c * kChunk, lead, sf_off(c), s_e2m1);
  }
}

// FP8 128x128 tiles: one CTA per tile of one matrix; s = fp8_block_scale(tile absmax) to
// scales[b, tile_r, tile_c] (fp32), then e4m3(x / s).
template <typename T, bool kVec>
__global__ void __launch_bounds__(256) quantize_tiles_kernel(QuantArgs a) {
  __shared__ float warp_max[8];
  __shared__ float tile_scale;
  const std::int64_t tiles_r = (a.rows + 127) / 128;
  const std::int64_t tiles_c = (a.k + 127) / 128;
  const std::int64_t tile = blockIdx.x;
  const std::int64_t b = tile / (tiles_r * tiles_c);
  const std::int64_t tr = (tile / tiles_c) % tiles_r;
  const std::int64_t tc = tile % tiles_c;
  // 16 threads cover the 128 columns of a tile row; 16 tile rows per pass of 256 threads.
  const int lane_c = threadIdx.x % 16;
  const int lane_r = threadIdx.x / 16;
  const std::int64_t col = tc * 128 + lane_c * kChunk;
  const std::int64_t r_end = (tr + 1) * 128 < a.rows ? (tr + 1) * 128 : a.rows;
  float m = 0.0f;
  for (std::int64_t r = tr * 128 + lane_r; r < r_end; r += 16) {
    if (col >= a.k) break;
    float v[kChunk];
    load_chunk<T, kVec>(static_cast<const T*>(a.x) + (b * a.rows + r) * a.k, col, a.k, v);
    m = absmax_accumulate(m, chunk_absmax(v));
  }
  m = group_max<32>(m);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float tm = 0.0f;
    for (int w = 0; w < 8; ++w) tm = absmax_accumulate(tm, warp_max[w]);
    tile_scale = fp8_block_scale(tm);
    static_cast<float*>(a.scales)[(b * tiles_r + tr) * tiles_c + tc] = tile_scale;
  }
  __syncthreads();
  const ScaleParam sp = make_scale_param<Kind::kFp8Scaled>(tile_scale);
  for (std::int64_t r = tr * 128 + lane_r; r < r_end; r += 16) {
    if (col >= a.k) break;
    float v[kChunk];
    load_chunk<T, kVec>(static_cast<const T*>(a.x) + (b * a.rows + r) * a.k, col, a.k, v);
    encode_chunk<Kind::kFp8Scaled, kVec>(a, v, 0.0f, sp, b * a.rows + r, col, false, 0, nullptr);
  }
}

// Absmax of each matrix of [B, M, K] into amax[b] (pre-zeroed): chunk blockIdx.x * 128 +
// threadIdx.x of rows blockIdx.y, blockIdx.y + gridDim.y, ... of matrix blockIdx.z; one atomic
// per warp.
template <typename Loader>
__global__ void __launch_bounds__(kChunkThreads) absmax_kernel(Loader load, std::int64_t rows,
                                                               std::int64_t k, float* amax) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool active = c * kChunk < k;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.z) * rows;
  float m = 0.0f;
  if (active) {
    // kRowsPerThread rows per step with their loads issued together (bytes in flight).
    const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * kRowsPerThread;
    for (std::int64_t r0 = blockIdx.y; r0 < rows; r0 += step) {
      float v[kRowsPerThread][kChunk];
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        const std::int64_t r = r0 + static_cast<std::int64_t>(j) * gridDim.y;
        if (r < rows) {
          load(row0 + r, c * kChunk, v[j]);
        } else {
#pragma unroll
          for (int e = 0; e < kChunk; ++e) v[j][e] = 0.0f;
        }
      }
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) m = absmax_accumulate(m, chunk_absmax(v[j]));
    }
  }
  m = group_max<32>(m);
  if (threadIdx.x % 32 == 0 && m > 0.0f) atomic_max_nonneg(amax + blockIdx.z, m);
}

// amax[b] -> scale[b] in place: NVFP4 gs = 2688 / amax, or FP8 per-tensor s = amax / 448.
// (Templates so that several translation units can include this header.)
template <typename = void>
__global__ void amax_to_scale_kernel(float* scale, std::int64_t batch, bool nvfp4) {
  const std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  scale[b] = nvfp4 ? nvfp4_global_scale(scale[b]) : fp8_tensor_scale(scale[b]);
}

// Writes 0 to the padding bytes of a swizzled block-scale buffer (rows >= M or columns >= Kb), the
// share [part, part + parts, ...) of them: only the padding entries are enumerated (the rows past M
// with every column, then the columns past Kb of every row), 32-bit index math within a matrix.
__device__ __forceinline__ void zero_scale_padding_share(std::uint8_t* scales, std::int64_t batch,
                                                         std::int64_t rows, std::int64_t kb,
                                                         ScaleLayout layout, std::int64_t part,
                                                         std::int64_t parts) {
  if (layout == ScaleLayout::kLinear) return;
  const std::int64_t mp = scale_padded_rows(layout, rows);
  const std::int64_t kp = scale_padded_cols(layout, kb);
  const std::int64_t row_pad = (mp - rows) * kp;  // < 128 * kp
  const std::int64_t col_pad = rows * (kp - kb);  // kp - kb < 4
  const std::int64_t per_matrix = row_pad + col_pad;
  const std::int64_t total = batch * per_matrix;
  for (std::int64_t i = part; i < total; i += parts) {
    const std::int64_t b = batch == 1 ? 0 : i / per_matrix;
    const std::int64_t o = i - b * per_matrix;
    std::int64_t r, c;
    if (o < row_pad) {
      const auto q = static_cast<std::uint32_t>(o), ukp = static_cast<std::uint32_t>(kp);
      r = rows + q / ukp;
      c = q % ukp;
    } else {
      const auto q = static_cast<std::uint32_t>(o - row_pad), w = static_cast<std::uint32_t>(kp - kb);
      r = q / w;
      c = kb + q % w;
    }
    scales[b * mp * kp + scale_row_offset(layout, r, kb) + scale_col_offset(layout, c)] = 0;
  }
}

template <typename = void>
__global__ void zero_scale_padding_kernel(std::uint8_t* scales, std::int64_t batch,
                                          std::int64_t rows, std::int64_t kb, ScaleLayout layout) {
  zero_scale_padding_share(scales, batch, rows, kb, layout,
                           static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                           static_cast<std::int64_t>(gridDim.x) * blockDim.x);
}

// Number of padding bytes of one swizzled scale buffer (0 for linear) of `batch` matrices.
__host__ __device__ inline std::int64_t scale_padding_bytes(std::int64_t batch, std::int64_t rows,
                                                            std::int64_t kb, ScaleLayout layout) {
  if (layout == ScaleLayout::kLinear) return 0;
  const std::int64_t mp = scale_padded_rows(layout, rows);
  const std::int64_t kp = scale_padded_cols(layout, kb);
  return batch * ((mp - rows) * kp + rows * (kp - kb));
}

}  // namespace moekit::cuda::quant_detail
