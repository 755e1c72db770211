#include "io/load_util.hpp"

#include "io/non_finite.hpp"

#include <cmath>
#include <sstream>
#include <vector>

namespace moekit::io::detail {

namespace {
std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) s += (s.empty() ? "" : " or ") + std::string(dtype_name(d));
  return s;
}
}  // namespace

TensorView optional_tensor(const Checkpoint& ck, const std::string& name,
                           std::initializer_list<DType> dtypes, const Shape& shape) {
  if (!ck.contains(name)) return {};
  const SafetensorsFile& f = ck.file_of(name);
  const SafetensorsTensorInfo& info = f.info(name);
  std::optional<DType> dt = dtype_from_safetensors(info.dtype);
  bool ok = false;
  for (DType d : dtypes) ok = ok || (dt && *dt == d);
  if (!ok) fail_tensor(ck, name, "dtype", dtype_list(dtypes), info.dtype);
  TensorView v = f.view(name);
  if (!(v.shape == shape)) fail_tensor(ck, name, "shape", shape.str(), v.shape.str());
  check_finite(ck, name, v);
  return v;
}

void check_finite(const Checkpoint& ck, const std::string& name, const TensorView& v) {
  const std::string bad = non_finite_message(v);
  if (!bad.empty()) MOEKIT_FAIL("checkpoint '", ck.dir(), "': tensor '", name, "' ", bad);
}

TensorView require_tensor(const Checkpoint& ck, const std::string& name,
                          std::initializer_list<DType> dtypes, const Shape& shape) {
  if (!ck.contains(name)) fail_tensor(ck, name, "", "present", "missing");
  return optional_tensor(ck, name, dtypes, shape);
}

float read_scalar(const Checkpoint& ck, const std::string& name) {
  if (!ck.contains(name)) fail_tensor(ck, name, "", "present", "missing");
  TensorView v = ck.view(name);
  if (!(v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16))
    fail_tensor(ck, name, "dtype", "f32, bf16 or f16", dtype_name(v.dtype));
  if (v.numel() != 1 || v.rank() > 1)
    fail_tensor(ck, name, "shape", "[] or [1] (a scalar)", v.shape.str());
  float out;
  to_f32(v, &out);
  return out;
}

float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  float mag;
  if (exp == 0)
    mag = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    mag = man ? NAN : INFINITY;
  else
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -mag : mag;
}

void to_f32(const TensorView& src, float* dst) {
  const auto* p = static_cast<const std::uint8_t*>(src.data);
  const std::int64_t n = src.numel();
  if (src.dtype == DType::kF32) {
    if (n) std::memcpy(dst, p, static_cast<std::size_t>(n) * 4);
    return;
  }
  MOEKIT_CHECK(src.dtype == DType::kBF16 || src.dtype == DType::kF16,
               "to_f32: dtype: expected f32, bf16 or f16, got ", dtype_name(src.dtype));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t b;
    std::memcpy(&b, p + 2 * i, 2);
    if (src.dtype == DType::kBF16) {
      std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
      std::memcpy(&dst[i], &u, 4);
    } else {
      dst[i] = half_bits_to_float(b);
    }
  }
}

Tensor to_f32_tensor(const TensorView& src) {
  Tensor out(DType::kF32, src.shape);
  to_f32(src, out.ptr<float>());
  return out;
}

Tensor clone(const TensorView& src) {
  Tensor out(src.dtype, src.shape);
  if (src.nbytes()) std::memcpy(out.data(), src.data, src.nbytes());
  return out;
}

}  // namespace moekit::io::detail
