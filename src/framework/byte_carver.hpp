// Internal: lays typed pieces out in one byte workspace (256-byte aligned). The same sequence of
// take() calls sizes a workspace (base == nullptr) and then carves it, so sizes cannot drift.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moekit/core/error.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/framework/problem.hpp"

namespace moekit::detail {

class ByteCarver {
 public:
  static constexpr std::size_t kAlign = 256;
  explicit ByteCarver(void* base = nullptr, Device device = Device::host(),
                      std::size_t capacity = 0)
      : base_(static_cast<unsigned char*>(base)), device_(device), capacity_(capacity) {}
  explicit ByteCarver(const TensorView& ws)
      : ByteCarver(ws.data, ws.device, ws.defined() ? ws.nbytes() : 0) {}

  TensorView take(DType dtype, const Shape& shape) {
    const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
    TensorView v(base_ ? base_ + used_ : nullptr, dtype, shape, device_);
    used_ += (bytes + kAlign - 1) / kAlign * kAlign;
    MOEKIT_CHECK(!base_ || used_ <= capacity_, "workspace too small: needs at least ", used_,
                 " bytes, has ", capacity_);
    return v;
  }
  std::size_t used() const { return used_; }
  TensorSpec spec() const {
    return {DType::kU8, Shape{static_cast<std::int64_t>(used_ ? used_ : 1)}};
  }

 private:
  unsigned char* base_;
  Device device_;
  std::size_t capacity_;
  std::size_t used_ = 0;
};

}  // namespace moekit::detail
