// Bindings of one MoE layer: the weights (moekit conventions, moe/weights.hpp) built from arrays in
// checkpoint layouts or loaded from a checkpoint (io/moe_loader.hpp), a FusedMoEKernel made for the
// backend the oracle selects (oracle/oracle.hpp), and the per-call entry points.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/load_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/checkpoint.hpp"
#include "moekit/io/moe_loader.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/weights/prepare.hpp"
#if MOEKIT_WITH_CUDA
#include <cuda_runtime_api.h>

#include "moekit/routing/route_cuda.hpp"
#endif
#include <algorithm>
#include <chrono>
#include "py_arrays.hpp"
#include "py_common.hpp"

namespace moekit::py {

namespace {

template <typename T>
T get(const nb::dict& d, const char* key, T fallback) {
  if (!d.contains(key) || d[key].is_none()) return fallback;
  return nb::cast<T>(d[key]);
}

// A host copy of an array (any device) in `target` dtype: f32/f16/bf16 convert among themselves
// (to bf16 by round-to-nearest-even), byte types and integers copy.
Tensor host_tensor(const ArrayArg& a, DType target) {
  const TensorView& v = a.view;
  Tensor src_host;
  const void* src = v.data;
  if (v.device.is_cuda()) {
    src_host = Tensor(v.dtype, v.shape, Device::host());
    copy(src_host, TensorView(v.data, v.dtype, v.shape, v.device));
    src = src_host.data();
  }
  Tensor out(target, v.shape, Device::host());
  const std::int64_t n = v.numel();
  if (v.dtype == target || dtype_size(v.dtype) == 1) {
    if (out.nbytes()) std::memcpy(out.data(), src, out.nbytes());
    return out;
  }
  auto load = [&](std::int64_t i) -> float {
    if (v.dtype == DType::kF32) return static_cast<const float*>(src)[i];
    const std::uint16_t b = static_cast<const std::uint16_t*>(src)[i];
    return v.dtype == DType::kF16 ? io::detail::half_bits_to_float(b) : bf16_to_float(b);
  };
  if (target == DType::kF32) {
    for (std::int64_t i = 0; i < n; ++i) out.ptr<float>()[i] = load(i);
  } else if (target == DType::kBF16) {
    for (std::int64_t i = 0; i < n; ++i) out.ptr<std::uint16_t>()[i] = float_to_bf16(load(i));
  } else {
    MOEKIT_FAIL("host_tensor: cannot convert ", dtype_name(v.dtype), " to ", dtype_name(target));
  }
  return out;
}

// [E, A, B] -> [E, B, A] (2-byte elements).
Tensor transpose_last2(const Tensor& t) {
  const std::int64_t e = t.shape()[0], a = t.shape()[1], b = t.shape()[2];
  Tensor out(t.dtype(), Shape{e, b, a});
  const auto* s = t.ptr<const std::uint16_t>();
  auto* d = out.ptr<std::uint16_t>();
  for (std::int64_t x = 0; x < e; ++x)
    for (std::int64_t i = 0; i < a; ++i)
      for (std::int64_t j = 0; j < b; ++j) d[(x * b + j) * a + i] = s[(x * a + i) * b + j];
  return out;
}

struct Spec {
  MoeLayerConfig layer;
  QuantConfig input_quant;   // the scheme the given weights are in
  std::string quantize_to;   // "" or a weight quant config string
  std::string activation_quant = "auto";
  std::string w13_layout = "gate_up";
  bool transposed = false;
};

Spec parse_spec(const nb::dict& c) {
  Spec s;
  MoeLayerConfig& l = s.layer;
  l.name = get<std::string>(c, "name", "python");
  l.num_experts = get<int>(c, "num_experts", 0);
  l.hidden_size = get<std::int64_t>(c, "hidden_size", 0);
  l.intermediate_size = get<std::int64_t>(c, "intermediate_size", 0);
  l.routing.top_k = get<int>(c, "top_k", 0);
  l.routing.method = parse_routing_method(get<std::string>(c, "routing", "renormalize"));
  l.routing.num_expert_groups = get<int>(c, "num_expert_groups", 1);
  l.routing.topk_group = get<int>(c, "topk_group", 1);
  l.routing.routed_scaling_factor = get<float>(c, "routed_scaling_factor", 1.0f);
  l.activation.kind = parse_activation(get<std::string>(c, "activation", "silu"));
  l.activation.swiglu_alpha = get<float>(c, "swiglu_alpha", 1.702f);
  l.activation.swiglu_limit = get<float>(c, "swiglu_limit", 7.0f);
  s.input_quant = parse_quant_config(get<std::string>(c, "scheme", "bf16"));
  s.quantize_to = get<std::string>(c, "quantize", "");
  s.activation_quant = get<std::string>(c, "activation_quant", "auto");
  s.w13_layout = get<std::string>(c, "w13_layout", "gate_up");
  s.transposed = get<bool>(c, "transposed", false);
  if (s.w13_layout != "gate_up" && s.w13_layout != "up_gate" && s.w13_layout != "interleaved")
    value_error("w13_layout", "'gate_up', 'up_gate' or 'interleaved'", "'" + s.w13_layout + "'");
  l.validate();
  return s;
}

QuantConfig resolve_activation_quant(const std::string& text, QuantScheme weight_scheme) {
  if (text == "auto") {
    QuantConfig a;
    if (weight_scheme == QuantScheme::kFP8Block128x128) a.scheme = QuantScheme::kFP8Block1x128;
    if (weight_scheme == QuantScheme::kFP8PerTensor) a.scheme = QuantScheme::kFP8PerTensor;
    return a;  // bf16 activations otherwise (W16A16, W4A16)
  }
  return parse_quant_config(text);
}

// Rows of w13 (and of its row-wise scales and bias) from the checkpoint order to [gate; up].
Tensor reorder_rows(const Tensor& t, const std::string& layout) {
  if (layout == "interleaved") return deinterleave_gate_up(t);
  if (layout == "up_gate") return swap_gate_up(t);
  return Tensor();
}

}  // namespace

class Layer {
 public:
  Layer(const nb::dict& config, const nb::dict& weights) {
    const Spec s = parse_spec(config);
    config_ = s.layer;
    build_weights(s, weights);
    activation_quant_ = resolve_activation_quant(s.activation_quant, weights_.quant.scheme);
  }

