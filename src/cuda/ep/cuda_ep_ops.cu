// The CUDA implementation of EpOps (src/ep/ep_ops.hpp): the cuda quantize backend and the CUDA
// permute / gather / finalize kernels (cuda/permute/, cuda/finalize/). All asynchronous on the
// stream without allocation, except download(), which synchronizes.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/permute/permute_kernels.hpp"
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "ep/ep_ops.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit::ep {
namespace {

cudaStream_t as_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

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
    // out row r = src row index[r], zeros where index < 0: the permute module's row gather.
    cuda::GatherArgs g;
    g.src = src.data;
    g.row_bytes = static_cast<std::int64_t>(rb);
    g.sorted_ids = index.ptr<const std::int32_t>();
    g.top_k = 1;
    g.max_rows = rows;
    g.out = out.data;
    cuda::gather_rows(g, stream);
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
