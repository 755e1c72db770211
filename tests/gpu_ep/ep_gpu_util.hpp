// Helpers of the multi-GPU expert-parallel tests (one GPU per rank).
#pragma once

#include <memory>

#include "moekit/comm/communicator.hpp"

namespace moekit::testing {
std::shared_ptr<Communicator>& gpu_world();  // the nccl communicator of the test process
}  // namespace moekit::testing