  explicit Layer(io::MoeLayer&& loaded) {
    config_ = std::move(loaded.config);
    weights_ = std::move(loaded.weights);
    router_ = std::move(loaded.router);
    correction_bias_ = std::move(router_.correction_bias);
    activation_quant_ = resolve_activation_quant("auto", weights_.quant.scheme);
    format_ = std::string(io::checkpoint_format_name(loaded.format));
    layer_index_ = loaded.layer_index;
  }

  MoeProblem problem_for(const Device& device, const std::string& dtype, std::int64_t tokens) const {
    MoeProblem p;
    p.num_tokens = tokens;
    p.layer = config_;
    p.weight_quant = weights_.quant;
    p.activation_quant = activation_quant_;
    if (dtype == "bfloat16")
      p.activation_dtype = DType::kBF16;
    else if (dtype == "float32")
      p.activation_dtype = DType::kF32;
    else
      value_error("dtype", "'bfloat16' or 'float32'", "'" + dtype + "'");
    if (device.is_cuda() && p.activation_dtype != DType::kBF16)
      value_error("dtype", "bfloat16 on CUDA (the CUDA experts take bf16 activations)", dtype);
    return p;
  }

  BackendSelection select(const MoeProblem& p, const Device& device,
                          const std::string& backend) const {
    DeviceCapabilities caps = DeviceCapabilities::cpu();
    if (device.is_cuda()) {
      check_cuda_device_supported(device, "x");
      caps = DeviceCapabilities::detect();
      if (!caps.is_cuda)
        value_error("x device", "cpu (no CUDA device is visible to moekit, or this build has no "
                    "CUDA backend)", device_label(device));
    }
    SelectOptions o;
    for (Backend b : all_moe_backends())
      if (backend_traits(b).on_cuda == device.is_cuda()) o.executable.push_back(run_backend_for(b));
    std::string name = backend;
    o.override_source = "backend=";
    if (name.empty() || name == "auto") {
      const char* env = std::getenv(kBackendEnvVar);
      name = env ? env : "";
      o.override_source = kBackendEnvVar;
    }
    if (!name.empty() && name != "auto") {
      if (const auto b = find_moe_backend(name); b && backend_traits(*b).on_cuda != device.is_cuda())
        value_error(o.override_source == "backend=" ? "backend" : kBackendEnvVar,
                    std::string("a backend for ") + device_label(device) + " arrays (" +
                        (device.is_cuda() ? "cuda_*" : "cpu_*") + ")",
                    "'" + name + "', which runs on " + (device.is_cuda() ? "cpu" : "cuda"));
      o.override_name = name;
    }
    return select_backend(p, caps, o);
  }

