// Factory of the fp8 block experts backend (see fp8_block_experts.hpp).
#include "cuda/experts/fp8_block_experts.hpp"

namespace moekit::cuda {

std::unique_ptr<ModularExperts> make_fp8_block_grouped_experts(const MoeProblem& problem) {
  return std::make_unique<GroupedGemmExperts>(problem, gemm::GroupedGemmType::kFP8Block128);
}

}  // namespace moekit::cuda
