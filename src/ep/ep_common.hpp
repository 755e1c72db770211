// Internal: what the naive and all-to-all expert-parallel PrepareFinalize share: the supports()
// checks, the collective setup (handshake, expert owners), the local quantization of the GEMM1
// input, and the split of a QuantizedView into per-row pieces (that travel with their tokens) and
// per-tensor ones (static, equal on every rank: they stay local).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ep/ep_ops.hpp"
#include "framework/byte_carver.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"

namespace moekit::ep {

// Rows [0, n) of a tensor with a leading row dimension (contiguous).
TensorView first_rows(const TensorView& t, std::int64_t n);
// Row r (and the following rows) of a contiguous tensor: the view from row `first`, n rows.
TensorView row_range(const TensorView& t, std::int64_t first, std::int64_t n);
std::size_t bytes_per_row(const TensorView& t);

// The quantized GEMM1 input pieces for `rows` rows (values, scales, global scale per the scheme,
// LINEAR block scales); kBF16: values [rows, H] of `input_dtype` (the activations pass through).
QuantizedView take_quantized(detail::ByteCarver& c, const MoeProblem& problem, std::int64_t rows,
                             DType input_dtype);
// Per-tensor pieces ([1]) of a scheme: FP8 per-tensor scales, NVFP4 global scale.
std::vector<TensorView*> pieces(QuantizedView& q);  // defined pieces: values, scales, global
std::vector<bool> per_tensor_flags(const QuantizedView& q);  // parallel to pieces(q)

class EpPrepareFinalizeBase : public ModularPrepareFinalize {
 public:
  EpPrepareFinalizeBase(std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops,
                        const MoeProblem& problem, EpPrepareFinalizeOptions options);
  std::string name() const override;
  Device device() const override { return ops_->device(); }
  ActivationFormat activation_format() const override { return format_; }
  std::int64_t max_tokens_per_rank() const override {
    return batched() ? capacity_ : 0;
  }
  int num_dispatchers() const override { return batched() ? ranks_ : 0; }
  Support supports(const MoeProblem& problem) const override;
  void setup(const MoeProblem& problem, StreamHandle stream) override;
  bool collective() const override { return true; }
  bool finalize_is_copy(ReducePolicy) const override { return false; }

 protected:
  bool batched() const { return format_ == ActivationFormat::kBatched; }
  bool partial_sums() const { return options_.expert_reduce == ReducePolicy::kAlreadyReduced; }
  DType input_dtype(const MoeProblem& p) const {
    return p.apply_router_weight_on_input() ? DType::kF32 : p.activation_dtype;
  }
  // Quantizes x [m, H] (scaled by the router weight first for weight-on-input routing) into the
  // first m rows of `local` (capacity rows); per-tensor pieces get the static scale. kBF16: the
  // input rows are copied. Rows [m, capacity) of per-row pieces are zeroed when `zero_padding`.
  void quantize_local(const MoeProblem& problem, const TensorView& x,
                      const TensorView& topk_weights, const TensorView& static_scale,
                      const TensorView& scaled, QuantizedView& local, bool zero_padding,
                      StreamHandle stream);
  void check_policy(ReducePolicy policy) const;

  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<EpOps> ops_;
  EpPrepareFinalizeOptions options_;
  ActivationFormat format_;
  int ranks_ = 1, rank_ = 0;
  std::int64_t capacity_ = 0;  // C: tokens per rank (the chunk problem's num_tokens)
  std::vector<int> owner_;     // global expert -> rank (setup)
  Buffer expert_map_;          // [E] i32 on device() (setup)
  bool set_up_ = false;
};

}  // namespace moekit::ep