  std::size_t workspace_bytes(const std::string& device_text, const std::string& dtype,
                              std::int64_t max_tokens, const std::string& backend) const {
    const Device device = parse_device(device_text, "device");
    if (max_tokens < 1) value_error("max_tokens", ">= 1", std::to_string(max_tokens));
    const MoeProblem p = problem_for(device, dtype, max_tokens);
    const BackendSelection sel = select(p, device, backend);
    return make_moe_kernel(sel.backend, p).workspace_bytes(p);
  }

  // workspace: optional caller-owned uint8 array on `device` (shared by layers); used when it is
  // large enough, else the kernel allocates its own.
  void prepare(const std::string& device_text, const std::string& dtype, std::int64_t max_tokens,
               const std::string& backend, nb::handle workspace, std::uintptr_t stream) {
    const Device device = parse_device(device_text, "device");
    if (max_tokens < 1) value_error("max_tokens", ">= 1", std::to_string(max_tokens));
    MoeProblem p = problem_for(device, dtype, max_tokens);
    BackendSelection sel = select(p, device, backend);
    ArrayArg ws = import_array(workspace, "workspace", true);
    if (ws.defined()) {
      expect_dtype(ws, "workspace", {DType::kU8});
      expect_device(ws, "workspace", device);
    }
    std::lock_guard<std::mutex> lock(mu_);
    nb::gil_scoped_release release;
    kernel_.reset();
    auto kernel = std::make_unique<FusedMoEKernel>(make_moe_kernel(sel.backend, p));
#if MOEKIT_WITH_CUDA
    if (device.is_cuda()) kernel->set_router(route_cuda);
#endif
    const bool use_ws = ws.defined() && ws.view.nbytes() >= kernel->workspace_bytes(p);
    kernel->prepare(p, weights_, use_ws ? ws.view : TensorView{}, stream_of(stream));
    correction_bias_device_ = Tensor();
    if (correction_bias_.defined() && device.is_cuda()) {
      correction_bias_device_ = Tensor(DType::kF32, correction_bias_.shape(), device);
      copy(correction_bias_device_, correction_bias_);
    }
    problem_ = p;
    selection_ = std::move(sel);
    device_ = device;
    kernel_ = std::move(kernel);
  }

  nb::dict explain(const std::string& device_text, const std::string& dtype, std::int64_t tokens,
                   const std::string& backend) const {
    const Device device = parse_device(device_text, "device");
    return selection_dict(select(problem_for(device, dtype, tokens), device, backend));
  }

  static nb::dict selection_dict(const BackendSelection& sel) {
    nb::dict d;
    d["selected"] = std::string(moe_backend_name(sel.backend));
    d["overridden"] = sel.overridden;
    d["table"] = sel.table();
    nb::list c;
    for (const Candidate& x : sel.candidates)
      c.append(nb::make_tuple(std::string(moe_backend_name(x.backend)), x.accepted, x.reason));
    d["candidates"] = c;
    return d;
  }

