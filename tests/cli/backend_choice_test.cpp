// The app's shared backend choice (app/run/backend_choice.hpp), closest-name suggestions and the
// memory check's message: what `moekit run` and `moekit oracle` both report.
#include "run/backend_choice.hpp"

#include <gtest/gtest.h>

#include "moe/moe_test_util.hpp"
#include "run/closest_name.hpp"
#include "run/exit_status.hpp"
#include "run/memory_budget.hpp"

namespace moekit::app {
namespace {

using reftest::expect_error;

MoeProblem tiny(std::int64_t hidden = 0) {
  return cli_problem("tiny", "nvfp4", 64, "w4a16", 1, false, hidden);
}

TEST(BackendChoice, NamesAreTheRegistrys) {
  std::vector<std::string> expected;
  for (Backend b : BackendRegistry::instance().registered())
    expected.emplace_back(moe_backend_name(b));
  EXPECT_EQ(backend_names(), expected);
  EXPECT_EQ(backend_choices_help().rfind("auto|cpu_reference|cpu_batched|cpu_monolithic", 0), 0u);
  EXPECT_EQ(parse_backend_name("reference", "--backend"), Backend::kCpuReference);
  EXPECT_EQ(parse_backend_name("CPU_Monolithic", "--backend"), Backend::kCpuMonolithic);
  expect_error([] { parse_backend_name("cpu_monolitic", "MOEKIT_BACKEND"); },
               {"MOEKIT_BACKEND", "cpu_monolitic", "did you mean 'cpu_monolithic'?"});
}

TEST(BackendChoice, TheFailedRuleLeadsAndTheTableFollowsOnlyWhenVerbose) {
  BackendRequest r;
  r.device_detected = false;
  try {
    choose_backend(tiny(100), DeviceCapabilities::cpu(), r);
    FAIL() << "expected moekit::Error";
  } catch (const EnvironmentError& e) {
    FAIL() << "a shape refusal is the problem's, not the machine's: " << e.what();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("no backend can run this problem: hidden 100 / intermediate 512 must be "
                        "multiples of 16 (nvfp4 weight scale blocks)",
                        0),
              0u)
        << msg;
    EXPECT_EQ(msg.find("candidates:"), std::string::npos) << msg;
  }
  r.verbose = true;
  expect_error([&] { choose_backend(tiny(100), DeviceCapabilities::cpu(), r); },
               {"candidates:", "cpu_batched", "needs the batched activation format"});
}

TEST(BackendChoice, OverridesAndEnvironmentErrors) {
  BackendRequest r;
  r.name = "cpu_monolithic";
  EXPECT_EQ(choose_backend(tiny(), DeviceCapabilities::cpu(), r).backend, Backend::kCpuMonolithic);
  // Monolithic kernels route inside: they cannot take a replay file's topk_ids.
  r.precomputed_routing = true;
  expect_error([&] { choose_backend(tiny(), DeviceCapabilities::cpu(), r); },
               {"cpu_monolithic", "--backend", "precomputed topk_ids"});
  r = BackendRequest{};
  r.precomputed_routing = true;
  EXPECT_EQ(choose_backend(tiny(), DeviceCapabilities::cpu(), r).backend, Backend::kCpuReference);
  // A CUDA backend on this machine's CPU: exit 3, whether the build has CUDA or not.
  r = BackendRequest{};
  r.name = "cuda_w4a16_grouped";
  EXPECT_THROW(choose_backend(tiny(), DeviceCapabilities::cpu(), r), EnvironmentError);
  // The same on a device given on the command line is the user's choice: exit 1 (or 3 when
  // the build lacks the backend).
  r.device_detected = false;
  try {
    choose_backend(tiny(), DeviceCapabilities::cuda_sm(10, 0), r);
    FAIL() << "expected a refusal";
  } catch (const EnvironmentError& e) {
    EXPECT_FALSE(MOEKIT_WITH_CUDA) << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sm_100"), std::string::npos) << e.what();
  }
}

TEST(ClosestName, SuggestsPlausibleTyposOnly) {
  EXPECT_EQ(edit_distance("tokens", "tokns"), 1u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("ABC", "abc"), 0u);
  const std::vector<std::string> subs = {"bench", "info", "oracle", "quantize", "run"};
  EXPECT_EQ(closest_name("qantize", subs), "quantize");
  EXPECT_EQ(did_you_mean("runn", subs), "; did you mean 'run'?");
  EXPECT_EQ(did_you_mean("frobnicate", subs), "");
  EXPECT_EQ(did_you_mean("--tok", {"--tokens", "--seed"}), "; did you mean '--tokens'?");
  EXPECT_EQ(did_you_mean("x", {}), "");
}

TEST(MemoryBudget, RefusalNamesFlagsBytesAndSource) {
  MemoryNeed need;
  need.items = {{"weights", 1024.0, "--preset tiny"},
                {"activations", 4.0 * (1ull << 30), "--tokens 999"}};
  EXPECT_NO_THROW(check_host_memory("run", need, {8.0 * (1ull << 30), "test"}));
  expect_error([&] { check_host_memory("run", need, {1.0 * (1ull << 30), "a test limit"}); },
               {"run: --tokens 999 needs 4294968320 bytes (4.0 GiB) of host memory",
                "activations 4.0 GiB [--tokens 999], weights 0.0 GiB [--preset tiny]",
                "1073741824 bytes (1.0 GiB) available (a test limit)"});
  const MemoryAvailable host = host_memory_available();
  EXPECT_GT(host.bytes, 0.0);
  EXPECT_FALSE(host.source.empty());
}

}  // namespace
}  // namespace moekit::app
