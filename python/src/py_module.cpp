// moekit._C: the Python extension over the C++ library. The Python package (python/moekit/)
// wraps it; everything here takes DLPack arrays and preallocated outputs, and raises ValueError /
// TypeError naming the argument on bad input. moekit::Error surfaces as moekit.Error (a subclass
// of ValueError and RuntimeError) carrying the C++ message.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <thread>

#include "core/device_runtime.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/oracle/backend.hpp"
#include "py_arrays.hpp"
#include "py_common.hpp"

namespace moekit::py {

Device parse_device(const std::string& text, const char* what) {
  if (text == "cpu") return Device::host();
  if (text == "cuda") return Device::cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string idx = text.substr(5);
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos)
      return Device::cuda(std::stoi(idx));
  }
  value_error(what, "'cpu', 'cuda' or 'cuda:N'", "'" + text + "'");
}

void check_cuda_device_supported(const Device& d, const char* what) {
  if (d.is_cuda() && d.index != 0)
    value_error(std::string(what) + " device", "cpu or cuda:0 (moekit's kernels run on device 0)",
                device_label(d));
}

QuantConfig quant_config(const std::string& scheme, const std::string& layout,
                         const std::string& rule) {
  QuantConfig c;
  c.scheme = parse_scheme(scheme);
  c.layout = parse_layout(layout);
  c.rule = parse_rule(rule);
  return c;
}

namespace {

nb::dict info() {
  nb::dict d;
  d["version"] = MOEKIT_VERSION_STRING;
  d["cuda_build"] = bool(MOEKIT_WITH_CUDA);
#if MOEKIT_WITH_CUDA
  d["cutlass"] = bool(MOEKIT_WITH_CUTLASS);
#else
  d["cutlass"] = false;
#endif
  const DeviceCapabilities dev = DeviceCapabilities::detect();
  d["device"] = dev.is_cuda ? dev.name + " (" + dev.str() + ")" : std::string("cpu");
  d["device_sm"] = dev.is_cuda ? dev.sm() : 0;
  d["cpu_threads"] = num_threads();
  nb::list backends;
  for (Backend b : BackendRegistry::instance().registered()) {
    nb::dict e;
    e["name"] = std::string(moe_backend_name(b));
    e["device"] = backend_traits(b).on_cuda ? "cuda" : "cpu";
    e["description"] = std::string(backend_traits(b).description);
    backends.append(e);
  }
  d["backends"] = backends;
  return d;
}

nb::object empty(const std::vector<std::int64_t>& shape, const std::string& dtype,
                 const std::string& device) {
  const Device dev = parse_device(device, "device");
  check_cuda_device_supported(dev, "empty");
  return empty_array(shape, parse_dtype(dtype), dev);
}

}  // namespace

}  // namespace moekit::py

NB_MODULE(_C, m) {
  namespace nb = nanobind;
  using namespace moekit::py;
  m.doc() = "moekit C++ extension (nanobind); use the moekit package, not this module";
  // Layers held by module-level caches (fused_experts, torch.compile graphs) live until the
  // interpreter exits; that is not a leak worth a warning.
  nb::set_leak_warnings(false);

  // moekit.Error: both a ValueError (bad input, the common case) and a RuntimeError.
  PyObject* bases = PyTuple_Pack(2, PyExc_ValueError, PyExc_RuntimeError);
  PyObject* error = PyErr_NewException("moekit.Error", bases, nullptr);
  Py_DECREF(bases);
  m.attr("Error") = nb::steal(error);
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const moekit::Error& e) {
          PyErr_SetString(static_cast<PyObject*>(payload), e.what());
        }
      },
      error);

  m.def("info", &info, "Build, device and backends as a dict.");
  m.def("empty", &empty, nb::arg("shape"), nb::arg("dtype"), nb::arg("device"),
        "An owning uninitialized array (moekit dtype name: f32|bf16|e4m3|...) on 'cpu' or "
        "'cuda:0', exported through DLPack.");
  m.def("synchronize", [] {
    if (moekit::device_runtime::compiled_with_cuda() && moekit::device_runtime::device_count() > 0) {
      nb::gil_scoped_release release;
      moekit::device_runtime::synchronize();
    }
  }, "Waits for all work on the current CUDA device (no-op without CUDA).");
  register_owned_array(m);
  register_quant(m);
  register_layer(m);
}
