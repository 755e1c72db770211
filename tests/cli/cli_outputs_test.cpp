// Commands that write (`moekit quantize`, `moekit run --output`) lose nothing, run as the built
// tool: an existing output is kept unless --overwrite; a failed, or interrupted (SIGINT /
// SIGTERM), run leaves no partial output, no empty directory and no staging leftovers; the input
// stays byte-identical; inputs carrying NaN / Inf are refused before anything runs.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "cli/cli_fixtures.hpp"
#include "cli/cli_process.hpp"
#include "io/io_test_util.hpp"
#include "moekit/io/moe_loader.hpp"

namespace moekit::clitest {
namespace {

namespace fs = std::filesystem;
using io::testing::TempDir;

// A workspace: in/ holds the checkpoint, outputs go next to it.
struct Workspace {
  TempDir root;
  std::string in = root.file("in");
  std::string out = root.file("out");
  std::map<std::string, std::string> input_before;
  explicit Workspace(std::uint64_t seed) {
    fs::create_directory(in);
    write_tiny_checkpoint(in, seed);
    input_before = snapshot(in);
  }
  // Nothing but the input (and `keep`) in the workspace, and the input unchanged.
  void expect_clean(const std::vector<std::string>& keep = {}) const {
    std::vector<std::string> expected = keep;
    expected.push_back("in");
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(entries(root.str()), expected) << "leftovers next to the output";
    EXPECT_TRUE(snapshot(in) == input_before) << "the input directory changed";
  }
};

CliResult quantize(const std::vector<std::string>& extra, const Env& env = {}) {
  std::vector<std::string> args = {"quantize"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_cli(args, env);
}

TEST(CliQuantize, WritesACheckpointThenKeepsItUnlessOverwrite) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Workspace w(seed);
  CliResult r = quantize({w.in, w.out, "--format", "mxfp4"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(io::load_moe_layer(w.out, 2).weights.quant.scheme, QuantScheme::kMXFP4);
  EXPECT_TRUE(fs::exists(w.out + "/tokenizer.json"));
  w.expect_clean({"out"});
  const auto first = snapshot(w.out);

  // Again into the now non-empty output: refused, nothing touched.
  std::ofstream(w.out + "/notes.txt") << "the user's file";
  r = quantize({w.in, w.out, "--format", "fp8_block"});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("non-empty directory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  auto expected = first;
  expected["notes.txt"] = "the user's file";
  EXPECT_TRUE(snapshot(w.out) == expected);
  w.expect_clean({"out"});

  // With --overwrite: the new checkpoint replaces the old one whole (no stale files mixed in).
  r = quantize({w.in, w.out, "--format", "fp8_block", "--overwrite"});
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(w.out + "/notes.txt"));
  EXPECT_EQ(io::load_moe_layer(w.out, 0).weights.quant.scheme, QuantScheme::kFP8Block128x128);
  w.expect_clean({"out"});

  // An empty existing directory is a valid output.
  fs::create_directory(w.root.file("empty"));
  r = quantize({w.in, w.root.file("empty"), "--layers", "1"});
  EXPECT_EQ(r.code, 0) << r.output;
  w.expect_clean({"empty", "out"});
}

TEST(CliQuantize, BadOutputsAreRefusedBeforeAnythingIsWritten) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Workspace w(seed);
  std::ofstream(w.root.file("file")) << "x";
  fs::create_directories(w.root.file("tree/sub"));
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{w.in, w.root.file("file")}, "expected a directory (new or empty), got an existing file"},
      {{w.in, w.root.file("file"), "--overwrite"}, "got an existing file"},
      {{w.in, w.root.file("tree")}, "non-empty directory"},
      {{w.in, w.root.file("tree"), "--overwrite"}, "without subdirectories"},
      {{w.in, w.root.file("no/such/dir")}, "existing directory"},
      {{w.in, w.in}, "different from the input directory"},
      {{w.in, w.root.str(), "--overwrite"}, "does not contain the input directory"},
      {{w.in, w.out, "--format", "bf16"}, "a quantized format"},
      {{w.in, w.out, "--layers", "1,x"}, "--layers"},
      {{w.in, w.out, "--layers", "7"}, "layers"},
      {{w.root.file("nope"), w.out}, "nope"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args.back());
    const CliResult r = quantize(c.args);
    ASSERT_TRUE(r.exited) << r.output;
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << r.output;
  }
  w.expect_clean({"file", "tree"});
  EXPECT_TRUE(fs::exists(w.root.file("tree/sub")));
}

// A config whose layer needs more memory than any machine has: refused before loading.
TEST(CliQuantize, ALayerLargerThanMemoryIsRefusedUpFront) {
  TempDir d;
  std::ofstream(d.file("config.json"))
      << R"({"model_type":"qwen3_moe","num_hidden_layers":1,"hidden_size":65536,)"
      << R"("num_experts":4096,"num_experts_per_tok":8,"moe_intermediate_size":65536})";
  const CliResult r = quantize({d.str(), d.file("out")});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("of host memory (one MoE layer's experts"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(d.file("out")));
}

// A failure after the first of three layers (fault injection): no output, no leftovers.
TEST(CliQuantize, AFailureMidWayLeavesNothing) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Workspace w(seed);
  const CliResult r = quantize({w.in, w.out}, {{"MOEKIT_TEST_QUANTIZE_FAULT", "throw:1"}});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("injected fault after 1 layer(s)"), std::string::npos) << r.output;
  w.expect_clean();
  // Over an existing checkpoint with --overwrite: the old one stays intact.
  ASSERT_EQ(quantize({w.in, w.out, "--format", "mxfp4"}).code, 0);
  const auto old = snapshot(w.out);
  const CliResult again =
      quantize({w.in, w.out, "--overwrite"}, {{"MOEKIT_TEST_QUANTIZE_FAULT", "throw:2"}});
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_TRUE(snapshot(w.out) == old) << "a failed --overwrite damaged the old output";
  w.expect_clean({"out"});
}