  void apply(nb::handle x, nb::handle topk_ids, nb::handle topk_weights, nb::handle out,
             std::uintptr_t stream) {
    ArrayArg xa, oa;
    const std::int64_t m = check_x_out(x, out, xa, oa);
    const int k = config_.routing.top_k;
    ArrayArg ia = import_array(topk_ids, "topk_ids");
    expect_dtype(ia, "topk_ids", {DType::kI32});
    expect_shape(ia, "topk_ids", {m, k});
    expect_device(ia, "topk_ids", device_);
    ArrayArg wa = import_array(topk_weights, "topk_weights");
    expect_dtype(wa, "topk_weights", {DType::kF32});
    expect_shape(wa, "topk_weights", {m, k});
    expect_device(wa, "topk_weights", device_);
    if (device_.is_host()) {
      const auto* ids = ia.view.ptr<const std::int32_t>();
      for (std::int64_t i = 0; i < m * k; ++i)
        if (ids[i] < 0 || ids[i] >= config_.num_experts)
          value_error("topk_ids[" + std::to_string(i / k) + ", " + std::to_string(i % k) + "]",
                      "an expert id in [0, " + std::to_string(config_.num_experts) + ")",
                      std::to_string(ids[i]));
    }
    std::lock_guard<std::mutex> lock(mu_);
    nb::gil_scoped_release release;
    kernel_->apply(xa.view, ia.view, wa.view, oa.view, stream_of(stream));
  }

  void apply_logits(nb::handle x, nb::handle logits, nb::handle out, std::uintptr_t stream) {
    ArrayArg xa, oa;
    const std::int64_t m = check_x_out(x, out, xa, oa);
    ArrayArg la = import_array(logits, "router_logits");
    expect_dtype(la, "router_logits", {DType::kF32, DType::kBF16});
    expect_shape(la, "router_logits", {m, config_.num_experts});
    expect_device(la, "router_logits", device_);
    const Tensor& bias = device_.is_cuda() ? correction_bias_device_ : correction_bias_;
    std::lock_guard<std::mutex> lock(mu_);
    nb::gil_scoped_release release;
    kernel_->apply_logits(xa.view, la.view, oa.view, bias.view(), stream_of(stream));
  }

