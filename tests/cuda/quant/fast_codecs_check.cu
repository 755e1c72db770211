// Kernels of fast_codecs_test.cpp: every fp32 bit pattern through the fast device codecs
// (src/cuda/quant/fast_codecs.cuh) and the normative ones (moekit/quant/codecs.hpp), counting the
// inputs whose codes differ and keeping the smallest such input.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quant/fast_codecs.cuh"
#include "cuda/quant/fast_codecs_check.hpp"

namespace moekit::cuda_test {
namespace {

using cuda::quant_detail::e2m1_code;
using cuda::quant_detail::kE2m1OfE4m3;
using cuda::quant_detail::e4m3x4;

// Thread t checks patterns 4t .. 4t+3 (+ multiples of the grid stride) of [begin, begin + count);
// pattern p goes to byte lane p % 4 of one e4m3x4 call, so every lane of the packed conversion
// (both halves of both cvt instructions) is exercised.
__global__ void check_all_kernel(std::uint64_t begin, std::uint64_t count, int which,
                                 unsigned long long* bad, unsigned int* first_bad,
                                 unsigned long long* checked) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x * 4;
  unsigned long long mine = 0;
  for (std::uint64_t i = (blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x) * 4;
       i < count; i += stride) {
    std::uint32_t u[4];
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      u[j] = static_cast<std::uint32_t>(begin + i + static_cast<std::uint64_t>(j));
      x[j] = __uint_as_float(u[j]);
    }
    std::uint32_t got[4], want[4];
    if (which == 2) {
      // MX block scales: byte and multiplier bits, both rules, E2M1 and E4M3 element maxima,
      // packed into one comparison per input.
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        got[j] = 0;
        want[j] = 0;
        for (int r = 0; r < 2; ++r) {
          const MxRule rule = r == 0 ? MxRule::kRceil : MxRule::kFloor;
          std::uint8_t bg4, bw4, bg8, bw8;
          const float g4 = cuda::quant_detail::mx_block_scale_fast<2>(x[j], rule, &bg4);
          const float w4 = mxfp4_block_scale(x[j], rule, &bw4);
          const float g8 = cuda::quant_detail::mx_block_scale_fast<8>(x[j], rule, &bg8);
          const float w8 = mxfp8_block_scale(x[j], rule, &bw8);
          got[j] |= (bg4 != bw4 || __float_as_uint(g4) != __float_as_uint(w4) || bg8 != bw8 ||
                     __float_as_uint(g8) != __float_as_uint(w8))
                        ? 1u
                        : 0u;
        }
      }
    } else if (which == 3) {
      // NVFP4 block scale with the fast e4m3 decode against the normative one, every vmax, for
      // global scales from tiny to huge (incl. 1 and a calibrated-looking 2688 / amax).
      const float kGs[] = {1.0f, 368.2191162f, 0.37f, 1.0e-3f, 3.1e4f, 2.688e33f, 7.9e-39f};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        got[j] = 0;
        want[j] = 0;
        for (float gs : kGs) {
          const float gs_c6 = __fmul_rn(gs, kRcp6);
          const float inv_gs = __fdiv_rn(1.0f, gs);
          std::uint8_t bg, bw;
          const float g = cuda::quant_detail::nvfp4_block_scale_fast(x[j], gs_c6, inv_gs, &bg);
          const float w = nvfp4_block_scale(x[j], gs, &bw);
          got[j] |= (bg != bw || __float_as_uint(g) != __float_as_uint(w)) ? 1u : 0u;
        }
      }
    } else if (which == 0) {
      const std::uint32_t w = e4m3x4(x[0], x[1], x[2], x[3]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        got[j] = (w >> (8 * j)) & 0xFFu;
        want[j] = float_to_e4m3(x[j]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        got[j] = e2m1_code(x[j], kE2m1OfE4m3);
        want[j] = float_to_e2m1(x[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (got[j] != want[j]) {
        atomicAdd(bad, 1ull);
        atomicMin(first_bad, u[j]);
      }
    }
    mine += 4;
  }
  atomicAdd(checked, mine);
}

__global__ void e2m1_table_diff_kernel(int* diff) {
  __shared__ std::uint8_t t[256];
  cuda::quant_detail::fill_e2m1_table(t);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += static_cast<int>(blockDim.x))
    if (t[i] != kE2m1OfE4m3[i]) atomicAdd(diff, 1);
}

}  // namespace

int e2m1_table_mismatches(int threads) {
  int* d = nullptr;
  if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return -1;
  cudaMemset(d, 0, sizeof(int));
  e2m1_table_diff_kernel<<<1, threads>>>(d);
  int h = -1;
  if (cudaGetLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) h = -1;
  else cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  return h;
}

FastCodecCheck check_fast_codec_all_inputs(FastCodec codec) {
  FastCodecCheck r;
  unsigned long long* bad = nullptr;
  unsigned long long* checked = nullptr;
  unsigned int* first = nullptr;
  if (cudaMalloc(&bad, sizeof(*bad)) != cudaSuccess) return r;
  if (cudaMalloc(&checked, sizeof(*checked)) != cudaSuccess) return r;
  if (cudaMalloc(&first, sizeof(*first)) != cudaSuccess) return r;
  cudaMemset(bad, 0, sizeof(*bad));
  cudaMemset(checked, 0, sizeof(*checked));
  cudaMemset(first, 0xFF, sizeof(*first));
  const std::uint64_t total = std::uint64_t{1} << 32;
  // Four launches of 2^30 patterns (each one well under a second on an H100-class GPU).
  for (std::uint64_t b = 0; b < total; b += std::uint64_t{1} << 30) {
    const int which = codec == FastCodec::kE4M3      ? 0
                      : codec == FastCodec::kE2M1    ? 1
                      : codec == FastCodec::kMxScale ? 2
                                                     : 3;
    check_all_kernel<<<132 * 8, 256>>>(b, std::uint64_t{1} << 30, which, bad, first, checked);
  }
  r.launched = cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  unsigned long long nbad = 0, nchecked = 0;
  unsigned int f = 0;
  cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost);
  cudaMemcpy(&nchecked, checked, sizeof(nchecked), cudaMemcpyDeviceToHost);
  cudaFree(checked);
  cudaMemcpy(&f, first, sizeof(f), cudaMemcpyDeviceToHost);
  cudaFree(bad);
  cudaFree(first);
  r.mismatches = nbad;
  r.checked = nchecked;
  r.first_mismatch = f;
  return r;
}

}  // namespace moekit::cuda_test
