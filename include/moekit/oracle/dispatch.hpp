// The oracle's choice of token dispatch across ranks (docs/expert_parallel.md): which
// PrepareFinalize an expert-parallel problem runs with, and why.
//   no dispatch  one rank (ep_size 1, dp_size 1): the NoEP PrepareFinalize.
//   naive        all-gather every rank's tokens, reduce-scatter back (AgRs): graph-capturable, no
//                host synchronization; moves every token to every rank.
//   a2a          tokens only to the ranks owning their experts; the only choice under low-latency
//                (batched) dispatch. Needs a host synchronization per step (counts, plan).
// auto: a2a under low-latency dispatch; otherwise a2a when a token is expected to reach clearly
// fewer ranks than all (uniform routing: 1 - (1 - 1/ep)^k of the others, below 0.9), else naive.
// An override ("naive" / "a2a", the --dispatch flag or MOEKIT_DISPATCH) must be accepted, or the
// selection throws saying why; impossible configurations (dp_size != ep_size, ...) are refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moekit/framework/problem.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"

namespace moekit {

inline constexpr const char* kDispatchEnvVar = "MOEKIT_DISPATCH";

struct DispatchSelection {
  bool expert_parallel = false;  // false: a single rank, no dispatch (NoEP)
  DispatchKind kind = DispatchKind::kAllToAll;
  bool batched = false;          // low-latency: the batched format
  bool overridden = false;
  std::string reason;            // why this choice
  struct Candidate {
    std::string name;
    bool accepted;
    std::string reason;  // why refused (empty when accepted)
  };
  std::vector<Candidate> candidates;  // naive, a2a
  std::string str() const;            // "a2a (batched): <reason>"
  std::string table() const;          // one line per candidate
};

// override_name: "", "auto", "naive" or "a2a" (else an Error listing them). Throws when the
// override is refused or the parallel config is impossible, naming the reason.
DispatchSelection select_dispatch(const MoeProblem& problem, std::string_view override_name = {},
                                  std::string_view override_source = "--dispatch");

}  // namespace moekit
