// The one list of backend names and the one way a backend is chosen, shared by `moekit run`,
// `moekit oracle`, `moekit info` and their --help texts: the names are the BackendRegistry's
// (every backend of this build, CPU ones included), and a backend that cannot run a problem is
// refused with the same message whichever command asked.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moekit/oracle/oracle.hpp"

namespace moekit::app {

// The registered backends' names, in enum order.
std::vector<std::string> backend_names();
// "auto|cpu_reference|cpu_batched|..." ("reference" is also accepted: an alias of cpu_reference).
std::string backend_choices_help();

// A registered backend by name or alias (case-insensitive). Unknown: moekit::Error naming
// `source`, the value, the valid names and the closest one. Known but not in this build
// (a CUDA backend of a CPU-only build): EnvironmentError.
Backend parse_backend_name(std::string_view name, const std::string& source);

struct BackendRequest {
  // --backend; "" or "auto": MOEKIT_BACKEND when set, else the oracle's first accepted candidate.
  std::string name;
  // The device is this machine's (detected): a refusal for what it lacks is an environment error
  // (exit 3). False for a device given on the command line (`moekit oracle --device sm90`).
  bool device_detected = true;
  // The caller passes precomputed topk ids (a replay file): monolithic kernels, which route
  // inside, cannot take them and are refused.
  bool precomputed_routing = false;
  // Failure messages end with every candidate's reason (otherwise only the rule that failed).
  bool verbose = false;
};

// The oracle's selection (backend_priority + backend_supports) with these errors:
//   - an override that is unknown, or refuses the problem: moekit::Error (exit 1) naming the
//     backend, where it came from (--backend / MOEKIT_BACKEND) and the reason;
//   - no candidate accepts the problem: moekit::Error leading with the rule that failed (the
//     reason most candidates give on a device that has what they need), then the problem;
//   - a refusal that is this machine's or build's (no CUDA device, not compiled in):
//     EnvironmentError (exit 3).
BackendSelection choose_backend(const MoeProblem& problem, const DeviceCapabilities& device,
                                const BackendRequest& request);

}  // namespace moekit::app
