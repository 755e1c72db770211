// Backend names from the registry and the shared selection with its errors (backend_choice.hpp).
#include "run/backend_choice.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "moekit/core/error.hpp"
#include "run/closest_name.hpp"
#include "run/exit_status.hpp"

namespace moekit::app {

namespace {

std::string joined(const std::vector<std::string>& names, const char* sep) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}

struct Checker {
  const MoeProblem& problem;
  const DeviceCapabilities& device;
  const BackendRequest& request;
  ActivationFormat format;

  Support here(Backend b) const {
    if (!BackendRegistry::instance().compiled_in(b))
      return Support::no("not compiled into this build (" +
                         std::string(MOEKIT_WITH_CUDA ? "no implementation registered"
                                                      : "CUDA backend OFF") +
                         ")");
    Support s = backend_supports(b, problem, device, format);
    if (s && request.precomputed_routing && backend_traits(b).monolithic)
      s = Support::no("routes inside the kernel, so it cannot take the precomputed topk_ids of "
                      "the replay file");
    return s;
  }
  // Not in this build, or built for another device than this one: its refusal says nothing
  // about the problem.
  bool mismatched(Backend b) const {
    if (!BackendRegistry::instance().compiled_in(b)) return true;
    const BackendTraits& t = backend_traits(b);
    return t.on_cuda && !(device.is_cuda && device.sm() == t.min_sm);
  }
  // A refusal that is this machine's or this build's fault (exit 3), not the request's.
  bool environmental(Backend b) const {
    return !BackendRegistry::instance().compiled_in(b) || (request.device_detected && mismatched(b));
  }
};

std::string problem_line(const MoeProblem& p, const DeviceCapabilities& device) {
  return "\n  problem: " + p.str() + " on " + device.str() +
         (device.name.empty() || device.name == "cpu" ? "" : " (" + device.name + ")");
}

// Every candidate's verdict, for an error (no candidate is marked selected: none is).
std::string candidates_table(const BackendSelection& sel) {
  std::string s = "\ncandidates:";
  for (const Candidate& c : sel.candidates) {
    std::string name(moe_backend_name(c.backend));
    name.resize(std::max<std::size_t>(name.size(), 24), ' ');
    s += "\n  " + name + (c.accepted ? "accepted" : "refused: " + c.reason);
  }
  return s;
}

[[noreturn]] void refuse(bool environment, const std::string& message) {
  if (environment) throw EnvironmentError(message);
  throw Error(message);
}

}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (Backend b : BackendRegistry::instance().registered())
    names.emplace_back(moe_backend_name(b));
  return names;
}

std::string backend_choices_help() { return "auto|" + joined(backend_names(), "|"); }

Backend parse_backend_name(std::string_view name, const std::string& source) {
  const std::vector<std::string> names = backend_names();
  const std::optional<Backend> b = find_moe_backend(name);
  if (!b) {
    MOEKIT_FAIL(source, ": expected a backend of this build (auto|", joined(names, "|"),
                "; 'reference' = cpu_reference), got '", name, "'", did_you_mean(name, names));
  }
  if (!BackendRegistry::instance().compiled_in(*b)) {
    throw EnvironmentError(detail::concat(
        source, ": backend '", moe_backend_name(*b), "' is not compiled into this build (",
        MOEKIT_WITH_CUDA ? "no implementation registered" : "CUDA backend OFF: rebuild with nvcc",
        "); this build has ", joined(names, "|")));
  }
  return *b;
}

BackendSelection choose_backend(const MoeProblem& p, const DeviceCapabilities& device,
                                const BackendRequest& request) {
  p.validate();
  std::string name = request.name, source = "--backend";
  if (name.empty() || name == "auto") {
    const char* env = std::getenv(kBackendEnvVar);
    name = env && *env ? env : "";
    source = kBackendEnvVar;
  }
  BackendSelection sel;
  sel.format = p.parallel.activation_format();
  const Checker check{p, device, request, sel.format};
  for (Backend b : backend_priority(p, device, sel.format)) {
    const Support s = check.here(b);
    sel.candidates.push_back({b, s.ok, s.reason});
  }

  if (!name.empty() && name != "auto") {
    const Backend b = parse_backend_name(name, source);
    const Support s = check.here(b);
    if (!s) {
      refuse(check.environmental(b),
             detail::concat("backend '", moe_backend_name(b), "' (from ", source,
                            ") cannot run this problem: ", s.reason, problem_line(p, device),
                            request.verbose ? candidates_table(sel) : std::string()));
    }
    bool listed = false;
    for (const Candidate& c : sel.candidates) listed |= c.backend == b;
    if (!listed) sel.candidates.push_back({b, true, {}});
    sel.backend = b;
    sel.overridden = true;
    sel.override_source = source;
    return sel;
  }
  for (const Candidate& c : sel.candidates) {
    if (c.accepted) {
      sel.backend = c.backend;
      return sel;
    }
  }

  // None accepted. Lead with the rule the problem breaks: the reason most candidates give among
  // those built for this device (the CPU ones always are); device and build refusals only when
  // no candidate has another one.
  std::map<std::string, std::vector<std::string>> by_reason;
  std::vector<std::string> order;
  for (const Candidate& c : sel.candidates) {
    if (check.mismatched(c.backend)) continue;
    if (!by_reason.count(c.reason)) order.push_back(c.reason);
    by_reason[c.reason].emplace_back(moe_backend_name(c.backend));
  }
  const std::string more =
      request.verbose ? candidates_table(sel)
                      : std::string("\n  (--verbose lists every backend's reason)");
  if (order.empty()) {
    const Candidate& first = sel.candidates.front();
    refuse(check.environmental(first.backend),
           detail::concat("no backend of this build can run this problem on this device: ",
                          moe_backend_name(first.backend), ": ", first.reason,
                          problem_line(p, device), more));
  }
  std::string lead = order.front();
  for (const std::string& r : order)
    if (by_reason[r].size() > by_reason[lead].size()) lead = r;
  MOEKIT_FAIL("no backend can run this problem: ", lead, " (", joined(by_reason[lead], ", "), ")",
              problem_line(p, device), more);
}

}  // namespace moekit::app
