// make_cuda_ep_prepare_finalize: the expert-parallel algorithms of src/ep/ with the CUDA EpOps.
// Works with any communicator on CUDA memory (nccl) and any Experts whose supports() accepts the
// experts problem (expert_map masking included).
#include "ep/ep_ops.hpp"
#include "moekit/core/error.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"

namespace moekit {
namespace ep {
std::unique_ptr<ModularPrepareFinalize> make_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, std::unique_ptr<EpOps> ops, const MoeProblem& problem,
    EpPrepareFinalizeOptions options);
}  // namespace ep

std::unique_ptr<ModularPrepareFinalize> make_cuda_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, const MoeProblem& problem,
    EpPrepareFinalizeOptions options, int device) {
  MOEKIT_CHECK_ARG(device >= 0, "device", ">= 0", device);
  return ep::make_ep_prepare_finalize(std::move(comm), ep::make_cuda_ep_ops(device), problem,
                                      options);
}

}  // namespace moekit
