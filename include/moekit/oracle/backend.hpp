// MoE backends: the enum the oracle chooses from, device capabilities, and the registry of the
// implementations compiled into this build.
//
// The enum lists the backends that exist; planned ones (CUDA batched-format and monolithic experts,
// Blackwell W4A4 backends) are described in docs/architecture.md, not here. The registry is filled
// on first use with every backend of this build (CPU always, CUDA when the build has it), so a
// program that links the static library gets them without linker options. A program may add or
// replace an implementation:
//   BackendRegistry::instance().add(Backend::kCudaW4A16Grouped, {
//       .make_experts = [](const MoeProblem& p) { return std::make_unique<MyExperts>(p); },
//       .make_prepare_finalize = [](const MoeProblem& p) { return make_my_prepare_finalize(p); }});
// Factories must be cheap (no device allocation): the oracle builds an instance to ask supports().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moekit/framework/experts.hpp"
#include "moekit/framework/prepare_finalize.hpp"
#include "moekit/framework/problem.hpp"

namespace moekit {

enum class Backend : std::uint8_t {
  kCpuReference,         // CPU, standard format (NoEP prepare/finalize + CPU experts)
  kCpuBatched,           // CPU, batched format
  kCpuMonolithic,        // CPU, routing + experts + reduce in one piece
  kCudaBf16Grouped,      // SM90 bf16 grouped GEMM (W16A16)
  kCudaFp8BlockGrouped,  // SM90 fp8 grouped GEMM, DeepSeek 128x128 weights / 1x128 activations
  kCudaW4A16Grouped,     // SM90 NVFP4/MXFP4 weights dequantized to bf16 in registers
  kCudaW4A8Grouped,      // SM90 MXFP4 weights as e4m3 (exact) x fp8_token activations
};

std::string_view moe_backend_name(Backend b);  // "cpu_reference", "cuda_w4a16_grouped", ...
std::optional<Backend> find_moe_backend(std::string_view name);  // case-insensitive
Backend parse_moe_backend(std::string_view name);  // throws moekit::Error listing valid names
const std::vector<Backend>& all_moe_backends();

// Static facts about a backend (independent of the problem).
struct BackendTraits {
  Backend backend;
  ActivationFormat format;
  bool monolithic;
  bool on_cuda;  // false: CPU
  int min_sm;    // 0 for CPU; 90 for the SM90 (sm_90a) kernels
  const char* description;
};
const BackendTraits& backend_traits(Backend b);

// What the oracle knows about the device: CPU, or a CUDA compute capability.
struct DeviceCapabilities {
  bool is_cuda = false;
  int sm_major = 0;
  int sm_minor = 0;
  std::string name;  // "cpu", "NVIDIA H200", or "assumed, not detected" for parse()
  int sm() const { return sm_major * 10 + sm_minor; }
  std::string str() const;  // "cpu" or "sm_90"
  static DeviceCapabilities cpu();
  static DeviceCapabilities cuda_sm(int sm_major, int sm_minor, std::string name = {});
  // "cpu", "sm90", "sm_90", "sm90a", "sm100", "sm_100a", ...; throws naming the accepted forms.
  static DeviceCapabilities parse(std::string_view text);
  // The first CUDA device when there is one (and the build has CUDA), else cpu().
  static DeviceCapabilities detect();
};

// An implementation of a backend: its experts and the PrepareFinalize that goes with them.
struct BackendRegistration {
  std::function<std::unique_ptr<Experts>(const MoeProblem&)> make_experts;
  // Optional: the PrepareFinalize matching the experts (the device's quantize / finalize). Absent:
  // the backend can only be used with a caller-provided PrepareFinalize.
  std::function<std::unique_ptr<PrepareFinalize>(const MoeProblem&)> make_prepare_finalize;
};

class BackendRegistry {
 public:
  // The registry, holding every backend of this build on first use (register_builtin_backends).
  static BackendRegistry& instance();
  // A second registration of a backend replaces the first.
  void add(Backend backend, BackendRegistration registration);
  void remove(Backend backend);  // tests
  bool compiled_in(Backend backend) const;
  const BackendRegistration* find(Backend backend) const;  // nullptr when not compiled in
  std::vector<Backend> registered() const;                  // in enum order

 private:
  BackendRegistry();
  std::vector<std::optional<BackendRegistration>> entries_;
};

// Adds the backends compiled into this build to `registry` (the CPU backends, and the SM90 CUDA
// experts when the build has CUDA). BackendRegistry::instance() calls it once.
void register_builtin_backends(BackendRegistry& registry);

}  // namespace moekit
