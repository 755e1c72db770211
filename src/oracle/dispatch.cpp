// select_dispatch: the dispatch rule of oracle/dispatch.hpp.
#include "moekit/oracle/dispatch.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "moekit/core/error.hpp"

namespace moekit {

std::string DispatchSelection::str() const {
  if (!expert_parallel) return "none: " + reason;
  return std::string(dispatch_kind_name(kind)) + (batched ? " (batched)" : "") +
         (overridden ? " [override]" : "") + ": " + reason;
}

std::string DispatchSelection::table() const {
  std::ostringstream os;
  for (const Candidate& c : candidates) {
    const bool chosen = expert_parallel && c.accepted && c.name == dispatch_kind_name(kind);
    os << (chosen ? "  -> " : "     ") << c.name << "  "
       << (c.accepted ? (chosen ? "selected" : "accepted") : "refused: " + c.reason) << "\n";
  }
  return os.str();
}

DispatchSelection select_dispatch(const MoeProblem& p, std::string_view override_name,
                                  std::string_view override_source) {
  const ParallelConfig& par = p.parallel;
  DispatchSelection s;
  const bool has_override = !override_name.empty() && override_name != "auto";
  MOEKIT_CHECK_ARG(!has_override || override_name == "naive" || override_name == "a2a",
                   std::string(override_source), "auto | naive | a2a", std::string(override_name));
  if (par.ep_size == 1 && par.dp_size == 1) {
    MOEKIT_CHECK(!has_override, "dispatch override '", override_name, "' (from ", override_source,
                 ") cannot apply: ep_size 1, a single rank has nothing to dispatch");
    s.reason = "a single rank (ep_size 1): the NoEP PrepareFinalize";
    return s;
  }
  MOEKIT_CHECK(par.dp_size == par.ep_size, "expert-parallel dispatch needs dp_size == ep_size "
               "(each rank dispatches its own tokens), got dp_size ", par.dp_size, " and ep_size ",
               par.ep_size, "; replicated tokens (dp_size 1) would need an all-reduce combine, "
               "which is not implemented");
  s.expert_parallel = true;
  s.batched = par.low_latency_dispatch;
  const std::string naive_refusal =
      s.batched ? "naive all-gathers into the standard format; low-latency dispatch needs the "
                  "batched format (a2a)"
                : "";
  s.candidates = {{"naive", naive_refusal.empty(), naive_refusal}, {"a2a", true, ""}};
  if (has_override) {
    s.overridden = true;
    if (override_name == "naive") {
      MOEKIT_CHECK(naive_refusal.empty(), "dispatch override 'naive' (from ", override_source,
                   ") refused: ", naive_refusal);
      s.kind = DispatchKind::kNaive;
      s.reason = "requested by " + std::string(override_source);
    } else {
      s.kind = DispatchKind::kAllToAll;
      s.reason = "requested by " + std::string(override_source);
    }
    return s;
  }
  if (s.batched) {
    s.kind = DispatchKind::kAllToAll;
    s.reason = "low-latency dispatch: tokens only to their experts' ranks, batched format";
    return s;
  }
  const double ep = par.ep_size, k = p.top_k();
  const double reach = 1.0 - std::pow(1.0 - 1.0 / ep, k);  // share of the other ranks a token hits
  char buf[256];
  if (reach < 0.9) {
    s.kind = DispatchKind::kAllToAll;
    std::snprintf(buf, sizeof(buf),
                  "top-%d over %d ranks reaches %.1f%% of the other ranks per token (uniform "
                  "routing): a2a moves %.2fx the bytes of naive",
                  p.top_k(), par.ep_size, 100 * reach, reach);
  } else {
    s.kind = DispatchKind::kNaive;
    std::snprintf(buf, sizeof(buf),
                  "top-%d over %d ranks reaches %.1f%% of the other ranks per token: a2a would "
                  "move nearly every token anyway; naive needs no host synchronization",
                  p.top_k(), par.ep_size, 100 * reach);
  }
  s.reason = buf;
  return s;
}

}  // namespace moekit