// A real signal while the first layer is written and the rest is not: the process exits
// 128 + signal (not killed by it), and removes the partial output.
TEST(CliQuantize, AnInterruptedRunLeavesNothing) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    Workspace w(seed);
    CliProcess p({"quantize", w.in, w.out}, {{"MOEKIT_TEST_QUANTIZE_FAULT", "pause:1"}});
    ASSERT_TRUE(p.read_until("paused after 1 layer(s)", 60)) << "the run did not reach layer 1";
    // Mid-way: the staging directory exists beside the output, holding layer 0's file.
    bool staging = false;
    for (const std::string& e : entries(w.root.str())) staging |= e.rfind(".out.moekit-partial-", 0) == 0;
    EXPECT_TRUE(staging) << "expected a staging directory mid-way";
    p.send(sig);
    const CliResult r = p.wait(30);
    ASSERT_TRUE(r.exited) << "died of signal " << r.signal << "\n" << r.output;
    EXPECT_EQ(r.code, 128 + sig) << r.output;
    EXPECT_NE(r.output.find("partial outputs removed"), std::string::npos) << r.output;
    w.expect_clean();
  }
}

TEST(CliQuantize, NaNWeightsAreNamed) {
  TempDir d;
  MoeLayerConfig c = write_tiny_checkpoint(d.str(), 5, 1);
  // Rewrite layer 0 with a NaN and an Inf in expert 2's up projection.
  MoeWeights w = random_moe_weights(c, QuantConfig{QuantScheme::kBF16}, 5);
  auto* v = w.w13.values.ptr<std::uint16_t>();
  const std::int64_t i = c.intermediate_size, h = c.hidden_size;
  v[(2 * 2 * i + i + 3) * h + 7] = 0x7FC0;  // NaN: expert 2, up row 3, column 7
  v[(2 * 2 * i + i + 5) * h + 1] = 0x7F80;  // +Inf
  const auto tensors = io::export_moe_layer(w, random_router_weights(c, 6),
                                            io::CheckpointFormat::kBF16, 0, io::ExpertNaming::kQwen);
  io::write_safetensors(d.file("model-0.safetensors"), io::named_views(tensors));
  const std::string needle =
      "tensor 'model.layers.0.mlp.experts.2.up_proj.weight' contains 1 NaN value, first at "
      "[3, 7], and 1 Inf value, first at [5, 1]";
  CliResult r = quantize({d.str(), d.file("out")});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(d.file("out")));
  r = run_cli({"run", "--checkpoint", d.str(), "--layer", "0"});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST(CliQuantize, NonFiniteCalibrationIsNamed) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Workspace w(seed);
  Tensor calib = random_hidden_states(6, 64, DType::kF32, seed + 3);
  calib.ptr<float>()[4 * 64 + 9] = std::numeric_limits<float>::infinity();
  const std::string path = w.root.file("calib.safetensors");
  io::write_safetensors(path, {{"hidden_states", calib.view()}});
  const CliResult r = quantize({w.in, w.out, "--calibration", path});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("tensor 'hidden_states' contains 1 Inf value, first at [4, 9]"),
            std::string::npos)
      << r.output;
  w.expect_clean({"calib.safetensors"});
}

