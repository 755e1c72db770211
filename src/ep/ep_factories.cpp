// The public factories of the expert-parallel PrepareFinalize (ep_prepare_finalize.hpp).
#include "ep/ep_common.hpp"
#include "moekit/core/error.hpp"

namespace moekit {
namespace ep {
std::unique_ptr<ModularPrepareFinalize> make_naive_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops, const MoeProblem& problem,
    EpPrepareFinalizeOptions options);
std::unique_ptr<ModularPrepareFinalize> make_all_to_all_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops, const MoeProblem& problem,
    EpPrepareFinalizeOptions options);

std::unique_ptr<ModularPrepareFinalize> make_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops, const MoeProblem& problem,
    EpPrepareFinalizeOptions options) {
  MOEKIT_CHECK_ARG(comm != nullptr, "comm", "a communicator", "null");
  MOEKIT_CHECK_ARG(comm->device().kind == ops->device().kind, "comm device",
                   ops->device().str() + " memory (" + comm->name() + " communicator)",
                   comm->device().str());
  if (options.kind == DispatchKind::kNaive)
    return make_naive_ep_prepare_finalize(std::move(comm), std::move(ops), problem, options);
  return make_all_to_all_ep_prepare_finalize(std::move(comm), std::move(ops), problem, options);
}
}  // namespace ep

std::unique_ptr<ModularPrepareFinalize> make_cpu_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, const MoeProblem& problem,
    EpPrepareFinalizeOptions options) {
  return ep::make_ep_prepare_finalize(std::move(comm), ep::make_cpu_ep_ops(), problem, options);
}

#if !MOEKIT_WITH_CUDA
std::unique_ptr<ModularPrepareFinalize> make_cuda_ep_prepare_finalize(
    std::shared_ptr<Communicator>, const MoeProblem&, EpPrepareFinalizeOptions, int) {
  MOEKIT_FAIL("make_cuda_ep_prepare_finalize: this build has no CUDA backend");
}
#endif

}  // namespace moekit
