// `moekit info`: the build (CUDA on/off), the devices found and the backends compiled in.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli/command.hpp"
#include "core/device_runtime.hpp"
#include "moekit/core/error.hpp"
#include "moekit/oracle/oracle.hpp"
#include "run/backend_choice.hpp"

namespace {

void setup_info(CLI::App& sub) {
  sub.callback([] {
    namespace dr = moekit::device_runtime;
    std::printf("moekit 0.1.0\n");
    std::printf("build: CUDA backend %s\n", dr::compiled_with_cuda() ? "ON (sm_90a)" : "OFF");
    int n = dr::device_count();
    std::printf("devices: %d CUDA device(s)\n", n);
    for (int i = 0; i < n; ++i) {
      auto d = dr::device_info(i);
      std::printf("  cuda:%d %s  sm_%d%d  %d SMs  %.1f GiB  L2 %.0f MiB\n", i, d.name.c_str(), d.sm_major,
                  d.sm_minor, d.multiprocessors, d.global_memory_bytes / 1073741824.0,
                  d.l2_bytes / 1048576.0);
    }
    const auto& registry = moekit::BackendRegistry::instance();
    const auto backends = registry.registered();
    std::printf("backends: %zu compiled in\n", backends.size());
    for (moekit::Backend b : backends) {
      const auto& t = moekit::backend_traits(b);
      std::printf("  %-24s %-8s %-10s %s\n", std::string(moekit::moe_backend_name(b)).c_str(),
                  t.on_cuda ? "sm_90a" : "cpu", moekit::activation_format_name(t.format).data(),
                  t.description);
    }
    // The override every command honours, checked like they check it.
    if (const char* env = std::getenv(moekit::kBackendEnvVar); env && *env) {
      try {
        const moekit::Backend b = moekit::app::parse_backend_name(env, moekit::kBackendEnvVar);
        std::printf("override: %s=%s (selects %s)\n", moekit::kBackendEnvVar, env,
                    std::string(moekit::moe_backend_name(b)).c_str());
      } catch (const moekit::Error& e) {
        std::printf("override: %s=%s is not usable: %s\n", moekit::kBackendEnvVar, env, e.what());
      }
    }
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(info, "Print the build, the devices found and the backends compiled in",
                        setup_info);
