// `moekit bench --ep N` (GPU ranks under mpirun or bench/run_device_ep.sh's file launcher): the
// expert-parallel layer per rank, its communication share, and the bytes it moves against the bus
// bandwidth measured in the same run. See ep_bench.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moekit::bench {

struct EpBenchOptions {
  std::vector<std::string> presets{"deepseek-v3"};
  std::vector<std::string> quants{"fp8_block", "nvfp4"};
  std::vector<std::int64_t> tokens{64, 4096};  // tokens PER RANK
  std::vector<std::string> dispatch{"naive", "a2a"};
  int ep = 2;
  int reps = 20;
  std::uint64_t seed = 1;
  std::string json_path;
};

void run_ep_bench(const EpBenchOptions& options);

}  // namespace moekit::bench