TEST(CliReplay, NonFiniteInputsAreNamedAndOutputsAreKept) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  TempDir ck, d;  // the checkpoint, and the replay files (not in it: it would read them)
  write_tiny_checkpoint(ck.str(), seed, 1);
  const std::int64_t m = 32;
  Tensor hidden = random_hidden_states(m, 64, DType::kF32, seed + 1);
  const std::string good = d.file("good.safetensors");
  io::write_safetensors(good, {{"hidden_states", hidden.view()}});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  hidden.ptr<float>()[17 * 64 + 2] = nan;
  hidden.ptr<float>()[20 * 64 + 0] = nan;
  hidden.ptr<float>()[31 * 64 + 63] = nan;
  const std::string bad = d.file("bad.safetensors");
  io::write_safetensors(bad, {{"hidden_states", hidden.view()}});
  Tensor logits(DType::kF32, Shape{m, 4});
  for (std::int64_t k = 0; k < logits.numel(); ++k) logits.ptr<float>()[k] = 0.1f * float(k % 7);
  logits.ptr<float>()[9 * 4 + 1] = -std::numeric_limits<float>::infinity();
  const std::string bad_logits = d.file("bad_logits.safetensors");
  Tensor clean = random_hidden_states(m, 64, DType::kF32, seed + 1);
  io::write_safetensors(bad_logits, {{"hidden_states", clean.view()}, {"router_logits", logits.view()}});

  const std::vector<std::string> layer = {"run", "--checkpoint", ck.str(), "--layer", "0"};
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = layer;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  CliResult r = run({"--input", bad});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("tensor 'hidden_states' contains 3 NaN values, first at [17, 2]"),
            std::string::npos)
      << r.output;
  r = run({"--input", bad_logits});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("tensor 'router_logits' contains 1 Inf value, first at [9, 1]"),
            std::string::npos)
      << r.output;

  // --output: written once; then kept unless --overwrite; a directory is the wrong kind.
  const std::string out = d.file("out.safetensors");
  r = run({"--input", good, "--output", out});
  ASSERT_EQ(r.code, 0) << r.output;
  const auto before = snapshot(d.str());
  r = run({"--input", good, "--output", out, "--seed", "3"});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  EXPECT_TRUE(snapshot(d.str()) == before);
  r = run({"--input", good, "--output", out, "--overwrite"});
  EXPECT_EQ(r.code, 0) << r.output;
  r = run({"--input", good, "--output", d.str()});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("expected a file (new or empty), got an existing directory"),
            std::string::npos)
      << r.output;
  r = run({"--input", good, "--output", d.file("no/such/out.safetensors")});
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("existing directory"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace moekit::clitest
