#include "py_arrays.hpp"

#include <sstream>

#include "moekit/core/error.hpp"

namespace moekit::py {

namespace {

// DLPack type codes (dlpack.h DLDataTypeCode); plain numbers so that older nanobind releases,
// whose dtype_code enum lacks the float8 entries, build too.
constexpr std::uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4,
                       kDLFloat8E4M3FN = 10, kDLFloat8E8M0FNU = 14;
// DLPack device types.
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3;

std::string dlpack_dtype_label(const nb::dlpack::dtype& t) {
  std::ostringstream os;
  switch (t.code) {
    case kDLInt: os << "int" << int(t.bits); break;
    case kDLUInt: os << "uint" << int(t.bits); break;
    case kDLFloat: os << "float" << int(t.bits); break;
    case kDLBfloat: os << "bfloat" << int(t.bits); break;
    case kDLFloat8E4M3FN: os << "float8_e4m3fn"; break;
    case kDLFloat8E8M0FNU: os << "float8_e8m0fnu"; break;
    default: os << "dlpack dtype code " << int(t.code) << " bits " << int(t.bits);
  }
  if (t.lanes != 1) os << "x" << int(t.lanes);
  return os.str();
}

bool is_byte_type(DType t) {
  return t == DType::kE4M3 || t == DType::kE8M0 || t == DType::kE2M1x2 || t == DType::kU8;
}

}  // namespace

std::string dtype_label(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kE4M3: return "float8_e4m3fn";
    case DType::kE8M0: return "float8_e8m0fnu (or uint8)";
    case DType::kE2M1x2: return "uint8 (packed fp4 e2m1, two per byte)";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

std::string device_label(const Device& d) {
  return d.is_host() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

std::string shape_label(const std::vector<std::int64_t>& s) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) os << ", ";
    if (s[i] < 0)
      os << '*';
    else
      os << s[i];
  }
  if (s.size() == 1) os << ',';
  os << ')';
  return os.str();
}

std::string shape_label(const Shape& s) { return shape_label(s.vec()); }

void value_error(const std::string& name, const std::string& expected, const std::string& actual) {
  throw nb::value_error((name + ": expected " + expected + ", got " + actual).c_str());
}

void type_error(const std::string& name, const std::string& expected, const std::string& actual) {
  throw nb::type_error((name + ": expected " + expected + ", got " + actual).c_str());
}

