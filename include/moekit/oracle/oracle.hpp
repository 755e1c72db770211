// The oracle: picks the MoE backend for a problem on a device and explains every candidate.
//   1. The activation format follows from the parallel config (batched under low-latency EP).
//   2. The candidates are the priority list of the problem's quant scheme (quant_name()).
//   3. Each candidate runs one supports() chain and is accepted or refused with a reason:
//      device kind/capability -> format -> quant scheme -> activation -> routing method ->
//      shapes/alignment -> parallel config -> compiled in (BackendRegistry) -> the
//      implementation's own Experts::supports().
//   4. The first accepted candidate wins, unless an override (--backend / MOEKIT_BACKEND) names
//      one: then it must be known and accepted, or select_backend throws moekit::Error saying why
//      (never a silent fallback).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moekit/framework/fused_moe.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/oracle/backend.hpp"

namespace moekit {

inline constexpr const char* kBackendEnvVar = "MOEKIT_BACKEND";

struct Candidate {
  Backend backend;
  bool accepted = false;
  std::string reason;  // why refused (empty when accepted)
};

struct BackendSelection {
  Backend backend = Backend::kCpuReference;
  ActivationFormat format = ActivationFormat::kStandard;
  bool overridden = false;
  std::string override_source;        // "--backend" or "MOEKIT_BACKEND" when overridden
  std::vector<Candidate> candidates;  // priority order; every one evaluated
  std::string table() const;          // human-readable: one line per candidate
};

struct SelectOptions {
  std::optional<ActivationFormat> format;  // default: problem.parallel.activation_format()
  std::string override_name;               // "" or "auto" = none (a CLI flag value)
  std::string override_source = "--backend";
  // Names of the backends the caller can execute ("reference" stands for cpu_reference). Empty =
  // all (what the moekit tool passes: it runs every registered backend). Others are refused.
  std::vector<std::string> executable;
};

// The backends tried for a problem, best first (priority list of its quant scheme and format).
std::vector<Backend> backend_priority(const MoeProblem& problem, const DeviceCapabilities& device,
                                      ActivationFormat format);
// One backend's supports() chain (never throws for unsupported problems).
Support backend_supports(Backend backend, const MoeProblem& problem,
                         const DeviceCapabilities& device, ActivationFormat format);
// The selection. Throws moekit::Error when the override is unknown / refused, or when no
// candidate is accepted (with the table of reasons).
BackendSelection select_backend(const MoeProblem& problem, const DeviceCapabilities& device,
                                const SelectOptions& options = {});

// What `moekit run` uses: the override is the --backend value if non-empty, else the
// MOEKIT_BACKEND environment variable if set and non-empty, else none.
// `executable`: as SelectOptions::executable.
BackendSelection select_backend_for_run(const MoeProblem& problem, const DeviceCapabilities& device,
                                        std::string_view cli_backend = {},
                                        const std::vector<std::string>& executable = {});

// The problem the CLI (`moekit run`, `moekit oracle`) describes: a layer preset (scaled down where
// hidden/intermediate/experts > 0), a weight quant string (parse_quant_config), M tokens, a
// numerics mode ("w4a16": activations unquantized; "emulate": default_activation_quant of the
// weight scheme; or an explicit activation quant string such as "mxfp8"), and EP over ep_size
// ranks (rank 0; low_latency selects the batched format).
MoeProblem cli_problem(std::string_view preset, std::string_view weight_quant, std::int64_t tokens,
                       std::string_view activation_mode = "w4a16", int ep_size = 1,
                       bool low_latency = false, std::int64_t hidden_size = 0,
                       std::int64_t intermediate_size = 0, int num_experts = 0);

// A backend's name in SelectOptions::executable: "reference" for cpu_reference, else its name.
std::string run_backend_for(Backend backend);

// A ready-to-prepare kernel for a selected backend (CPU backends built in; CUDA ones through the
// BackendRegistry). Throws if the backend has no registered implementation.
FusedMoEKernel make_moe_kernel(Backend backend, const MoeProblem& problem,
                               FusedMoEOptions options = {});

}  // namespace moekit
