#include "moekit/core/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/device_runtime.hpp"
#include "moekit/core/error.hpp"

namespace moekit {

std::string Device::str() const {
  return is_host() ? std::string("host") : "cuda:" + std::to_string(index);
}

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::vector<std::int64_t>(dims)) {}

Shape::Shape(const std::vector<std::int64_t>& dims) {
  MOEKIT_CHECK_ARG(dims.size() <= static_cast<std::size_t>(kMaxRank), "shape rank",
                   "<= " + std::to_string(kMaxRank), dims.size());
  rank_ = static_cast<int>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    MOEKIT_CHECK_ARG(dims[i] >= 0, "shape[" + std::to_string(i) + "]", ">= 0", dims[i]);
    dims_[i] = dims[i];
  }
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if ((*this)[i] != o[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank_; ++i) os << (i ? ", " : "") << (*this)[i];
  os << ']';
  return os.str();
}

static Shape contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> s(static_cast<std::size_t>(shape.rank()));
  std::int64_t acc = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    s[static_cast<std::size_t>(i)] = acc;
    acc *= shape[i];
  }
  return Shape(s);
}

TensorView::TensorView(void* d, DType t, Shape s, Device dev)
    : data(d), dtype(t), shape(s), strides(contiguous_strides(s)), device(dev) {}

TensorView::TensorView(void* d, DType t, Shape s, Shape st, Device dev)
    : data(d), dtype(t), shape(s), strides(st), device(dev) {
  MOEKIT_CHECK_ARG(st.rank() == s.rank(), "strides rank", s.rank(), st.rank());
}

bool TensorView::is_contiguous() const {
  std::int64_t acc = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != acc) return false;
    acc *= shape[i];
  }
  return true;
}

std::string TensorView::str() const {
  return std::string(dtype_name(dtype)) + shape.str() + " " + device.str();
}

Buffer::Buffer(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_host()) {
    std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    data_ = std::aligned_alloc(kHostAlignment, rounded);
    if (!data_) MOEKIT_FAIL("host allocation of ", bytes, " bytes failed");
  } else {
    data_ = device_runtime::allocate(bytes, device.index);
  }
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) {
    if (device_.is_host())
      std::free(data_);
    else
      device_runtime::release(data_, device_.index);
  }
  data_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& o) noexcept : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Tensor::Tensor(DType dtype, Shape shape, Device device)
    : buffer_(static_cast<std::size_t>(shape.numel()) * dtype_size(dtype), device),
      view_(buffer_.data(), dtype, shape, device) {}

Tensor Tensor::zeros(DType dtype, Shape shape, Device device) {
  Tensor t(dtype, shape, device);
  if (device.is_host() && t.nbytes()) {
    std::memset(t.data(), 0, t.nbytes());
  } else if (t.nbytes()) {
    std::vector<unsigned char> z(t.nbytes(), 0);
    device_runtime::memcpy(t.data(), z.data(), z.size(), device_runtime::CopyKind::kHostToDevice);
  }
  return t;
}

void copy(const TensorView& dst, const TensorView& src) {
  MOEKIT_CHECK_ARG(dst.nbytes() == src.nbytes(), "copy: dst bytes", src.nbytes(), dst.nbytes());
  MOEKIT_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy: both tensors must be contiguous, got ",
               dst.str(), " and ", src.str());
  if (src.nbytes() == 0) return;
  if (dst.device.is_host() && src.device.is_host()) {
    std::memcpy(dst.data, src.data, src.nbytes());
    return;
  }
  using device_runtime::CopyKind;
  CopyKind kind = src.device.is_host()   ? CopyKind::kHostToDevice
                  : dst.device.is_host() ? CopyKind::kDeviceToHost
                                         : CopyKind::kDeviceToDevice;
  device_runtime::memcpy(dst.data, src.data, src.nbytes(), kind);
}

}  // namespace moekit
