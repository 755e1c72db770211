// Tensor views (non-owning: pointer + dtype + shape + strides + device) and owning Buffers.
// Plain C++: device memory is a raw pointer; streams are opaque handles (a cudaStream_t cast to
// void*, nullptr = the default stream).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "moekit/core/dtype.hpp"

namespace moekit {

using StreamHandle = void*;

enum class DeviceKind : std::uint8_t { kHost, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;
  static Device host() { return {DeviceKind::kHost, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::kCuda, i}; }
  bool is_host() const { return kind == DeviceKind::kHost; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// Up to kMaxRank dimensions, int64 extents.
class Shape {
 public:
  static constexpr int kMaxRank = 6;
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims);
  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const;
  std::vector<std::int64_t> vec() const { return {dims_.begin(), dims_.begin() + rank_}; }
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[2, 3, 4]"

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// A non-owning view. Strides are in elements (bytes for 1-byte types). A default-constructed view
// is "absent" (data == nullptr, rank 0) and is how optional tensors are passed.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Shape strides;  // same rank as shape
  Device device = Device::host();

  TensorView() = default;
  // Contiguous (row-major) view.
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::host());
  TensorView(void* data, DType dtype, Shape shape, Shape strides, Device device);

  bool defined() const { return data != nullptr || shape.rank() > 0; }
  int rank() const { return shape.rank(); }
  std::int64_t size(int dim) const { return shape[dim < 0 ? dim + rank() : dim]; }
  std::int64_t numel() const { return shape.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  std::string str() const;  // "bf16[4, 8] host"
};

// Owning, aligned memory on the host or a CUDA device. Movable, not copyable.
class Buffer {
 public:
  static constexpr std::size_t kHostAlignment = 256;
  Buffer() = default;
  Buffer(std::size_t bytes, Device device);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  Device device() const { return device_; }
  void reset();

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_ = Device::host();
};

// An owning tensor: a Buffer plus the view over it.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, Device device = Device::host());
  static Tensor zeros(DType dtype, Shape shape, Device device = Device::host());

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT: implicit by design
  void* data() const { return view_.data; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(view_.data);
  }
  DType dtype() const { return view_.dtype; }
  const Shape& shape() const { return view_.shape; }
  std::int64_t numel() const { return view_.numel(); }
  std::size_t nbytes() const { return view_.nbytes(); }
  Device device() const { return view_.device; }
  bool defined() const { return view_.defined(); }

 private:
  Buffer buffer_;
  TensorView view_;
};

// Copies between host and device (or within one); sizes must match. Synchronous.
void copy(const TensorView& dst, const TensorView& src);

}  // namespace moekit
