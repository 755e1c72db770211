// Internal: `moekit bench` (app/cli/bench.cpp parses the options and calls run_bench).
// One run measures the ceilings, then for each preset x scheme x token count: the cuBLAS bf16
// per-expert baseline and the moekit experts (any backend by name) in CUDA graphs with L2-cold
// weights; prints a table and optionally writes JSON. Methodology: docs/performance.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moekit/framework/experts.hpp"

namespace moekit::bench {

struct BenchOptions {
  std::vector<std::string> presets{"deepseek-v3", "mixtral-8x7b"};
  std::vector<std::string> quants{"bf16", "fp8_block"};
  std::vector<std::int64_t> tokens{1, 8, 64, 512, 4096};
  std::string backend;    // experts backend name; empty = the default for each scheme
  std::string json_path;  // empty = no JSON
  int reps = 30;          // timed replays per measurement (median reported)
  std::uint64_t seed = 1;
  bool baseline = true;
  std::string command_prefix = "moekit bench";  // how rows' reproduce commands begin
};

// The experts backends the harness can run (--backend): the registered CUDA modular experts of the
// standard format.
std::vector<std::string> experts_names();

// Checks the options without a device: throws moekit::Error naming the bad argument (--quant,
// --preset, --tokens, --reps, --backend) with the expected and the actual value.
void validate_bench_options(const BenchOptions& options);

// validate_bench_options, then throws moekit::Error when there is no CUDA device (with a message
// that says so). Schemes: bf16, fp8_block, nvfp4, mxfp4 (the last two as W4A16, weights quantized
// from the same bf16 masters; see bench_weights.hpp).
void run_bench(const BenchOptions& options);

// GEMM level (`moekit bench --gemm`, bf16 only; quants, backend and baseline are ignored): for
// each preset and token count, the experts' GEMM1 and GEMM2 alone per kernel (decode,
// CUTLASS narrow and wide, wgmma; the tuning rules' pick marked) in CUDA graphs with L2-cold weights, against the floor
// touched weight bytes / in-run copy bandwidth (bench_gemm.cpp).
void run_gemm_bench(const BenchOptions& options);

}  // namespace moekit::bench