  // The C++ API's own cost, for bench/python_overhead.py: host microseconds per apply_logits call
  // (batches of `batch` calls, each batch followed by a stream synchronization outside the timed
  // region: median over batches), and on CUDA the median GPU microseconds of a graph replay of
  // one call (captured here, on a stream of its own).
  nb::dict bench_cpp(nb::handle x, nb::handle logits, nb::handle out, std::uintptr_t stream,
                     int batches, int batch) {
    ArrayArg xa, oa;
    const std::int64_t m = check_x_out(x, out, xa, oa);
    ArrayArg la = import_array(logits, "router_logits");
    expect_dtype(la, "router_logits", {DType::kF32, DType::kBF16});
    expect_shape(la, "router_logits", {m, config_.num_experts});
    expect_device(la, "router_logits", device_);
    const Tensor& bias = device_.is_cuda() ? correction_bias_device_ : correction_bias_;
    std::lock_guard<std::mutex> lock(mu_);
    nb::gil_scoped_release release;
    auto sync = [&] {
#if MOEKIT_WITH_CUDA
      if (device_.is_cuda()) cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
#endif
    };
    std::vector<double> per_call;
    for (int b = 0; b < batches; ++b) {
      sync();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < batch; ++i)
        kernel_->apply_logits(xa.view, la.view, oa.view, bias.view(), stream_of(stream));
      const auto t1 = std::chrono::steady_clock::now();
      per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / batch);
    }
    sync();
    std::sort(per_call.begin(), per_call.end());
    nb::gil_scoped_acquire acquire;
    nb::dict d;
    d["host_us_per_call"] = per_call.empty() ? 0.0 : per_call[per_call.size() / 2];
    d["host_us_per_call_min"] = per_call.empty() ? 0.0 : per_call.front();
#if MOEKIT_WITH_CUDA
    if (device_.is_cuda()) {
      nb::gil_scoped_release again;
      cudaStream_t s;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
      kernel_->apply_logits(xa.view, la.view, oa.view, bias.view(), s);
      cudaStreamEndCapture(s, &graph);
      cudaGraphInstantiate(&exec, graph, 0);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      std::vector<double> replay;
      for (int i = 0; i < 5; ++i) cudaGraphLaunch(exec, s);
      for (int b = 0; b < batches; ++b) {
        cudaEventRecord(e0, s);
        for (int i = 0; i < batch; ++i) cudaGraphLaunch(exec, s);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        replay.push_back(1e3 * ms / batch);
      }
      std::sort(replay.begin(), replay.end());
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(s);
      const cudaError_t err = cudaGetLastError();
      nb::gil_scoped_acquire back;
      if (err != cudaSuccess) throw Error(std::string("bench_cpp: CUDA error ") + cudaGetErrorString(err));
      d["graph_replay_us"] = replay[replay.size() / 2];
    }
#endif
    return d;
  }

  bool prepared() const { return kernel_ != nullptr; }
  std::string backend() const { return prepared() ? std::string(moe_backend_name(selection_.backend)) : ""; }
  std::string kernel_name() const { return prepared() ? kernel_->name() : ""; }
  std::string device() const { return device_label(device_); }
  std::string dtype() const {
    return problem_.activation_dtype == DType::kF32 ? "float32" : "bfloat16";
  }
  std::int64_t max_tokens() const { return prepared() ? problem_.num_tokens : 0; }
  std::string problem() const { return prepared() ? problem_.str() : ""; }
  std::string scheme() const { return weights_.quant.str(); }
  std::string activation_quant() const { return activation_quant_.str(); }

  nb::dict config() const {
    nb::dict d;
    const MoeLayerConfig& l = config_;
    d["name"] = l.name;
    d["num_experts"] = l.num_experts;
    d["hidden_size"] = l.hidden_size;
    d["intermediate_size"] = l.intermediate_size;
    d["top_k"] = l.routing.top_k;
    d["routing"] = std::string(routing_method_name(l.routing.method));
    d["num_expert_groups"] = l.routing.num_expert_groups;
    d["topk_group"] = l.routing.topk_group;
    d["routed_scaling_factor"] = l.routing.routed_scaling_factor;
    d["activation"] = std::string(activation_name(l.activation.kind));
    d["swiglu_alpha"] = l.activation.swiglu_alpha;
    d["swiglu_limit"] = l.activation.swiglu_limit;
    d["has_bias"] = weights_.w13_bias.defined();
    d["scheme"] = weights_.quant.str();
    d["activation_quant"] = activation_quant_.str();
    d["format"] = format_;
    d["layer_index"] = layer_index_;
    d["layer"] = l.str();
    return d;
  }

  // Host copies of everything the layer holds, moekit conventions (w13 = [gate; up]).
  nb::dict weight_arrays() const {
    nb::dict d;
    auto put = [&](const char* name, const Tensor& t) {
      if (!t.defined()) return;
      nb::object a = empty_array(t.shape().vec(), t.dtype(), Device::host(), true);
      if (t.nbytes()) std::memcpy(owned_array_data(a), t.data(), t.nbytes());
      d[name] = a;
    };
    put("w13", weights_.w13.values);
    put("w13_scale", weights_.w13.scales);
    put("w13_global_scale", weights_.w13.global_scale);
    put("w2", weights_.w2.values);
    put("w2_scale", weights_.w2.scales);
    put("w2_global_scale", weights_.w2.global_scale);
    put("w13_bias", weights_.w13_bias);
    put("w2_bias", weights_.w2_bias);
    put("a13_scale", weights_.a13_scale);
    put("a2_scale", weights_.a2_scale);
    put("correction_bias", correction_bias_);
    put("router_weight", router_.weight);
    put("router_bias", router_.bias);
    return d;
  }

 private:
  std::int64_t check_x_out(nb::handle x, nb::handle out, ArrayArg& xa, ArrayArg& oa) const {
    if (!kernel_) throw nb::value_error("MoE: call prepare() first");
    const DType t = problem_.activation_dtype;
    xa = import_array(x, "x");
    expect_dtype(xa, "x", {t});
    expect_rank(xa, "x", 2);
    const std::int64_t m = xa.view.size(0);
    expect_shape(xa, "x", {m, config_.hidden_size});
    expect_device(xa, "x", device_);
    oa = import_array(out, "out");
    expect_dtype(oa, "out", {t});
    expect_shape(oa, "out", {m, config_.hidden_size});
    expect_device(oa, "out", device_);
    return m;
  }

  // Builds weights_ from arrays in the input scheme and layout (see moekit/_layer.py).
  void build_weights(const Spec& s, const nb::dict& w) {
    const std::int64_t e = config_.num_experts, h = config_.hidden_size,
                       i = config_.intermediate_size;
    const bool gated = is_gated(config_.activation.kind);
    const std::int64_t rows13 = gated ? 2 * i : i;
    const QuantConfig q = s.input_quant;
    const QuantScheme qs = q.scheme;
    if (!(qs == QuantScheme::kBF16 || qs == QuantScheme::kFP8PerTensor ||
          qs == QuantScheme::kFP8Block128x128 || qs == QuantScheme::kNVFP4 ||
          qs == QuantScheme::kMXFP4))
      value_error("scheme", "one of bf16, fp8_tensor, fp8_block, nvfp4, mxfp4 (weights)",
                  std::string(scheme_name(qs)));
    if (s.transposed && qs != QuantScheme::kBF16)
      value_error("transposed", "False for quantized weights (scales run along the stored K)",
                  "True with scheme " + q.str());
    if (s.w13_layout != "gate_up" && !gated)
      value_error("w13_layout", "'gate_up' for a non-gated activation", s.w13_layout);
    if (s.w13_layout != "gate_up" && qs == QuantScheme::kFP8Block128x128)
      value_error("w13_layout", "'gate_up' for fp8_block (128-row scale tiles cannot be reordered)",
                  s.w13_layout);
    auto arg = [&](const char* name, bool optional) {
      nb::handle h = w.contains(name) ? nb::handle(w[name]) : nb::handle(Py_None);
      return import_array(h, name, optional);
    };
    const DType vt = qs == QuantScheme::kBF16 ? DType::kBF16
                     : is_fp4(qs)              ? DType::kE2M1x2
                                               : DType::kE4M3;
    MoeWeights& mw = weights_;
    mw.num_experts = static_cast<int>(e);
    mw.hidden_size = h;
    mw.intermediate_size = i;
    mw.gated = gated;
    mw.quant = q;
    const char* names[2][3] = {{"w13", "w13_scale", "w13_global_scale"},
                               {"w2", "w2_scale", "w2_global_scale"}};
    for (int j = 0; j < 2; ++j) {
      const std::int64_t rows = j == 0 ? rows13 : h, cols = j == 0 ? h : i;
      const QuantShapes shapes = infer_quant_shapes(Shape{e, rows, cols}, q);
      QuantizedTensor& dst = j == 0 ? mw.w13 : mw.w2;
      dst.config = q;
      ArrayArg v = arg(names[j][0], false);
      if (vt == DType::kBF16)
        expect_dtype(v, names[j][0], {DType::kBF16, DType::kF32, DType::kF16});
      else
        expect_dtype(v, names[j][0], {vt});
      std::vector<std::int64_t> vshape = shapes.values.vec();
      if (s.transposed) std::swap(vshape[1], vshape[2]);
      expect_shape(v, names[j][0], vshape);
      dst.values = host_tensor(v, vt);
      if (s.transposed) dst.values = transpose_last2(dst.values);
      ArrayArg sc = arg(names[j][1], shapes.scales.rank() == 0);
      if (shapes.scales.rank() > 0) {
        expect_dtype(sc, names[j][1], {shapes.scale_dtype});
        expect_shape(sc, names[j][1], shapes.scales.vec());
        dst.scales = host_tensor(sc, shapes.scale_dtype);
      } else if (sc.defined()) {
        value_error(names[j][1], "None for scheme " + q.str(), shape_label(sc.view.shape));
      }
      ArrayArg gs = arg(names[j][2], !shapes.has_global_scale);
      if (shapes.has_global_scale) {
        expect_dtype(gs, names[j][2], {DType::kF32});
        expect_shape(gs, names[j][2], shapes.global_scale.vec());
        dst.global_scale = host_tensor(gs, DType::kF32);
      } else if (gs.defined()) {
        value_error(names[j][2], "None for scheme " + q.str(), shape_label(gs.view.shape));
      }
    }
    ArrayArg b13 = arg("w13_bias", true), b2 = arg("w2_bias", true);
    if (b13.defined() != b2.defined())
      value_error(b13.defined() ? "w2_bias" : "w13_bias", "an array (the other GEMM has a bias)",
                  "None");
    if (b13.defined()) {
      expect_dtype(b13, "w13_bias", {DType::kF32, DType::kBF16, DType::kF16});
      expect_shape(b13, "w13_bias", {e, rows13});
      expect_dtype(b2, "w2_bias", {DType::kF32, DType::kBF16, DType::kF16});
      expect_shape(b2, "w2_bias", {e, h});
      mw.w13_bias = host_tensor(b13, DType::kF32);
      mw.w2_bias = host_tensor(b2, DType::kF32);
    }
    if (s.w13_layout != "gate_up") {
      mw.w13.values = reorder_rows(mw.w13.values, s.w13_layout);
      if (mw.w13.scales.defined() && has_block_scales(qs))
        mw.w13.scales = reorder_rows(mw.w13.scales, s.w13_layout);
      if (mw.w13_bias.defined()) mw.w13_bias = reorder_rows(mw.w13_bias, s.w13_layout);
    }
    for (const char* name : {"a13_scale", "a2_scale"}) {
      ArrayArg a = arg(name, true);
      if (!a.defined()) continue;
      expect_dtype(a, name, {DType::kF32});
      if (!(a.view.numel() == 1 || (a.view.rank() == 1 && a.view.size(0) == e)))
        value_error(std::string(name) + " shape", "(1,) or (num_experts,) = (" +
                    std::to_string(e) + ",)", shape_label(a.view.shape));
      Tensor t = host_tensor(a, DType::kF32);
      Tensor full(DType::kF32, Shape{e});
      for (std::int64_t x = 0; x < e; ++x)
        full.ptr<float>()[x] = t.ptr<float>()[t.numel() == 1 ? 0 : x];
      (std::string(name) == "a13_scale" ? mw.a13_scale : mw.a2_scale) = std::move(full);
    }
    ArrayArg cb = arg("correction_bias", !routing_uses_bias(config_.routing.method));
    if (routing_uses_bias(config_.routing.method)) {
      expect_dtype(cb, "correction_bias", {DType::kF32, DType::kBF16, DType::kF16});
      expect_shape(cb, "correction_bias", {e});
      correction_bias_ = host_tensor(cb, DType::kF32);
    } else if (cb.defined()) {
      value_error("correction_bias",
                  "None (routing " + std::string(routing_method_name(config_.routing.method)) +
                      " takes no correction bias)",
                  shape_label(cb.view.shape));
    }
    config_.has_bias = mw.w13_bias.defined();
    mw.validate();
    if (!s.quantize_to.empty()) {
      if (qs != QuantScheme::kBF16)
        value_error("quantize", "None when the weights are already quantized (scheme=" +
                    q.str() + ")", "'" + s.quantize_to + "'");
      weights_ = quantize_moe_weights(mw, parse_quant_config(s.quantize_to));
    }
  }

  MoeLayerConfig config_;
  MoeWeights weights_;  // host; declared before kernel_, which may use it in place (CPU experts)
  RouterWeights router_;
  Tensor correction_bias_, correction_bias_device_;
  QuantConfig activation_quant_;
  std::string format_;
  int layer_index_ = -1;
  MoeProblem problem_;
  BackendSelection selection_;
  Device device_ = Device::host();
  std::unique_ptr<FusedMoEKernel> kernel_;
  std::mutex mu_;
};

