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
  // The batched format of received tokens (block_size 1): the permutation of topk_ids by local
  // expert, the scatter of src rows into [E_local, T_max, ...] (+ expert_num_tokens) and the
  // batched row of every (token, slot) (-1 where not local), as permute.hpp defines them.
  virtual void permutation(const TensorView& topk_ids, const TensorView& expert_map,
                           int num_local_experts, const PermutationView& out,
                           StreamHandle stream) = 0;
  virtual void scatter_batched(const TensorView& src, const PermutationView& permutation,
                               int top_k, const TensorView& out,
                               const TensorView& expert_num_tokens, StreamHandle stream) = 0;
  virtual void batched_rows(const TensorView& topk_ids, const TensorView& expert_map,
                            const PermutationView& permutation, std::int64_t t_max,
                            const TensorView& batched_row, StreamHandle stream) = 0;
};

std::unique_ptr<EpOps> make_cpu_ep_ops();
std::unique_ptr<EpOps> make_cuda_ep_ops(int device);  // CUDA builds

}  // namespace moekit::ep
