// MoeProblem, ParallelConfig, Support/TensorSpec printing and validation.
#include "moekit/framework/problem.hpp"

#include <sstream>
#include <string>

#include "moekit/core/error.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {

std::string_view activation_format_name(ActivationFormat f) {
  return f == ActivationFormat::kStandard ? "standard" : "batched";
}

ParallelConfig ParallelConfig::expert_parallel(int num_experts, int ep_size, int ep_rank,
                                               int dp_size) {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  MOEKIT_CHECK_ARG(ep_size >= 1 && num_experts % ep_size == 0, "ep_size",
                   "a divisor of num_experts " + std::to_string(num_experts), ep_size);
  MOEKIT_CHECK_ARG(ep_rank >= 0 && ep_rank < ep_size, "ep_rank",
                   "in [0, " + std::to_string(ep_size) + ")", ep_rank);
  ParallelConfig p;
  p.ep_size = ep_size;
  p.ep_rank = ep_rank;
  p.dp_size = dp_size;
  if (ep_size > 1) {
    const int per_rank = num_experts / ep_size;
    p.expert_map.assign(static_cast<std::size_t>(num_experts), -1);
    for (int l = 0; l < per_rank; ++l)
      p.expert_map[static_cast<std::size_t>(ep_rank * per_rank + l)] = l;
  }
  return p;
}

int ParallelConfig::num_local_experts(int num_experts) const {
  if (expert_map.empty()) return num_experts;
  int n = 0;
  for (std::int32_t l : expert_map) n += l >= 0 ? 1 : 0;
  return n;
}

std::vector<int> ParallelConfig::local_experts(int num_experts) const {
  std::vector<int> ids(static_cast<std::size_t>(num_local_experts(num_experts)));
  if (expert_map.empty()) {
    for (int g = 0; g < num_experts; ++g) ids[static_cast<std::size_t>(g)] = g;
    return ids;
  }
  for (std::size_t g = 0; g < expert_map.size(); ++g) {
    const std::int32_t l = expert_map[g];
    if (l >= 0 && static_cast<std::size_t>(l) < ids.size())
      ids[static_cast<std::size_t>(l)] = static_cast<int>(g);
  }
  return ids;
}

ActivationFormat ParallelConfig::activation_format() const {
  return low_latency_dispatch ? ActivationFormat::kBatched : ActivationFormat::kStandard;
}

bool ParallelConfig::is_identity() const {
  return ep_size == 1 && dp_size == 1 && expert_map.empty();
}

void ParallelConfig::validate(int num_experts) const {
  MOEKIT_CHECK_ARG(ep_size >= 1, "parallel.ep_size", ">= 1", ep_size);
  MOEKIT_CHECK_ARG(ep_rank >= 0 && ep_rank < ep_size, "parallel.ep_rank",
                   "in [0, " + std::to_string(ep_size) + ")", ep_rank);
  MOEKIT_CHECK_ARG(dp_size >= 1, "parallel.dp_size", ">= 1", dp_size);
  if (ep_size > 1) {
    MOEKIT_CHECK_ARG(!expert_map.empty(), "parallel.expert_map",
                     "given when ep_size > 1 (see ParallelConfig::expert_parallel)", "empty");
  }
  if (expert_map.empty()) return;
  MOEKIT_CHECK_ARG(static_cast<int>(expert_map.size()) == num_experts, "parallel.expert_map size",
                   num_experts, expert_map.size());
  const int n_local = num_local_experts(num_experts);
  MOEKIT_CHECK_ARG(n_local >= 1, "parallel.expert_map", "at least one local expert", "none");
  std::vector<int> seen(static_cast<std::size_t>(n_local), 0);
  for (std::size_t g = 0; g < expert_map.size(); ++g) {
    const int l = expert_map[g];
    MOEKIT_CHECK_ARG(l >= -1 && l < n_local, "parallel.expert_map[" + std::to_string(g) + "]",
                     "-1 or a local id in [0, " + std::to_string(n_local) + ")", l);
    if (l < 0) continue;
    MOEKIT_CHECK_ARG(!seen[static_cast<std::size_t>(l)],
                     "parallel.expert_map[" + std::to_string(g) + "]", "a local id not used twice",
                     l);
    seen[static_cast<std::size_t>(l)] = 1;
  }
}

std::string ParallelConfig::str() const {
  std::ostringstream os;
  os << "ep=" << ep_size << " rank=" << ep_rank << " dp=" << dp_size;
  if (!expert_map.empty()) {
    int first = -1, n = 0;
    for (std::size_t g = 0; g < expert_map.size(); ++g)
      if (expert_map[g] >= 0) {
        if (first < 0) first = static_cast<int>(g);
        ++n;
      }
    os << " local_experts=" << n << " (first global " << first << ")";
  }
  if (low_latency_dispatch) os << " low_latency";
  return os.str();
}

bool MoeProblem::apply_router_weight_on_input() const {
  return routing_weight_on_input(layer.routing.method);
}

namespace {

int bits_of(QuantScheme s) {
  if (s == QuantScheme::kBF16) return 16;
  return is_fp4(s) ? 4 : 8;
}

}  // namespace

std::string MoeProblem::quant_name() const {
  std::ostringstream os;
  os << 'w' << bits_of(weight_quant.scheme) << 'a' << bits_of(activation_quant.scheme) << '_'
     << scheme_name(weight_quant.scheme);
  return os.str();
}

void MoeProblem::validate() const {
  layer.validate();
  MOEKIT_CHECK_ARG(num_tokens >= 0, "problem.num_tokens", ">= 0", num_tokens);
  const QuantScheme w = weight_quant.scheme;
  MOEKIT_CHECK_ARG(w == QuantScheme::kBF16 || w == QuantScheme::kFP8PerTensor ||
                       w == QuantScheme::kFP8Block128x128 || w == QuantScheme::kNVFP4 ||
                       w == QuantScheme::kMXFP4 || w == QuantScheme::kMXFP8,
                   "problem.weight_quant", "bf16, fp8_tensor, fp8_block, mxfp8, nvfp4 or mxfp4",
                   weight_quant.str());
  const QuantScheme a = activation_quant.scheme;
  MOEKIT_CHECK_ARG(a != QuantScheme::kFP8Block128x128, "problem.activation_quant",
                   "a per-row scheme (fp8_1x128 for block-fp8 weights)", activation_quant.str());
  MOEKIT_CHECK_ARG(activation_dtype == DType::kBF16 || activation_dtype == DType::kF32,
                   "problem.activation_dtype", "bf16 or f32", dtype_name(activation_dtype));
  parallel.validate(layer.num_experts);
}

std::string MoeProblem::str() const {
  std::ostringstream os;
  os << "M=" << num_tokens << " " << layer.str() << " quant=" << quant_name() << " (weights "
     << weight_quant.str() << ", activations " << activation_quant.str() << ")"
     << " dtype=" << dtype_name(activation_dtype) << " " << parallel.str();
  return os.str();
}

std::string TensorSpec::str() const { return std::string(dtype_name(dtype)) + shape.str(); }

}  // namespace moekit
