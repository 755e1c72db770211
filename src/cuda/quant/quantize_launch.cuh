// Launch helpers of the chunk-based quantize kernels, generic over the chunk loader so that the
// plain quantize op and the fused activation + quantize op share them. Only kernel launches and
// cudaMemsetAsync / cudaMemcpyAsync on the stream: no allocation, no host synchronization.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/quant/absmax_packed.cuh"
#include "cuda/quant/quantize_kernels.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::cuda::quant_detail {

constexpr int kThreads = 256;

inline unsigned int blocks_for(std::int64_t threads) {
  return static_cast<unsigned int>(std::max<std::int64_t>(1, (threads + kThreads - 1) / kThreads));
}

template <Kind kKind, typename Loader>
void launch_chunks(const QuantArgs& a, const Loader& load, cudaStream_t stream) {
  const std::int64_t per_row = padded_units<kKind>(a.k);
  const std::int64_t rows = a.batch * a.rows;
  if (per_row == 0 || rows == 0) return;
  const dim3 grid(static_cast<unsigned int>((per_row + kChunkThreads - 1) / kChunkThreads),
                  static_cast<unsigned int>(std::min<std::int64_t>(
                      (rows + rows_per_step<kKind, Loader>() - 1) / rows_per_step<kKind, Loader>(), 65535)));
  if (a.k % kChunk == 0) {
    quantize_chunks_kernel<Loader, kKind, true><<<grid, kChunkThreads, 0, stream>>>(a, load);
  } else {
    quantize_chunks_kernel<Loader, kKind, false><<<grid, kChunkThreads, 0, stream>>>(a, load);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

// Whether a loader reads 2-byte elements with 16-byte vectors from one [B*M, K] array
// (RowLoader<bf16 / f16, true>); fused loaders compute their elements.
template <typename Loader>
constexpr bool flat_2byte_loader() {
  if constexpr (requires { Loader::kFlat2Byte; }) {
    return Loader::kFlat2Byte;
  } else {
    return false;
  }
}

// amax pre-pass + in-place conversion into the per-matrix scale buffer `scale` [B]. 2-byte inputs
// read with 16-byte vectors take the flat packed kernel (absmax_packed.cuh; a matrix is one
// contiguous array), the others the loader's chunk kernel.
template <typename Loader>
void launch_tensor_scale(const QuantArgs& a, const Loader& load, float* scale, bool nvfp4,
                         cudaStream_t stream) {
  MOEKIT_CUDA_CHECK(
      cudaMemsetAsync(scale, 0, static_cast<std::size_t>(a.batch) * sizeof(float), stream));
  const std::int64_t per_row = (a.k + kChunk - 1) / kChunk;
  if (per_row > 0 && a.rows > 0) {
    if constexpr (flat_2byte_loader<Loader>()) {
      const std::int64_t words = a.rows * a.k / 8;
      const int sms = current_device_multiprocessors();
      // 8 CTAs of 256 threads per SM over all matrices, each CTA looping over its share.
      const std::int64_t per_cta = static_cast<std::int64_t>(kFlatAbsmaxThreads) * kFlatAbsmaxLoads;
      const std::int64_t gx = std::clamp<std::int64_t>(
          std::min<std::int64_t>((words + per_cta - 1) / per_cta, 8LL * sms / a.batch), 1, 65535);
      flat_absmax_kernel<typename Loader::Elem>
          <<<dim3(static_cast<unsigned int>(gx), static_cast<unsigned int>(a.batch)),
             kFlatAbsmaxThreads, 0, stream>>>(load.x, a.rows * a.k, scale);
    } else {
      // About 4 waves of CTAs in total; each thread then loops over rows.
      const std::int64_t gx = (per_row + kChunkThreads - 1) / kChunkThreads;
      const std::int64_t gy =
          std::clamp<std::int64_t>(4096 / (gx * a.batch), 1, std::min<std::int64_t>(a.rows, 65535));
      absmax_kernel<Loader><<<dim3(static_cast<unsigned int>(gx), static_cast<unsigned int>(gy),
                                   static_cast<unsigned int>(a.batch)),
                              kChunkThreads, 0, stream>>>(load, a.rows, a.k, scale);
    }
    MOEKIT_CUDA_CHECK_LAUNCH();
  }
  amax_to_scale_kernel<><<<blocks_for(a.batch), kThreads, 0, stream>>>(scale, a.batch, nvfp4);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

inline void launch_zero_padding(const QuantArgs& a, cudaStream_t stream) {
  const std::int64_t total = scale_padding_bytes(a.batch, a.rows, a.kb, a.layout);
  if (total == 0) return;
  zero_scale_padding_kernel<><<<std::min<unsigned int>(blocks_for(total), 4096), kThreads, 0,
                              stream>>>(static_cast<std::uint8_t*>(a.scales), a.batch, a.rows,
                                        a.kb, a.layout);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

// Fills the QuantArgs of a [B?, M, K] problem (values / scales from `out`).
inline QuantArgs make_quant_args(std::int64_t batch, std::int64_t rows, std::int64_t k,
                                 const QuantConfig& config, const QuantizedView& out) {
  QuantArgs a;
  a.values = out.values.data;
  a.scales = out.scales.data;
  a.batch = batch;
  a.rows = rows;
  a.k = k;
  a.layout = config.layout;
  a.rule = config.rule == ScaleRule::kFloor ? MxRule::kFloor : MxRule::kRceil;
  const int sfv = scale_block_size(config.scheme);
  a.kb = sfv > 0 ? (k + sfv - 1) / sfv : 0;
  return a;
}

// A per-tensor scheme's per-matrix scale [B] into `scale` (NVFP4's gs, FP8 per-tensor's s): the
// static scale copied, or computed from the input's amax (pre-pass). Returns it (the kernels'
// scale_in).
template <typename Loader>
float* prepare_tensor_scale(const QuantArgs& a, const Loader& load, float* scale,
                            const void* static_scale, bool nvfp4, cudaStream_t stream) {
  if (static_scale) {
    MOEKIT_CUDA_CHECK(cudaMemcpyAsync(scale, static_scale, static_cast<std::size_t>(a.batch) * 4,
                                      cudaMemcpyDeviceToDevice, stream));
  } else {
    launch_tensor_scale(a, load, scale, nvfp4, stream);
  }
  return scale;
}

// The schemes whose kernels only need a chunk loader: bf16, FP8 per-tensor, FP8 1x128, MXFP8,
// MXFP4, NVFP4 (per-tensor gs). Returns false for the others (per-token, 128x128).
template <typename Loader>
bool quantize_chunked(QuantArgs a, QuantScheme scheme, const Loader& load, const QuantizedView& out,
                      const void* static_scale, cudaStream_t stream) {
  switch (scheme) {
    case QuantScheme::kBF16:
      launch_chunks<Kind::kBf16>(a, load, stream);
      return true;
    case QuantScheme::kFP8PerTensor:
      a.scale_in = prepare_tensor_scale(a, load, static_cast<float*>(out.scales.data), static_scale,
                                        /*nvfp4=*/false, stream);
      launch_chunks<Kind::kFp8Scaled>(a, load, stream);
      return true;
    case QuantScheme::kFP8Block1x128:
      launch_chunks<Kind::kFp8Group>(a, load, stream);
      return true;
    case QuantScheme::kMXFP8:
      launch_zero_padding(a, stream);
      launch_chunks<Kind::kMxfp8>(a, load, stream);
      return true;
    case QuantScheme::kMXFP4:
      launch_zero_padding(a, stream);
      launch_chunks<Kind::kMxfp4>(a, load, stream);
      return true;
    case QuantScheme::kNVFP4: {
      a.scale_in = prepare_tensor_scale(a, load, static_cast<float*>(out.global_scale.data),
                                        static_scale, /*nvfp4=*/true, stream);
      launch_zero_padding(a, stream);
      launch_chunks<Kind::kNvfp4>(a, load, stream);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace moekit::cuda::quant_detail
