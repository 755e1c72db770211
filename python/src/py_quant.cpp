// Bindings of the quantize op (moekit/quant/quantize.hpp): shape inference, quantize, dequantize.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "moekit/core/error.hpp"
#include "moekit/quant/quantize.hpp"
#include "py_arrays.hpp"
#include "py_common.hpp"

namespace moekit::py {

namespace {

// "bfloat16", "float8_e4m3fn", "fp4x2" (packed e2m1, two per byte), "float8_e8m0fnu", "float32".
const char* canonical_dtype(DType t) {
  switch (t) {
    case DType::kBF16: return "bfloat16";
    case DType::kE4M3: return "float8_e4m3fn";
    case DType::kE2M1x2: return "fp4x2";
    case DType::kE8M0: return "float8_e8m0fnu";
    case DType::kF32: return "float32";
    default: return "uint8";
  }
}

nb::object shape_entry(const Shape& s, DType t) {
  return nb::make_tuple(nb::cast(s.vec()), canonical_dtype(t));
}

nb::dict quant_shapes(const std::vector<std::int64_t>& shape, const std::string& scheme,
                      const std::string& layout, const std::string& rule) {
  const QuantShapes s = infer_quant_shapes(Shape(shape), quant_config(scheme, layout, rule));
  nb::dict d;
  d["values"] = shape_entry(s.values, s.value_dtype);
  d["scales"] = s.scales.rank() > 0 ? shape_entry(s.scales, s.scale_dtype) : nb::none();
  d["global_scale"] = s.has_global_scale ? shape_entry(s.global_scale, DType::kF32) : nb::none();
  return d;
}

QuantBackend backend_for(const std::string& backend, const Device& device, const char* arg) {
  if (backend == "cpu" || backend == "reference") {
    if (!device.is_host())
      value_error(std::string(arg) + " device", "cpu (backend 'cpu' runs on host arrays)",
                  device_label(device));
    return QuantBackend::kReference;
  }
  if (backend == "cuda") {
    if (!MOEKIT_WITH_CUDA)
      value_error("backend", "'cpu' (this build of moekit has no CUDA backend)", "'cuda'");
    if (!device.is_cuda())
      value_error(std::string(arg) + " device", "cuda:0 (backend 'cuda' runs on CUDA arrays)",
                  device_label(device));
    check_cuda_device_supported(device, arg);
    return QuantBackend::kCuda;
  }
  value_error("backend", "'cpu' or 'cuda'", "'" + backend + "'");
}

// An output argument: dtype (uint8 stands for the byte types), exact shape, device.
void check_out(ArrayArg& a, const char* name, DType dtype, const Shape& shape, const Device& dev) {
  expect_dtype(a, name, {dtype});
  expect_shape(a, name, shape.vec());
  expect_device(a, name, dev);
}

// The three quantized operands (values, scales, global scale) checked against the shapes of the
// scheme on `dev`; `arrays` keeps the imported arrays alive while `view` is used.
struct QuantizedArrays {
  ArrayArg arrays[3];
  QuantizedView view;
};
QuantizedArrays import_quantized(nb::handle values, nb::handle scales, nb::handle global_scale,
                                 const QuantConfig& cfg, const QuantShapes& s, const Device& dev) {
  QuantizedArrays q;
  ArrayArg& va = q.arrays[0] = import_array(values, "values");
  check_out(va, "values", s.value_dtype, s.values, dev);
  ArrayArg& sa = q.arrays[1] = import_array(scales, "scales", s.scales.rank() == 0);
  if (s.scales.rank() > 0) check_out(sa, "scales", s.scale_dtype, s.scales, dev);
  ArrayArg& ga = q.arrays[2] = import_array(global_scale, "global_scale", !s.has_global_scale);
  if (s.has_global_scale) check_out(ga, "global_scale", DType::kF32, s.global_scale, dev);
  q.view.values = va.view;
  q.view.scales = sa.view;
  q.view.global_scale = ga.view;
  q.view.config = cfg;
  return q;
}

void quantize_binding(nb::handle x, const std::string& scheme, const std::string& layout,
                      const std::string& rule, const std::string& backend, nb::handle values,
                      nb::handle scales, nb::handle global_scale, nb::handle static_scale,
                      std::uintptr_t stream) {
  const QuantConfig cfg = quant_config(scheme, layout, rule);
  ArrayArg xa = import_array(x, "x");
  expect_dtype(xa, "x", {DType::kF32, DType::kF16, DType::kBF16});
  if (xa.view.rank() != 2 && xa.view.rank() != 3)
    value_error("x shape", "(M, K) or (B, M, K)", shape_label(xa.view.shape));
  const QuantShapes s = infer_quant_shapes(xa.view.shape, cfg);
  const QuantBackend b = backend_for(backend, xa.view.device, "x");
  const Device dev = xa.view.device;
  const QuantizedArrays out = import_quantized(values, scales, global_scale, cfg, s, dev);
  ArrayArg ss = import_array(static_scale, "global_scale", true);
  if (ss.defined()) {
    expect_dtype(ss, "global_scale", {DType::kF32});
    expect_device(ss, "global_scale", dev);
  }
  nb::gil_scoped_release release;
  quantize(xa.view, cfg, out.view, b, ss.view, stream_of(stream));
}

void dequantize_binding(nb::handle values, nb::handle scales, nb::handle global_scale,
                        const std::string& scheme, const std::string& layout,
                        const std::string& rule, const std::string& backend, nb::handle out,
                        std::uintptr_t stream) {
  const QuantConfig cfg = quant_config(scheme, layout, rule);
  ArrayArg oa = import_array(out, "out");
  expect_dtype(oa, "out", {DType::kF32});
  if (oa.view.rank() != 2 && oa.view.rank() != 3)
    value_error("out shape", "(M, K) or (B, M, K)", shape_label(oa.view.shape));
  const QuantShapes s = infer_quant_shapes(oa.view.shape, cfg);
  const QuantBackend b = backend_for(backend, oa.view.device, "out");
  const Device dev = oa.view.device;
  const QuantizedArrays q = import_quantized(values, scales, global_scale, cfg, s, dev);
  nb::gil_scoped_release release;
  dequantize(q.view, oa.view, b, stream_of(stream));
}

}  // namespace

void register_quant(nb::module_& m) {
  m.def("quant_shapes", &quant_shapes, nb::arg("shape"), nb::arg("scheme"),
        nb::arg("layout") = "linear", nb::arg("rule") = "rceil",
        "Output shapes and dtypes of quantize (infer_quant_shapes): {'values': (shape, dtype), "
        "'scales': ... or None, 'global_scale': ... or None}.");
  m.def("quantize", &quantize_binding, nb::arg("x"), nb::arg("scheme"), nb::arg("layout"),
        nb::arg("rule"), nb::arg("backend"), nb::arg("values"), nb::arg("scales").none(),
        nb::arg("global_scale").none(), nb::arg("static_scale").none(), nb::arg("stream") = 0,
        "Quantizes x into preallocated outputs (moekit::quantize).");
  m.def("dequantize", &dequantize_binding, nb::arg("values"), nb::arg("scales").none(),
        nb::arg("global_scale").none(), nb::arg("scheme"), nb::arg("layout"), nb::arg("rule"),
        nb::arg("backend"), nb::arg("out"), nb::arg("stream") = 0,
        "Dequantizes into a preallocated float32 output (moekit::dequantize).");
}

}  // namespace moekit::py
