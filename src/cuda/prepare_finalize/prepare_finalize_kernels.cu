// Small device kernels of the CUDA PrepareFinalize: weight-on-input scaling, iota source rows,
// f32 <-> bf16 row conversion. Grid-stride, asynchronous, no allocation.
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/runtime/cuda_check.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::cuda {

namespace {

unsigned int grid_for(std::int64_t n) {
  return static_cast<unsigned int>(std::clamp<std::int64_t>((n + 255) / 256, 1, 132 * 16));
}

__device__ __forceinline__ float load_f32(const void* p, bool bf16, std::int64_t i) {
  return bf16 ? bf16_to_float(static_cast<const std::uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

__global__ void scale_rows_kernel(const void* x, bool bf16, const float* w, int k, std::int64_t m,
                                  std::int64_t h, float* out) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * h;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __fmul_rn(load_f32(x, bf16, i), w[(i / h) * k]);
  }
}

__global__ void iota_kernel(std::int32_t* rows, std::int64_t n) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    rows[i] = static_cast<std::int32_t>(i);
  }
}

__global__ void convert_kernel(const void* src, bool src_bf16, void* dst, bool dst_bf16,
                               std::int64_t n) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = load_f32(src, src_bf16, i);
    if (dst_bf16) static_cast<std::uint16_t*>(dst)[i] = float_to_bf16(v);
    else static_cast<float*>(dst)[i] = v;
  }
}

}  // namespace

void scale_rows_by_weight(const TensorView& x, const TensorView& topk_weights,
                          const TensorView& out, StreamHandle stream) {
  const std::int64_t m = x.size(0), h = x.size(1);
  if (m * h == 0) return;
  scale_rows_kernel<<<grid_for(m * h), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      x.data, x.dtype == DType::kBF16, static_cast<const float*>(topk_weights.data),
      static_cast<int>(topk_weights.size(1)), m, h, static_cast<float*>(out.data));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void iota_rows(const TensorView& rows, StreamHandle stream) {
  const std::int64_t n = rows.numel();
  if (n == 0) return;
  iota_kernel<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<std::int32_t*>(rows.data), n);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

void convert_rows(const TensorView& src, const TensorView& output, StreamHandle stream) {
  MOEKIT_CHECK_ARG(src.numel() == output.numel(), "expert_output numel", output.numel(), src.numel());
  const std::int64_t n = src.numel();
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (src.dtype == output.dtype) {
    MOEKIT_CUDA_CHECK(cudaMemcpyAsync(output.data, src.data, output.nbytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  convert_kernel<<<grid_for(n), 256, 0, s>>>(src.data, src.dtype == DType::kBF16, output.data,
                                             output.dtype == DType::kBF16, n);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::cuda
