#include "cpu/moe/expert_slice.hpp"

#include <vector>

#include "moekit/core/error.hpp"

namespace moekit::cpu {

namespace {

TensorView slice_leading(const Tensor& t, int expert) {
  if (!t.defined()) return {};
  const Shape& s = t.shape();
  MOEKIT_CHECK(s.rank() >= 1 && expert >= 0 && expert < s[0], "expert_slice: expert ", expert,
               " out of range for ", t.view().str());
  std::vector<std::int64_t> rest;
  for (int d = 1; d < s.rank(); ++d) rest.push_back(s[d]);
  if (rest.empty()) rest.push_back(1);
  const Shape inner(rest);
  auto* base = static_cast<unsigned char*>(t.data());
  const std::size_t offset = static_cast<std::size_t>(expert) *
                             static_cast<std::size_t>(inner.numel()) * dtype_size(t.dtype());
  return TensorView(base + offset, t.dtype(), inner, t.device());
}

}  // namespace

QuantizedView expert_slice(const QuantizedTensor& q, int expert) {
  QuantizedView v;
  v.config = q.config;
  v.values = slice_leading(q.values, expert);
  v.scales = slice_leading(q.scales, expert);
  v.global_scale = slice_leading(q.global_scale, expert);
  return v;
}

void dequantize_expert(const QuantizedTensor& q, int expert, float* out) {
  const QuantizedView v = expert_slice(q, expert);
  const std::int64_t rows = v.values.size(0);
  std::int64_t cols = v.values.size(1);
  if (q.values.dtype() == DType::kE2M1x2) cols *= 2;
  dequantize(v, TensorView(out, DType::kF32, Shape{rows, cols}));
}

}  // namespace moekit::cpu
