// The CUDA implementation of EpOps (src/ep/ep_ops.hpp): the cuda quantize backend, the CUDA
// permute/finalize kernels of permute_cuda.hpp, and one raw-row gather kernel of its own. All
// asynchronous on the stream without allocation, except download(), which synchronizes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "ep/ep_ops.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit::ep {
namespace {

cudaStream_t as_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

std::size_t row_bytes(const TensorView& t) {
  std::int64_t per = 1;
  for (int d = 1; d < t.rank(); ++d) per *= t.size(d);
  return static_cast<std::size_t>(per) * dtype_size(t.dtype);
}

// out row r = src row index[r] (zero where index < 0). Words of 16, 4 or 1 bytes, as the row
// size and alignment allow; one CTA per few rows, grid-stride.
template <typename Word>
__global__ void gather_rows_kernel(const Word* __restrict__ src, const std::int32_t* __restrict__ index,
                                   Word* __restrict__ out, std::int64_t rows,
                                   std::int64_t words_per_row) {
  const std::int64_t total = rows * words_per_row;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / words_per_row, w = i - r * words_per_row;
    const std::int32_t s = index[r];
    Word v{};
    if (s >= 0) v = src[static_cast<std::int64_t>(s) * words_per_row + w];
    out[i] = v;
  }
}

template <typename Word>
void launch_gather(const void* src, const std::int32_t* index, void* out, std::int64_t rows,
                   std::size_t rb, cudaStream_t stream) {
  const std::int64_t words = static_cast<std::int64_t>(rb / sizeof(Word));
  const std::int64_t total = rows * words;
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<std::int64_t>((total + 255) / 256, 1, 132 * 32));
  gather_rows_kernel<Word><<<blocks, 256, 0, stream>>>(static_cast<const Word*>(src), index,
                                                       static_cast<Word*>(out), rows, words);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

class CudaEpOps final : public EpOps {
 public:
  explicit CudaEpOps(int device) : device_(device) {}
  Device device() const override { return Device::cuda(device_); }

  void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                const TensorView& static_scale, StreamHandle stream) override {
    ::moekit::quantize(x, config, out, QuantBackend::kCuda, static_scale, stream);
  }
  void scale_rows_by_weight(const TensorView& x, const TensorView& w, const TensorView& out,
                            StreamHandle stream) override {
    cuda::scale_rows_by_weight(x, w, out, stream);
  }
  void gather_rows(const TensorView& src, const TensorView& index, const TensorView& out,
                   StreamHandle stream) override {
    const std::size_t rb = row_bytes(out);
    MOEKIT_CHECK(row_bytes(src) == rb, "gather_rows: row bytes differ (", src.str(), " vs ",
                 out.str(), ")");
    const std::int64_t rows = out.size(0);
    if (rows == 0 || rb == 0) return;
    const auto* idx = index.ptr<const std::int32_t>();
    const auto aligned = [&](std::size_t a) {
      return rb % a == 0 && reinterpret_cast<std::uintptr_t>(src.data) % a == 0 &&
             reinterpret_cast<std::uintptr_t>(out.data) % a == 0;
    };
    if (aligned(16))
      launch_gather<uint4>(src.data, idx, out.data, rows, rb, as_stream(stream));
    else if (aligned(4))
      launch_gather<std::uint32_t>(src.data, idx, out.data, rows, rb, as_stream(stream));
    else
      launch_gather<std::uint8_t>(src.data, idx, out.data, rows, rb, as_stream(stream));
  }
  void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) override {
    // cudaMemcpyDefault: a static input scale may still live on the host (weights in place).
    if (bytes)
      MOEKIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)));
  }
  void zero(void* dst, std::size_t bytes, StreamHandle stream) override {
    if (bytes) MOEKIT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, as_stream(stream)));
  }
  void upload(void* dst, const void* host, std::size_t bytes, StreamHandle stream) override {
    // Pageable host memory: the copy is staged before cudaMemcpyAsync returns, so the host vector
    // may change afterwards (the plan vectors are reused by the next prepare).
    if (bytes)
      MOEKIT_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, as_stream(stream)));
  }
  void download(void* host, const void* src, std::size_t bytes, StreamHandle stream) override {
    if (bytes)
      MOEKIT_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)));
    MOEKIT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  }
  void unpermute_reduce(const TensorView& expert_out, const TensorView& source_row,
                        const TensorView& topk_weights, const TensorView& out,
                        StreamHandle stream) override {
    unpermute_reduce_cuda(expert_out, source_row, topk_weights, out, stream);
  }
  void iota(const TensorView& rows, StreamHandle stream) override {
    cuda::iota_rows(rows, stream);
  }
  void scatter_batched(const TensorView& src, const PermutationView& p, int top_k,
                       const TensorView& out, const TensorView& expert_num_tokens,
                       StreamHandle stream) override {
    scatter_batched_cuda(src, p, top_k, out, expert_num_tokens, stream);
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<EpOps> make_cuda_ep_ops(int device) { return std::make_unique<CudaEpOps>(device); }

}  // namespace moekit::ep
