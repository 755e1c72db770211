// `moekit bench` option checks (CUDA builds; they need no device): every bad argument throws
// moekit::Error naming it, the expected and the actual value, before the device is looked for; and
// every scheme the harness lists (nvfp4 / mxfp4 included) is accepted.
#include <gtest/gtest.h>

#if MOEKIT_WITH_CUDA
#include "bench/bench.hpp"
#include "moe/moe_test_util.hpp"

namespace moekit {
namespace {

using reftest::expect_error;

bench::BenchOptions options() {
  bench::BenchOptions o;
  o.presets = {"deepseek-v3"};
  o.quants = {"bf16", "fp8_block", "nvfp4", "mxfp4"};
  o.tokens = {1, 8};
  return o;
}

TEST(BenchOptions, EverySchemeAndTheW4A16BackendAreAccepted) {
  EXPECT_NO_THROW(bench::validate_bench_options(options()));
  bench::BenchOptions o = options();
  o.backend = "cuda_w4a16_grouped";
  EXPECT_NO_THROW(bench::validate_bench_options(o));
}

TEST(BenchOptions, BadArgumentsAreNamed) {
  bench::BenchOptions o = options();
  o.quants = {"nvfp4", "nvfp5"};
  expect_error([&] { bench::validate_bench_options(o); },
               {"--quant", "nvfp5", "bf16, fp8_block, nvfp4, mxfp4"});
  o = options();
  o.quants.clear();
  expect_error([&] { bench::validate_bench_options(o); }, {"--quant"});
  o = options();
  o.presets = {"deepseek-v4"};
  expect_error([&] { bench::validate_bench_options(o); }, {"--preset", "deepseek-v4"});
  o = options();
  o.tokens = {8, 0};
  expect_error([&] { bench::validate_bench_options(o); }, {"--tokens", ">= 1", "0"});
  o = options();
  o.tokens.clear();
  expect_error([&] { bench::validate_bench_options(o); }, {"--tokens"});
  o = options();
  o.reps = 0;
  expect_error([&] { bench::validate_bench_options(o); }, {"--reps", ">= 1"});
  o = options();
  o.backend = "cuda_w4a17_grouped";
  expect_error([&] { bench::validate_bench_options(o); },
               {"--backend", "cuda_w4a17_grouped", "cuda_w4a16_grouped"});
}

// run_bench checks its arguments before looking for a device: a bad scheme is named on a machine
// without a GPU too (and never starts a measurement on one with a GPU).
TEST(BenchOptions, RunBenchNamesBadArgumentsFirst) {
  bench::BenchOptions o = options();
  o.quants = {"int3"};
  expect_error([&] { bench::run_bench(o); }, {"--quant", "int3"});
}

}  // namespace
}  // namespace moekit
#endif  // MOEKIT_WITH_CUDA
