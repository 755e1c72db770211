// The host implementation of EpOps: the reference ops of quant/ and permute/, and plain loops.
#include <cstring>

#include "ep/ep_ops.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit::ep {
namespace {

class CpuEpOps final : public EpOps {
 public:
  Device device() const override { return Device::host(); }
  void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                const TensorView& static_scale, StreamHandle) override {
    ::moekit::quantize(x, config, out, QuantBackend::kReference, static_scale);
  }
  void scale_rows_by_weight(const TensorView& x, const TensorView& w, const TensorView& out,
                            StreamHandle) override {
    const std::int64_t m = x.size(0), h = x.size(1), k = w.size(1);
    for (std::int64_t t = 0; t < m; ++t) {
      const float wt = w.ptr<const float>()[t * k];
      for (std::int64_t c = 0; c < h; ++c) {
        const float v = x.dtype == DType::kF32
                            ? x.ptr<const float>()[t * h + c]
                            : bf16_to_float(x.ptr<const std::uint16_t>()[t * h + c]);
        out.ptr<float>()[t * h + c] = v * wt;
      }
    }
  }
  void gather_rows(const TensorView& src, const TensorView& index, const TensorView& out,
                   StreamHandle) override {
    const std::size_t rb = row_bytes(out);
    MOEKIT_CHECK(row_bytes(src) == rb, "gather_rows: row bytes differ (",
                 src.str(), " vs ", out.str(), ")");
    const auto* idx = index.ptr<const std::int32_t>();
    const auto* s = static_cast<const unsigned char*>(src.data);
    auto* o = static_cast<unsigned char*>(out.data);
    for (std::int64_t r = 0; r < out.size(0); ++r) {
      MOEKIT_CHECK(idx[r] < src.size(0), "gather_rows: index ", idx[r], " >= rows ", src.size(0));
      if (idx[r] < 0)
        std::memset(o + r * rb, 0, rb);
      else
        std::memcpy(o + r * rb, s + static_cast<std::size_t>(idx[r]) * rb, rb);
    }
  }
  void copy(void* dst, const void* src, std::size_t bytes, StreamHandle) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes, StreamHandle) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void upload(void* dst, const void* host, std::size_t bytes, StreamHandle s) override {
    copy(dst, host, bytes, s);
  }
  void download(void* host, const void* src, std::size_t bytes, StreamHandle s) override {
    copy(host, src, bytes, s);
  }
  void unpermute_reduce(const TensorView& expert_out, const TensorView& source_row,
                        const TensorView& topk_weights, const TensorView& out,
                        StreamHandle) override {
    ::moekit::unpermute_reduce(expert_out, source_row, topk_weights, out);
  }
  void iota(const TensorView& rows, StreamHandle) override {
    for (std::int64_t a = 0; a < rows.numel(); ++a)
      rows.ptr<std::int32_t>()[a] = static_cast<std::int32_t>(a);
  }
  void scatter_batched(const TensorView& src, const PermutationView& p, int top_k,
                       const TensorView& out, const TensorView& expert_num_tokens,
                       StreamHandle) override {
    // out[e, i] = src[token of the i-th assignment of e]: the permutation's order, as
    // permute.hpp's scatter_batched.
    const int e_local = static_cast<int>(out.size(0));
    const std::int64_t t_max = out.size(1);
    const std::size_t rb = out.numel() ? out.nbytes() / static_cast<std::size_t>(e_local * t_max)
                                       : 0;
    const auto* off = p.expert_offsets.ptr<const std::int32_t>();
    const auto* sorted = p.sorted_ids.ptr<const std::int32_t>();
    auto* o = static_cast<unsigned char*>(out.data);
    const auto* s = static_cast<const unsigned char*>(src.data);
    if (out.nbytes()) std::memset(o, 0, out.nbytes());
    for (int e = 0; e < e_local; ++e) {
      const std::int64_t n = off[e + 1] - off[e];
      MOEKIT_CHECK(n <= t_max, "batched dispatch: local expert ", e, " receives ", n,
                   " assignments, more than T_max ", t_max);
      expert_num_tokens.ptr<std::int32_t>()[e] = static_cast<std::int32_t>(n);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t t = sorted[off[e] + i] / top_k;
        std::memcpy(o + (e * t_max + i) * rb, s + t * rb, rb);
      }
    }
  }
};

}  // namespace

std::unique_ptr<EpOps> make_cpu_ep_ops() { return std::make_unique<CpuEpOps>(); }

}  // namespace moekit::ep
