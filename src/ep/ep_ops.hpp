// Internal: the device-specific steps of the expert-parallel PrepareFinalize implementations
// (src/ep/ep_naive.cpp, src/ep/ep_all_to_all.cpp), so that one algorithm serves CPU ranks (host
// loops, src/ep/cpu_ep_ops.cpp) and GPU ranks (CUDA kernels, src/cuda/ep/cuda_ep_ops.cpp). Every
// step is asynchronous on `stream` on the GPU unless it says otherwise; tensors live on device().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "moekit/core/tensor.hpp"
#include "moekit/permute/permute.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit::ep {

// Bytes of one row of t (all dimensions after the first).
inline std::size_t row_bytes(const TensorView& t) {
  std::int64_t per = 1;
  for (int d = 1; d < t.rank(); ++d) per *= t.size(d);
  return static_cast<std::size_t>(per) * dtype_size(t.dtype);
}

class EpOps {
 public:
  virtual ~EpOps() = default;
  virtual Device device() const = 0;
  // quantize() with the device's backend (reference on the host, cuda: byte-identical).
  virtual void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                        const TensorView& static_scale, StreamHandle stream) = 0;
  // out [M, H] f32 = x * topk_weights[:, 0] (weight on the input, k == 1).
  virtual void scale_rows_by_weight(const TensorView& x, const TensorView& topk_weights,
                                    const TensorView& out, StreamHandle stream) = 0;
  // out[r, :] = src[index[r], :] as raw bytes (any dtype, same trailing dims), zero bytes where
  // index[r] < 0. index: i32 [R] on device(); out: [R, ...].
  virtual void gather_rows(const TensorView& src, const TensorView& index, const TensorView& out,
                           StreamHandle stream) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes, StreamHandle stream) = 0;
  virtual void zero(void* dst, std::size_t bytes, StreamHandle stream) = 0;
  // Host <-> device(); download waits for the stream (a host synchronization on the GPU).
  virtual void upload(void* dst, const void* host, std::size_t bytes, StreamHandle stream) = 0;
  virtual void download(void* host, const void* src, std::size_t bytes, StreamHandle stream) = 0;
  // permute.hpp's unpermute_reduce (bit-identical on every device).
  virtual void unpermute_reduce(const TensorView& expert_out, const TensorView& source_row,
                                const TensorView& topk_weights, const TensorView& out,
                                StreamHandle stream) = 0;
  // rows[a] = a for a in [0, rows.numel()).
  virtual void iota(const TensorView& rows, StreamHandle stream) = 0;
  // The batched format: out[e, i, :] = src[token of the i-th assignment of local expert e] per
  // `permutation` (device copies of a host-computed compute_permutation, block_size 1), zero
  // bytes past expert_num_tokens[e] (written).
  virtual void scatter_batched(const TensorView& src, const PermutationView& permutation,
                               int top_k, const TensorView& out,
                               const TensorView& expert_num_tokens, StreamHandle stream) = 0;
};

std::unique_ptr<EpOps> make_cpu_ep_ops();
std::unique_ptr<EpOps> make_cuda_ep_ops(int device);  // CUDA builds

}  // namespace moekit::ep
