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

// Quantizes one chunk given its group's absmax. `lead` = this lane writes the group's scale.
template <Kind kKind, bool kVec>
__device__ __forceinline__ void encode_chunk(const QuantArgs& a, const float (&v)[kChunk],
                                             float gmax, float param, std::int64_t b,
                                             std::int64_t r, std::int64_t col, bool lead) {
  const std::int64_t grow = b * a.rows + r;  // row in the flattened [B*M, K]
  if constexpr (kKind == Kind::kNvfp4 || kKind == Kind::kMxfp4) {
    std::uint8_t sf;
    const float out_scale = kKind == Kind::kNvfp4 ? nvfp4_block_scale(gmax, param, &sf)
                                                  : mxfp4_block_scale(gmax, a.rule, &sf);
    std::uint8_t c[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) c[i] = fp4_quantize_element(v[i], out_scale);
    auto* out = static_cast<std::uint8_t*>(a.values) + (grow * a.k + col) / 2;
    *reinterpret_cast<std::uint32_t*>(out) = pack_fp4x8(c);
    if (lead) {
      const std::int64_t sc = col / (kKind == Kind::kNvfp4 ? 16 : 32);
      static_cast<std::uint8_t*>(a.scales)[batched_scale_offset(a.layout, b, r, sc, a.rows, a.kb)] =
          sf;
    }
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
    // FP8 values.
    float out_scale = 0.0f;  // MXFP8: multiplier; FP8 decode-scaled: divisor s
    if constexpr (kKind == Kind::kMxfp8) {
      std::uint8_t e;
      out_scale = mxfp8_block_scale(gmax, a.rule, &e);
      if (lead)
        static_cast<std::uint8_t*>(a.scales)[batched_scale_offset(a.layout, b, r, col / 32, a.rows,
                                                                  a.kb)] = e;
    } else if constexpr (kKind == Kind::kFp8Group) {
      out_scale = fp8_block_scale(gmax);
      if (lead) static_cast<float*>(a.scales)[grow * a.kb + col / 128] = out_scale;
    } else {
      out_scale = param;
    }
    std::uint8_t c[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i)
      c[i] = kKind == Kind::kMxfp8 ? mxfp8_quantize_element(v[i], out_scale)
                                   : fp8_quantize_element(v[i], out_scale);
    auto* out = static_cast<std::uint8_t*>(a.values) + grow * a.k + col;
    if constexpr (kVec) {
      *reinterpret_cast<uint2*>(out) = pack_u8x8(c);
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        if (col + i < a.k) out[i] = c[i];
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

// Reads chunk (row, col) of a [B*M, K] input as fp32 (the plain quantize input).
template <typename T, bool kVec>
struct RowLoader {
  const T* x;
  std::int64_t k;
  __device__ __forceinline__ void operator()(std::int64_t grow, std::int64_t col,
                                             float (&v)[kChunk]) const {
    load_chunk<T, kVec>(x + grow * k, col, k, v);
  }
};

// Threads per CTA of the chunk kernels (a multiple of every group size; 7168 / 8 = 7 x 128).
constexpr int kChunkThreads = 128;

// One thread per chunk: blockIdx.x * 128 + threadIdx.x is the chunk within a row (of
// padded_chunks), blockIdx.y strides over the B*M rows, so no per-thread 64-bit division is
// needed. The scale (kNvfp4's gs, kFp8Scaled's s) comes from a.scale_in per matrix or per row.
// `load` produces the fp32 values of a chunk (the input itself, or an activation of GEMM1's
// output for the fused activation + quantize op). kVec: the row length is a multiple of 8
// (whole-chunk vector stores).
template <typename Loader, Kind kKind, bool kVec>
__global__ void __launch_bounds__(kChunkThreads) quantize_chunks_kernel(QuantArgs a, Loader load) {
  constexpr int kLanes = lanes_per_group<kKind>();
  const std::int64_t per_row = padded_chunks<kKind>(a.k);
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t col = c * kChunk;
  // Whole groups are in or out of a row (per_row is a multiple of kLanes), so shuffles among the
  // lanes of a group only see live lanes; lanes past the end still take part in them.
  const bool active = c < per_row && col < a.k;
  const bool lead = (threadIdx.x % kLanes) == 0;
  const std::int64_t total_rows = a.batch * a.rows;
  for (std::int64_t grow = blockIdx.y; grow < total_rows; grow += gridDim.y) {
    float v[kChunk];
    if (active) {
      load(grow, col, v);
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) v[j] = 0.0f;
    }
    float gmax = 0.0f;
    if constexpr (kLanes > 1) gmax = group_max<kLanes>(chunk_absmax(v));
    else if constexpr (kKind == Kind::kNvfp4 || kKind == Kind::kMxfp4 || kKind == Kind::kMxfp8)
      gmax = chunk_absmax(v);
    if (!active) continue;
    const std::int64_t b = a.batch == 1 ? 0 : grow / a.rows;
    const std::int64_t r = a.batch == 1 ? grow : grow % a.rows;
    float param = 0.0f;
    if constexpr (kKind == Kind::kNvfp4 || kKind == Kind::kFp8Scaled)
      param = a.scale_in[a.scale_per_row ? grow : b];
    encode_chunk<kKind, kVec>(a, v, gmax, param, b, r, col, lead);
  }
}

// Per-row schemes: one CTA per row of [B*M, K]. Pass 1: row absmax -> row scale (written to
// `row_scale_out[row]`); pass 2: the chunk body with that scale.
//   kFp8Scaled: s = fp8_token_scale(amax)      (FP8 per-token)
//   kNvfp4:     gs = nvfp4_global_scale(amax)  (NVFP4 per-token)
template <typename T, Kind kKind, bool kVec>
__global__ void __launch_bounds__(256) quantize_rows_kernel(QuantArgs a, float* row_scale_out) {
  constexpr int kLanes = lanes_per_group<kKind>();
  __shared__ float warp_max[32];
  __shared__ float row_scale;
  const std::int64_t grow = blockIdx.x;
  const T* row = static_cast<const T*>(a.x) + grow * a.k;
  const std::int64_t per_row = padded_chunks<kKind>(a.k);
  float m = 0.0f;
  for (std::int64_t c = threadIdx.x; c * kChunk < a.k; c += blockDim.x) {
    float v[kChunk];
    load_chunk<T, kVec>(row, c * kChunk, a.k, v);
    m = absmax_accumulate(m, chunk_absmax(v));
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
  const float param = row_scale;
  const std::int64_t b = grow / a.rows;
  const std::int64_t r = grow % a.rows;
  // Every thread runs the same number of iterations (warp-uniform) for the group shuffles.
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
    if (active) encode_chunk<kKind, kVec>(a, v, gmax, param, b, r, c * kChunk, threadIdx.x % kLanes == 0);
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
  const float s = tile_scale;
  for (std::int64_t r = tr * 128 + lane_r; r < r_end; r += 16) {
    if (col >= a.k) break;
    float v[kChunk];
    load_chunk<T, kVec>(static_cast<const T*>(a.x) + (b * a.rows + r) * a.k, col, a.k, v);
    encode_chunk<Kind::kFp8Scaled, kVec>(a, v, 0.0f, s, b, r, col, false);
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
    for (std::int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
      float v[kChunk];
      load(row0 + r, c * kChunk, v);
      m = absmax_accumulate(m, chunk_absmax(v));
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

// Writes 0 to the padding bytes of swizzled block-scale buffers (rows >= M or columns >= Kb).
template <typename = void>
__global__ void zero_scale_padding_kernel(std::uint8_t* scales, std::int64_t batch,
                                          std::int64_t rows, std::int64_t kb, ScaleLayout layout) {
  const std::int64_t mp = scale_padded_rows(layout, rows);
  const std::int64_t kp = scale_padded_cols(layout, kb);
  const std::int64_t tk = kp / 4;
  const std::int64_t total = batch * mp * kp;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t o = i % (mp * kp);
    std::int64_t r, c;
    if (layout == ScaleLayout::kSwizzled128x4) {
      const std::int64_t w = o % 512, t = o / 512;
      r = 128 * (t / tk) + 32 * ((w % 16) / 4) + w / 16;
      c = 4 * (t % tk) + (w % 4);
    } else {
      const std::int64_t w = o % 32, t = o / 32;
      r = 8 * (t / tk) + w / 4;
      c = 4 * (t % tk) + (w % 4);
    }
    if (r >= rows || c >= kb) scales[i] = 0;
  }
}

}  // namespace moekit::cuda::quant_detail
