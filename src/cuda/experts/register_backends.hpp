// The SM90 CUDA experts backends of this build (register_builtin_backends calls this).
#pragma once

#include "moekit/oracle/backend.hpp"

namespace moekit::cuda {

// Adds cuda_bf16_grouped, cuda_fp8_block_grouped, cuda_w4a16_grouped and cuda_w4a8_grouped, each
// with the CUDA NoEP PrepareFinalize.
void register_backends(BackendRegistry& registry);

}  // namespace moekit::cuda
