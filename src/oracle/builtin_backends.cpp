// The backends of this build, registered on the registry's first use: the CPU backends always,
// the SM90 CUDA experts (src/cuda/experts/register_backends.cpp) when the build has CUDA.
// Registering from here rather than from static initializers keeps them in any program that
// links the static library: the registry references this function, which references the rest.
#include <algorithm>
#include <cstdint>
#include <memory>

#include "moekit/framework/cpu.hpp"
#include "moekit/oracle/backend.hpp"

#if MOEKIT_WITH_CUDA
#include "cuda/experts/register_backends.hpp"
#endif

namespace moekit {

namespace {

// The batched CPU pair is built for T_max = the problem's tokens per chunk (one dispatcher).
std::int64_t batched_capacity(const MoeProblem& p) { return std::max<std::int64_t>(p.num_tokens, 1); }

}  // namespace

void register_builtin_backends(BackendRegistry& registry) {
  registry.add(Backend::kCpuReference,
               {.make_experts = [](const MoeProblem&) -> std::unique_ptr<Experts> {
                  return make_cpu_standard_experts();
                },
                .make_prepare_finalize = [](const MoeProblem&) -> std::unique_ptr<PrepareFinalize> {
                  return make_cpu_no_ep_prepare_finalize();
                }});
  registry.add(Backend::kCpuBatched,
               {.make_experts = [](const MoeProblem& p) -> std::unique_ptr<Experts> {
                  return make_cpu_batched_experts(batched_capacity(p));
                },
                .make_prepare_finalize = [](const MoeProblem& p) -> std::unique_ptr<PrepareFinalize> {
                  return make_cpu_batched_prepare_finalize(batched_capacity(p));
                }});
  registry.add(Backend::kCpuMonolithic,
               {.make_experts = [](const MoeProblem&) -> std::unique_ptr<Experts> {
                  return make_cpu_monolithic_experts();
                },
                .make_prepare_finalize = [](const MoeProblem&) -> std::unique_ptr<PrepareFinalize> {
                  return make_cpu_monolithic_prepare_finalize();
                }});
#if MOEKIT_WITH_CUDA
  cuda::register_backends(registry);
#endif
}

}  // namespace moekit