namespace {

Layer* load_layer(const std::string& dir, int layer, const std::string& input_scales) {
  io::MoeLoadOptions o;
  if (input_scales == "equal")
    o.input_scales = io::InputScalePolicy::kRequireEqual;
  else if (input_scales == "max")
    o.input_scales = io::InputScalePolicy::kMax;
  else if (input_scales == "ignore")
    o.input_scales = io::InputScalePolicy::kIgnore;
  else
    value_error("input_scales", "'equal', 'max' or 'ignore'", "'" + input_scales + "'");
  io::MoeLayer loaded;
  {
    nb::gil_scoped_release release;
    loaded = io::load_moe_layer(dir, layer, o);
  }
  return new Layer(std::move(loaded));
}

nb::dict checkpoint_info(const std::string& dir) {
  const io::CheckpointInfo info = io::read_checkpoint_info(dir);
  const io::Checkpoint ck = io::Checkpoint::open(dir);
  nb::dict d;
  d["model_type"] = info.model_type;
  d["num_hidden_layers"] = info.num_hidden_layers;
  d["format"] = std::string(io::checkpoint_format_name(info.format));
  d["layer"] = info.layer.str();
  d["moe_layers"] = nb::cast(io::moe_layer_indices(ck, info));
  return d;
}

nb::dict oracle(const nb::dict& config, std::int64_t tokens, const std::string& device,
                const std::string& backend, const std::string& dtype) {
  const Spec s = parse_spec(config);
  MoeProblem p;
  p.num_tokens = tokens;
  p.layer = s.layer;
  p.weight_quant = s.quantize_to.empty() ? s.input_quant : parse_quant_config(s.quantize_to);
  p.activation_quant = resolve_activation_quant(s.activation_quant, p.weight_quant.scheme);
  p.activation_dtype = dtype == "float32" ? DType::kF32 : DType::kBF16;
  const DeviceCapabilities caps =
      device == "auto" ? DeviceCapabilities::detect() : DeviceCapabilities::parse(device);
  SelectOptions o;
  o.override_name = backend;
  o.override_source = "backend=";
  BackendSelection sel = select_backend(p, caps, o);
  nb::dict d = Layer::selection_dict(sel);
  d["problem"] = p.str();
  d["device"] = caps.str();
  return d;
}

}  // namespace

