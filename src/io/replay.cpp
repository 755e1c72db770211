#include "moekit/io/replay.hpp"

#include <cstring>

#include "io/load_util.hpp"
#include "io/non_finite.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/safetensors.hpp"
#include "moekit/io/staged_output.hpp"

namespace moekit::io {

namespace {

template <typename E, typename A>
[[noreturn]] void fail(const std::string& path, const std::string& arg, const E& expected,
                       const A& actual) {
  throw_arg_error(("replay file '" + path + "'").c_str(), arg, expected, actual);
}

// f32 / bf16 kept, f16 widened to f32; rank 2 required; NaN / Inf refused (a layer computed on
// them would only report a failed check or garbage).
Tensor float_matrix(const SafetensorsFile& f, const std::string& name, bool keep_bf16) {
  TensorView v = f.view(name);
  if (v.rank() != 2) fail(f.path(), "tensor '" + name + "' shape", "rank 2", v.shape.str());
  if (const std::string bad = detail::non_finite_message(v); !bad.empty())
    MOEKIT_FAIL("replay file '", f.path(), "': tensor '", name, "' ", bad);
  if (v.dtype == DType::kF32 || (keep_bf16 && v.dtype == DType::kBF16)) return detail::clone(v);
  if (v.dtype == DType::kBF16 || v.dtype == DType::kF16) return detail::to_f32_tensor(v);
  fail(f.path(), "tensor '" + name + "' dtype", "f32, bf16 or f16", dtype_name(v.dtype));
}

}  // namespace

ReplayInputs read_replay_inputs(const std::string& path, std::int64_t hidden_size,
                                int num_experts) {
  SafetensorsFile f = SafetensorsFile::open(path);
  ReplayInputs in;
  in.metadata = f.metadata();
  if (!f.contains("hidden_states")) fail(path, "tensor 'hidden_states'", "present", "missing");
  in.hidden_states = float_matrix(f, "hidden_states", true);
  const std::int64_t m = in.hidden_states.shape()[0];
  if (hidden_size > 0 && in.hidden_states.shape()[1] != hidden_size)
    fail(path, "tensor 'hidden_states' shape", Shape{m, hidden_size}.str(),
         in.hidden_states.shape().str());
  if (f.contains("router_logits")) {
    in.router_logits = float_matrix(f, "router_logits", true);
    const Shape& s = in.router_logits.shape();
    if (s[0] != m || (num_experts > 0 && s[1] != num_experts))
      fail(path, "tensor 'router_logits' shape",
           ::moekit::detail::concat("[", m, ", ",
                                    num_experts > 0 ? std::to_string(num_experts) : "E", "]"),
           s.str());
  }
  const bool has_ids = f.contains("topk_ids"), has_w = f.contains("topk_weights");
  if (has_ids != has_w)
    fail(path, has_ids ? "tensor 'topk_weights'" : "tensor 'topk_ids'",
         "present (topk_ids and topk_weights come together)", "missing");
  if (has_ids) {
    TensorView ids = f.view("topk_ids");
    if (ids.rank() != 2 || ids.shape[0] != m)
      fail(path, "tensor 'topk_ids' shape", ::moekit::detail::concat("[", m, ", k]"),
           ids.shape.str());
    if (ids.dtype != DType::kI32 && ids.dtype != DType::kI64)
      fail(path, "tensor 'topk_ids' dtype", "i32 or i64", dtype_name(ids.dtype));
    in.topk_ids = Tensor(DType::kI32, ids.shape);
    const auto* p = static_cast<const std::uint8_t*>(ids.data);
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      std::int64_t id;
      if (ids.dtype == DType::kI32) {
        std::int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        id = v;
      } else {
        std::memcpy(&id, p + 8 * i, 8);
      }
      const std::int64_t limit = num_experts > 0 ? num_experts : (std::int64_t{1} << 31) - 1;
      if (id < 0 || id >= limit)
        fail(path, ::moekit::detail::concat("tensor 'topk_ids' element ", i),
             ::moekit::detail::concat("in [0, ", limit, ")"), id);
      in.topk_ids.ptr<std::int32_t>()[i] = static_cast<std::int32_t>(id);
    }
    in.topk_weights = float_matrix(f, "topk_weights", false);
    if (!(in.topk_weights.shape() == ids.shape))
      fail(path, "tensor 'topk_weights' shape", ids.shape.str(), in.topk_weights.shape().str());
  }
  return in;
}

void write_replay_outputs(const std::string& path, const TensorView& output,
                          const TensorView& topk_ids, const TensorView& topk_weights,
                          const std::map<std::string, std::string>& metadata, bool overwrite) {
  check_output_path(path, OutputKind::kFile, {.overwrite = overwrite, .argument = "output file"});
  MOEKIT_CHECK_ARG(output.rank() == 2, "output rank", 2, output.rank());
  MOEKIT_CHECK_ARG(output.dtype == DType::kF32 || output.dtype == DType::kBF16, "output dtype",
                   "f32 or bf16", dtype_name(output.dtype));
  std::vector<NamedTensor> tensors{{"output", output}};
  if (topk_ids.defined()) {
    MOEKIT_CHECK_ARG(topk_ids.dtype == DType::kI32, "topk_ids dtype", "i32",
                     dtype_name(topk_ids.dtype));
    MOEKIT_CHECK_ARG(topk_ids.rank() == 2 && topk_ids.size(0) == output.size(0), "topk_ids shape",
                     ::moekit::detail::concat("[", output.size(0), ", k]"), topk_ids.shape.str());
    tensors.push_back({"topk_ids", topk_ids});
  }
  if (topk_weights.defined()) {
    MOEKIT_CHECK_ARG(topk_weights.dtype == DType::kF32, "topk_weights dtype", "f32",
                     dtype_name(topk_weights.dtype));
    MOEKIT_CHECK_ARG(topk_weights.rank() == 2 && topk_weights.size(0) == output.size(0),
                     "topk_weights shape", ::moekit::detail::concat("[", output.size(0), ", k]"),
                     topk_weights.shape.str());
    tensors.push_back({"topk_weights", topk_weights});
  }
  SafetensorsWriteOptions options;
  options.order = TensorOrder::kInsertion;
  options.metadata = metadata;
  write_safetensors(path, tensors, options);
}

}  // namespace moekit::io
