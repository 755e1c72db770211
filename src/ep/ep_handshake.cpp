// The collective checks of expert-parallel prepare: every rank prepared the same problem, and the
// expert maps of all ranks partition the experts.
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit {
namespace {

struct Field {
  const char* name;
  std::int64_t value;
  std::function<std::string(std::int64_t)> show;
};

std::string as_int(std::int64_t v) { return std::to_string(v); }

std::vector<Field> fingerprint(const MoeProblem& p, DispatchKind kind) {
  const auto dtype = [](std::int64_t v) {
    return std::string(dtype_name(static_cast<DType>(v)));
  };
  const auto scheme = [](std::int64_t v) {
    return std::string(scheme_name(static_cast<QuantScheme>(v)));
  };
  const auto yes_no = [](std::int64_t v) { return std::string(v ? "true" : "false"); };
  return {
      {"num_experts (E)", p.num_experts(), as_int},
      {"hidden_size (H)", p.hidden_size(), as_int},
      {"intermediate_size (I)", p.intermediate_size(), as_int},
      {"top_k", p.top_k(), as_int},
      {"activation_dtype", static_cast<std::int64_t>(p.activation_dtype), dtype},
      {"weight_quant", static_cast<std::int64_t>(p.weight_quant.scheme), scheme},
      {"activation_quant", static_cast<std::int64_t>(p.activation_quant.scheme), scheme},
      {"routing method", static_cast<std::int64_t>(p.layer.routing.method),
       [](std::int64_t v) {
         return std::string(routing_method_name(static_cast<RoutingMethod>(v)));
       }},
      {"activation", static_cast<std::int64_t>(p.layer.activation.kind),
       [](std::int64_t v) { return std::string(activation_name(static_cast<Activation>(v))); }},
      {"has_bias", p.layer.has_bias ? 1 : 0, yes_no},
      {"num_tokens (tokens per rank, the padded capacity)", p.num_tokens, as_int},
      {"parallel.ep_size", p.parallel.ep_size, as_int},
      {"parallel.dp_size", p.parallel.dp_size, as_int},
      {"parallel.low_latency_dispatch", p.parallel.low_latency_dispatch ? 1 : 0, yes_no},
      {"dispatch", static_cast<std::int64_t>(kind),
       [](std::int64_t v) { return std::string(dispatch_kind_name(static_cast<DispatchKind>(v))); }},
  };
}

}  // namespace

std::string_view dispatch_kind_name(DispatchKind k) {
  return k == DispatchKind::kNaive ? "naive" : "a2a";
}

void check_ranks_agree(Communicator& comm, const MoeProblem& problem, DispatchKind kind) {
  const std::vector<Field> fields = fingerprint(problem, kind);
  const std::size_t n = fields.size(), ranks = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> mine(n), all(n * ranks);
  for (std::size_t i = 0; i < n; ++i) mine[i] = fields[i].value;
  comm.all_gather_host(mine.data(), all.data(), n * sizeof(std::int64_t));
  // Every rank walks the same gathered table, so every rank throws the same message.
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t r = 1; r < ranks; ++r) {
      const std::int64_t a = all[i], b = all[r * n + i];
      if (a == b) continue;
      MOEKIT_FAIL("expert-parallel prepare on rank ", comm.rank(), ": the ranks disagree on the "
                  "problem: ", fields[i].name, " is ", fields[i].show(a), " on rank 0 but ",
                  fields[i].show(b), " on rank ", r, " (every rank must prepare the same problem)");
    }
  }
}

std::vector<int> expert_owners(Communicator& comm, const ParallelConfig& parallel,
                               int num_experts) {
  const std::size_t e = static_cast<std::size_t>(num_experts);
  const std::size_t ranks = static_cast<std::size_t>(comm.size());
  std::vector<std::int32_t> mine(e), all(e * ranks);
  for (std::size_t g = 0; g < e; ++g)
    mine[g] = parallel.expert_map.empty() ? static_cast<std::int32_t>(g) : parallel.expert_map[g];
  comm.all_gather_host(mine.data(), all.data(), e * sizeof(std::int32_t));
  std::vector<int> owner(e, -1);
  for (std::size_t g = 0; g < e; ++g) {
    for (std::size_t r = 0; r < ranks; ++r) {
      if (all[r * e + g] < 0) continue;
      MOEKIT_CHECK(owner[g] < 0, "expert-parallel prepare on rank ", comm.rank(),
                   ": parallel.expert_map: expert ", g, " is owned twice, by rank ", owner[g],
                   " and by rank ", r, " (each expert must live on exactly one rank)");
      owner[g] = static_cast<int>(r);
    }
    MOEKIT_CHECK(owner[g] >= 0, "expert-parallel prepare on rank ", comm.rank(),
                 ": parallel.expert_map: expert ", g, " is owned by no rank (each expert must "
                 "live on exactly one rank)");
  }
  return owner;
}

}  // namespace moekit