void register_layer(nb::module_& m) {
  nb::class_<Layer>(m, "Layer")
      .def(nb::init<const nb::dict&, const nb::dict&>(), nb::arg("config"), nb::arg("weights"))
      .def("workspace_bytes", &Layer::workspace_bytes, nb::arg("device"), nb::arg("dtype"),
           nb::arg("max_tokens"), nb::arg("backend"))
      .def("prepare", &Layer::prepare, nb::arg("device"), nb::arg("dtype"), nb::arg("max_tokens"),
           nb::arg("backend"), nb::arg("workspace").none(), nb::arg("stream") = 0)
      .def("explain", &Layer::explain, nb::arg("device"), nb::arg("dtype"), nb::arg("tokens"),
           nb::arg("backend") = "auto")
      .def("apply", &Layer::apply, nb::arg("x"), nb::arg("topk_ids"), nb::arg("topk_weights"),
           nb::arg("out"), nb::arg("stream") = 0)
      .def("bench_cpp", &Layer::bench_cpp, nb::arg("x"), nb::arg("router_logits"), nb::arg("out"),
           nb::arg("stream"), nb::arg("batches") = 20, nb::arg("batch") = 50)
      .def("apply_logits", &Layer::apply_logits, nb::arg("x"), nb::arg("router_logits"),
           nb::arg("out"), nb::arg("stream") = 0)
      .def_prop_ro("prepared", &Layer::prepared)
      .def_prop_ro("backend", &Layer::backend)
      .def_prop_ro("kernel_name", &Layer::kernel_name)
      .def_prop_ro("device", &Layer::device)
      .def_prop_ro("dtype", &Layer::dtype)
      .def_prop_ro("max_tokens", &Layer::max_tokens)
      .def_prop_ro("problem", &Layer::problem)
      .def_prop_ro("scheme", &Layer::scheme)
      .def_prop_ro("activation_quant", &Layer::activation_quant)
      .def_prop_ro("config", &Layer::config)
      .def("weight_arrays", &Layer::weight_arrays);
  m.def("load_layer", &load_layer, nb::arg("checkpoint_dir"), nb::arg("layer"),
        nb::arg("input_scales") = "max", nb::rv_policy::take_ownership);
  m.def("checkpoint_info", &checkpoint_info, nb::arg("checkpoint_dir"));
  m.def("oracle", &oracle, nb::arg("config"), nb::arg("tokens"), nb::arg("device") = "auto",
        nb::arg("backend") = "", nb::arg("dtype") = "bfloat16");
}

}  // namespace moekit::py
