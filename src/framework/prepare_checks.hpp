// Internal: the Support checks every PrepareFinalize makes of the GEMM1 input, whatever its device
// (weight-on-input routing needs top_k 1; block-scaled activations need H aligned to the block).
#pragma once

#include "moekit/framework/experts.hpp"
#include "moekit/framework/problem.hpp"

namespace moekit::detail {

Support prepare_input_supports(const MoeProblem& problem);

}  // namespace moekit::detail