ArrayArg import_array(nb::handle obj, const char* name, bool optional) {
  ArrayArg a;
  if (obj.is_none()) {
    if (optional) return a;
    type_error(name, "an array", "None");
  }
  nb::ndarray<> writable;
  if (nb::try_cast(obj, writable, false)) {
    a.array = Array(writable);
  } else if (!nb::try_cast(obj, a.array, false)) {
    // Read-only arrays (a numpy view of a bytes object) cast to Array only.
    type_error(name,
               "an array supporting DLPack or the buffer protocol (torch.Tensor, jax.Array, "
               "cupy.ndarray, numpy.ndarray)",
               std::string(nb::type_name(obj.type()).c_str()));
  }
  const Array& arr = a.array;
  const nb::dlpack::dtype dt = arr.dtype();
  if (dt.lanes != 1) value_error(std::string(name) + " dtype", "a scalar type", dlpack_dtype_label(dt));
  DType t;
  switch (dt.code) {
    case kDLInt:
      if (dt.bits == 32) { t = DType::kI32; break; }
      if (dt.bits == 64) { t = DType::kI64; break; }
      goto bad_dtype;
    case kDLUInt:
      if (dt.bits == 8) { t = DType::kU8; break; }
      if (dt.bits == 16) { t = DType::kBF16; a.bf16_bits = true; break; }
      goto bad_dtype;
    case kDLFloat:
      if (dt.bits == 32) { t = DType::kF32; break; }
      if (dt.bits == 16) { t = DType::kF16; break; }
      goto bad_dtype;
    case kDLBfloat:
      if (dt.bits == 16) { t = DType::kBF16; break; }
      goto bad_dtype;
    case kDLFloat8E4M3FN:
      t = DType::kE4M3;
      break;
    case kDLFloat8E8M0FNU:
      t = DType::kE8M0;
      break;
    default:
    bad_dtype:
      value_error(std::string(name) + " dtype",
                  "one of float32, float16, bfloat16 (or uint16 bfloat16 bits), float8_e4m3fn, "
                  "float8_e8m0fnu, uint8, int32, int64",
                  dlpack_dtype_label(dt));
  }
  Device dev;
  switch (arr.device_type()) {
    case kDLCPU:
    case kDLCUDAHost:
      dev = Device::host();
      break;
    case kDLCUDA:
      dev = Device::cuda(arr.device_id());
      break;
    default:
      value_error(std::string(name) + " device", "cpu or cuda",
                  "DLPack device type " + std::to_string(arr.device_type()));
  }
  const int ndim = static_cast<int>(arr.ndim());
  if (ndim > Shape::kMaxRank)
    value_error(std::string(name) + " rank", "<= " + std::to_string(Shape::kMaxRank),
                std::to_string(ndim));
  std::vector<std::int64_t> shape(static_cast<std::size_t>(ndim)), strides(shape.size());
  for (int i = 0; i < ndim; ++i) {
    shape[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(arr.shape(static_cast<std::size_t>(i)));
    strides[static_cast<std::size_t>(i)] = arr.stride(static_cast<std::size_t>(i));
  }
  std::int64_t acc = 1, numel = 1;
  bool contiguous = true;
  for (int i = ndim - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    if (shape[u] != 1 && strides[u] != acc) contiguous = false;
    acc *= shape[u];
    numel *= shape[u];
  }
  if (!contiguous && numel > 1)
    value_error(std::string(name) + " layout",
                "a contiguous row-major array (call .contiguous() / numpy.ascontiguousarray)",
                "strides " + shape_label(strides) + " for shape " + shape_label(shape));
  a.view = TensorView(const_cast<void*>(arr.data()), t, Shape(shape), dev);
  return a;
}

void expect_dtype(ArrayArg& a, const char* name, std::initializer_list<DType> allowed) {
  const DType got = a.view.dtype;
  for (DType d : allowed) {
    if (d == got && !(a.bf16_bits && d != DType::kBF16)) return;
    if (got == DType::kU8 && is_byte_type(d)) {
      a.view.dtype = d;  // uint8 stands for the byte type the argument expects
      return;
    }
  }
  std::string expected;
  for (DType d : allowed) expected += (expected.empty() ? "" : " or ") + dtype_label(d);
  value_error(std::string(name) + " dtype", expected,
              a.bf16_bits ? std::string("uint16") : dtype_label(got));
}

void expect_rank(const ArrayArg& a, const char* name, int rank) {
  if (a.view.rank() != rank)
    value_error(std::string(name) + " shape", "a " + std::to_string(rank) + "-D array",
                shape_label(a.view.shape));
}

void expect_shape(const ArrayArg& a, const char* name, const std::vector<std::int64_t>& shape) {
  bool ok = a.view.rank() == static_cast<int>(shape.size());
  for (std::size_t i = 0; ok && i < shape.size(); ++i)
    ok = shape[i] < 0 || a.view.shape[static_cast<int>(i)] == shape[i];
  if (!ok) value_error(std::string(name) + " shape", shape_label(shape), shape_label(a.view.shape));
}

void expect_device(const ArrayArg& a, const char* name, const Device& device) {
  if (!(a.view.device == device))
    value_error(std::string(name) + " device", device_label(device), device_label(a.view.device));
}

namespace {

// The DLPack ABI (dlpack.h, v0.8 unversioned capsules), spelled out so that the exported objects
// do not depend on the nanobind release's choice of Python type for ndarrays.
struct DLDevice {
  std::int32_t device_type;
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

// One exported view: the managed tensor, its shape, and a reference to the owning OwnedArray.
struct ExportContext {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  PyObject* owner = nullptr;
};

void export_deleter(DLManagedTensor* m) {
  auto* ctx = static_cast<ExportContext*>(m->manager_ctx);
  PyGILState_STATE g = PyGILState_Ensure();  // consumers may free without the GIL
  Py_XDECREF(ctx->owner);
  PyGILState_Release(g);
  delete ctx;
}

void capsule_destructor(PyObject* capsule) {
  // A capsule still named "dltensor" was never consumed: free it here.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

DLDataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    default: return {kDLUInt, 8, 1};  // byte types travel as uint8
  }
}

}  // namespace

// Memory moekit allocated (host or CUDA), handed to a framework through __dlpack__.
struct OwnedArray {
  Buffer buffer;
  std::vector<std::int64_t> shape;
  DType dtype = DType::kU8;
  Device device;
  bool bf16_as_uint16 = false;  // numpy has no bfloat16: export raw bits
};

nb::object empty_array(const std::vector<std::int64_t>& shape, DType dtype, Device device,
                       bool bf16_as_uint16) {
  Shape s(shape);
  auto* a = new OwnedArray();
  a->buffer = Buffer(static_cast<std::size_t>(s.numel()) * dtype_size(dtype), device);
  a->shape = shape;
  a->dtype = dtype;
  a->device = device;
  a->bf16_as_uint16 = bf16_as_uint16;
  return nb::cast(a, nb::rv_policy::take_ownership);
}

void* owned_array_data(nb::handle obj) { return nb::cast<OwnedArray&>(obj).buffer.data(); }

void register_owned_array(nb::module_& m) {
  nb::class_<OwnedArray>(m, "Array",
                         "Memory moekit allocated; take it with your framework's from_dlpack.")
      .def("__dlpack__",
           [](nb::handle_t<OwnedArray> self, nb::kwargs) {
             OwnedArray& a = nb::cast<OwnedArray&>(self);
             auto* ctx = new ExportContext();
             ctx->shape = a.shape;
             ctx->owner = self.ptr();
             Py_INCREF(ctx->owner);
             DLTensor& t = ctx->managed.dl_tensor;
             static char empty_data;
             t.data = a.buffer.data() ? a.buffer.data() : static_cast<void*>(&empty_data);
             t.device = {a.device.is_host() ? kDLCPU : kDLCUDA, a.device.index};
             t.ndim = static_cast<std::int32_t>(a.shape.size());
             t.dtype = a.bf16_as_uint16 && a.dtype == DType::kBF16 ? DLDataType{kDLUInt, 16, 1}
                                                                   : dl_dtype(a.dtype);
             t.shape = ctx->shape.data();
             t.strides = nullptr;  // row-major
             t.byte_offset = 0;
             ctx->managed.manager_ctx = ctx;
             ctx->managed.deleter = export_deleter;
             PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", capsule_destructor);
             if (!cap) {
               export_deleter(&ctx->managed);
               throw nb::python_error();
             }
             return nb::steal(cap);
           })
      .def("__dlpack_device__",
           [](const OwnedArray& a) {
             return nb::make_tuple(a.device.is_host() ? kDLCPU : kDLCUDA, a.device.index);
           })
      .def_prop_ro("shape", [](const OwnedArray& a) { return nb::tuple(nb::cast(a.shape)); })
      .def_prop_ro("nbytes", [](const OwnedArray& a) { return a.buffer.size(); });
}

}  // namespace moekit::py
