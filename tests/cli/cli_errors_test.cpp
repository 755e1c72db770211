// The exit-code contract of the built `moekit` tool (app/run/exit_status.hpp), bad input by bad
// input: each case runs the binary and checks the exit code (0 success, 1 bad input / failed
// check, 2 usage, 3 environment; never a signal) and a substring of the message. The cases that
// need files on disk (quantize, replay) are in cli_outputs_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli_process.hpp"
#include "core/device_runtime.hpp"

namespace moekit::clitest {
namespace {

struct BadInput {
  std::vector<std::string> args;
  int code;
  std::string needle;  // in the output
  Env env = {};
};

std::string show(const std::vector<std::string>& args) {
  std::string s = "moekit";
  for (const auto& a : args) s += " " + a;
  return s;
}

bool has_gpu() { return device_runtime::device_count() > 0; }

// A successful happy-path case, whatever it prints.
CliResult expect_success(const std::vector<std::string>& args, const Env& env = {}) {
  const CliResult r = run_cli(args, env);
  EXPECT_TRUE(r.exited && r.code == 0) << show(args) << " -> " << r.code << "\n" << r.output;
  return r;
}

TEST(CliExitCodes, EveryBadInputHasItsCodeAndNamesTheProblem) {
  std::vector<BadInput> cases = {
      // 2: usage (unknown subcommand or flag, with the closest valid one; a missing argument).
      {{"frobnicate"}, 2, "unknown subcommand 'frobnicate'"},
      {{"frobnicate"}, 2, "bench, info, oracle, quantize, run"},
      {{"runn"}, 2, "did you mean 'run'?"},
      {{}, 2, "a subcommand is required"},
      {{"--frob"}, 2, "unknown option '--frob' for 'moekit'"},
      {{"run", "--frob"}, 2, "unknown option '--frob' for 'moekit run'"},
      {{"run", "--tokns", "5"}, 2, "did you mean '--tokens'?"},
      {{"oracle", "--devise", "cpu"}, 2, "did you mean '--device'?"},
      {{"run", "extra"}, 2, "unexpected argument 'extra'"},
      {{"run", "--tokens"}, 2, "--tokens"},
      {{"quantize"}, 2, "input is required"},
      {{"quantize", "in"}, 2, "output is required"},
      // 1: integer flags: overflow, negative, not a number, out of range (the flag named).
      {{"run", "--tokens", "99999999999999999999"}, 1, "--tokens: expected an integer in [0, "},
      {{"run", "--tokens", "-5"}, 1, "--tokens: expected an integer"},
      {{"run", "--tokens", "abc"}, 1, "--tokens: expected an integer in [0, 2147483647], got abc"},
      {{"run", "--tokens", "1e3"}, 1, "not an integer"},
      {{"run", "--seed", "-1"}, 1, "--seed: expected an integer in [0, 18446744073709551615], got -1"},
      {{"run", "--seed", "18446744073709551616"}, 1, "--seed: expected an integer"},
      {{"run", "--hidden", "-1"}, 1, "--hidden"},
      {{"run", "--intermediate", "4294967296"}, 1, "--intermediate"},
      {{"run", "--experts", "-3"}, 1, "--experts"},
      {{"run", "--layer", "-1"}, 1, "--layer"},
      {{"oracle", "--tokens", "-1"}, 1, "--tokens"},
      {{"oracle", "--ep", "0"}, 1, "--ep: expected an integer in [1, 65536], got 0"},
      {{"bench", "--tokens", "1,0"}, 1, "--tokens: expected an integer in [1, "},
      {{"bench", "--tokens", "1,99999999999999999999"}, 1, "(out of range)"},
      {{"bench", "--reps", "0"}, 1, "--reps"},
      {{"bench", "--seed", "-1"}, 1, "--seed"},
      {{"bench", "--preset", "gpt-5"}, 1, "gpt-5"},
      {{"quantize", "in", "out", "--calibration-tokens", "0"}, 1, "--calibration-tokens"},
      {{"quantize", "in", "out", "--input-amax", "nan"}, 1, "--input-amax"},
      {{"quantize", "in", "out", "--input-amax", "-1"}, 1, "--input-amax"},
      // 1: resource limits up front, naming the flag, the bytes needed and available.
      {{"run", "--tokens", "20000000"}, 1, "run: --tokens 20000000 needs "},
      {{"run", "--tokens", "20000000"}, 1, "bytes"},
      {{"run", "--tokens", "20000000"}, 1, "available (MemAvailable"},
      {{"run", "--experts", "2000000000"}, 1, "--experts 2000000000 needs"},
      {{"run", "--preset", "mixtral-8x7b"}, 1, "--preset mixtral-8x7b needs"},
      // 1: other values.
      {{"run", "--quant", "int4"}, 1, "--quant"},
      {{"run", "--mode", "w4a4"}, 1, "--mode"},
      {{"run", "--preset", "gpt-5"}, 1, "gpt-5"},
      {{"run", "--layer", "3"}, 1, "--checkpoint"},
      {{"run", "--checkpoint", "/nonexistent/moekit", "--layer", "0"}, 1,
       "--checkpoint: expected an existing checkpoint directory, got /nonexistent/moekit"},
      {{"run", "--input", "/nonexistent/in.safetensors"}, 1,
       "--input: expected an existing safetensors file, got /nonexistent/in.safetensors"},
      {{"quantize", "/nonexistent/in", "/tmp/out"}, 1,
       "quantize: input: expected an existing checkpoint directory, got /nonexistent/in"},
      {{"oracle", "--device", "sm9x"}, 1, "--device"},
      {{"quantize", ".", "/tmp/out", "--format", "int3"}, 1, "int3"},
      // 1: the rule that failed first; every backend's reason only with --verbose.
      {{"run", "--hidden", "100"}, 1,
       "no backend can run this problem: hidden 100 / intermediate 512 must be multiples of 16"},
      {{"run", "--hidden", "100"}, 1, "--verbose lists every backend's reason"},
      {{"run", "--hidden", "100", "--verbose"}, 1, "candidates:"},
      // 1: backend names: one list (the registry's), the same refusal in every command.
      {{"run", "--backend", "nope"}, 1, "--backend: expected a backend of this build (auto|"},
      {{"run", "--backend", "cpu_referense"}, 1, "did you mean 'cpu_reference'?"},
      {{"oracle", "--backend", "nope"}, 1, "--backend: expected a backend of this build"},
      {{"run", "--backend", "cpu_batched"}, 1, "needs the batched activation format"},
      {{"oracle", "--backend", "cpu_batched"}, 1, "needs the batched activation format"},
      {{"run"}, 1, "MOEKIT_BACKEND: expected a backend of this build", {{"MOEKIT_BACKEND", "x"}}},
      {{"run"}, 1, "did you mean 'cpu_monolithic'?", {{"MOEKIT_BACKEND", "cpu_monolithc"}}},
      {{"run"}, 1, "(from MOEKIT_BACKEND) cannot run", {{"MOEKIT_BACKEND", "cpu_batched"}}},
      {{"oracle"}, 1, "(from MOEKIT_BACKEND) cannot run", {{"MOEKIT_BACKEND", "cpu_batched"}}},
  };
  if (!has_gpu()) {
    // 3: environment (no GPU where one is required; a build without CUDA). Option values are
    // still checked first (above: exit 1 without a GPU too).
    const std::string why = MOEKIT_WITH_CUDA ? "needs a CUDA device" : "not compiled into this build";
    cases.push_back({{"run", "--backend", "cuda_bf16_grouped", "--quant", "bf16"}, 3, why});
    cases.push_back({{"oracle", "--backend", "cuda_bf16_grouped", "--quant", "bf16"}, 3, why});
    cases.push_back({{"run"}, 3, why, {{"MOEKIT_BACKEND", "cuda_w4a16_grouped"}}});
    cases.push_back({{"bench", "--preset", "tiny", "--tokens", "1"}, 3,
                     MOEKIT_WITH_CUDA ? "no CUDA device found" : "built without the CUDA backend"});
  }
  for (const BadInput& c : cases) {
    const CliResult r = run_cli(c.args, c.env);
    std::string env;
    for (const auto& [k, v] : c.env) env += k + "=" + v + " ";
    SCOPED_TRACE(env + show(c.args));
    ASSERT_TRUE(r.exited) << "killed by signal " << r.signal << "\n" << r.output;
    EXPECT_EQ(r.code, c.code) << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << "lacks '" << c.needle << "':\n"
                                                          << r.output;
    // One message, first line first: what kind of failure, then the message.
    const char* kind = c.code == 2 ? "moekit: usage error: "
                       : c.code == 3 ? "moekit: environment error: "
                                     : "moekit: error: ";
    EXPECT_EQ(r.output.rfind(kind, 0), 0u) << r.output;
  }
}

// The example: refused in well under a second (nothing is allocated), not OOM-killed.
TEST(CliExitCodes, TwentyMillionTokensAreRefusedAtOnce) {
  const CliResult r = run_cli({"run", "--tokens", "20000000"});
  ASSERT_TRUE(r.exited) << r.output;
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_LT(r.seconds, 5.0) << "an up-front check should not take " << r.seconds << " s";
  EXPECT_NE(r.output.find("host memory"), std::string::npos) << r.output;
}

// A refused override fails the same way in `moekit run` and `moekit oracle`.
TEST(CliExitCodes, RunAndOracleRefuseABackendIdentically) {
  for (const char* backend : {"cpu_batched", "nope"}) {
    const CliResult run = run_cli({"run", "--backend", backend});
    const CliResult oracle = run_cli({"oracle", "--backend", backend});
    EXPECT_EQ(run.code, 1) << run.output;
    EXPECT_EQ(oracle.code, 1) << oracle.output;
    EXPECT_EQ(run.first_line(), oracle.first_line());
  }
}

TEST(CliHappyPaths, EverySubcommand) {
  CliResult r = expect_success({"--help"});
  EXPECT_NE(r.output.find("Exit codes: 0 success; 1 bad input"), std::string::npos) << r.output;
  r = expect_success({"--version"});
  EXPECT_NE(r.output.find("moekit 0.1.0"), std::string::npos) << r.output;
  for (const char* sub : {"run", "oracle", "quantize", "info", "bench"})
    expect_success({sub, "--help"});
  r = expect_success({"run"});
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  r = expect_success({"run", "--tokens", "8", "--json"});
  EXPECT_NE(r.output.find("\"pass\": true"), std::string::npos) << r.output;
  // Every backend name `info` lists is accepted by run and oracle; the CPU ones that accept the
  // default problem run it (cpu_batched needs the batched format of low-latency EP).
  r = expect_success({"info"});
  for (const char* name : {"cpu_reference", "cpu_batched", "cpu_monolithic"})
    EXPECT_NE(r.output.find(name), std::string::npos) << r.output;
  for (const char* backend : {"cpu_reference", "reference", "cpu_monolithic"}) {
    r = expect_success({"run", "--tokens", "16", "--backend", backend});
    EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  }
  r = expect_success({"oracle", "--ep", "2", "--low-latency", "--backend", "cpu_batched"});
  EXPECT_NE(r.output.find("selected: cpu_batched"), std::string::npos) << r.output;
  r = expect_success({"oracle"}, {{"MOEKIT_BACKEND", "cpu_monolithic"}});
  EXPECT_NE(r.output.find("selected: cpu_monolithic (override from MOEKIT_BACKEND)"),
            std::string::npos)
      << r.output;
  r = expect_success({"info"}, {{"MOEKIT_BACKEND", "cpu_monolithic"}});
  EXPECT_NE(r.output.find("override: MOEKIT_BACKEND=cpu_monolithic"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace moekit::clitest
