// `moekit run` executes every backend of the build that accepts the problem (through the
// oracle's kernel factory), within its error bound of the float64 reference; the CPU ones here.
#include <gtest/gtest.h>

#include "moe/moe_test_util.hpp"
#include "run/run_job.hpp"

namespace moekit {
namespace {

TEST(RunBackends, EveryCpuBackendRunsEverySchemeAndMode) {
  MOEKIT_REF_SEED(seed);
  for (const char* backend : {"cpu_reference", "cpu_monolithic"}) {
    for (const char* quant : {"bf16", "fp8_tensor", "fp8_block", "nvfp4", "mxfp4"}) {
      for (const char* mode : {"w4a16", "emulate"}) {
        SCOPED_TRACE(std::string(backend) + " " + quant + " " + mode);
        RunJobOptions o;
        o.backend = backend;
        o.quant = quant;
        o.mode = mode;
        o.tokens = 11;
        o.seed = seed;
        o.intermediate_size = 128;
        const RunJobReport r = run_job(o);
        EXPECT_TRUE(r.pass) << r.text();
        EXPECT_EQ(r.backend, backend);
      }
    }
  }
}

// cpu_batched needs the batched activation format, which only low-latency EP dispatch gives;
// run refuses it as the oracle does, with the reason.
TEST(RunBackends, ARefusedBackendSaysWhy) {
  RunJobOptions o;
  o.backend = "cpu_batched";
  reftest::expect_error([&] { run_job(o); },
                        {"backend 'cpu_batched' (from --backend) cannot run this problem",
                         "needs the batched activation format"});
}

}  // namespace
}  // namespace moekit
