// quantize_checkpoint's output (the library side of `moekit quantize`): written into a staging
// sibling and renamed into place, so a failure mid-way (here: the progress callback throwing
// after N layers, as a failing writer would) leaves no partial checkpoint, no empty directory
// and an unchanged input; an existing output is kept unless overwrite, then replaced whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/cli_fixtures.hpp"
#include "io/io_test_util.hpp"
#include "moekit/io/quantize_checkpoint.hpp"

namespace moekit::io {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

struct Fault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST(QuantizeCheckpointOutput, AFailureAfterEachLayerLeavesNothing) {
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  TempDir root;
  const std::string in = root.file("in"), out = root.file("out");
  fs::create_directory(in);
  clitest::write_tiny_checkpoint(in, seed, 3);
  const auto input = clitest::snapshot(in);
  for (int fail_after = 1; fail_after <= 3; ++fail_after) {
    SCOPED_TRACE("fail after layer " + std::to_string(fail_after));
    QuantizeCheckpointOptions o;
    o.progress = [&](int done, int, int) {
      if (done == fail_after) throw Fault("injected");
    };
    EXPECT_THROW(quantize_checkpoint(in, out, o), Fault);
    EXPECT_EQ(clitest::entries(root.str()), std::vector<std::string>{"in"});
    EXPECT_TRUE(clitest::snapshot(in) == input);
  }
}

TEST(QuantizeCheckpointOutput, ExistingOutputIsKeptUnlessOverwrite) {
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  TempDir root;
  const std::string in = root.file("in"), out = root.file("out");
  fs::create_directory(in);
  clitest::write_tiny_checkpoint(in, seed, 2);
  fs::create_directory(out);
  std::ofstream(out + "/config.json") << "the user's config";
  QuantizeCheckpointOptions o;
  o.format = CheckpointFormat::kMXFP4;
  expect_error([&] { quantize_checkpoint(in, out, o); },
               {"output_dir", "non-empty directory", "config.json"});
  EXPECT_EQ(clitest::snapshot(out).at("config.json"), "the user's config");
  // With overwrite the old one goes, wholly, and only after the new one is complete.
  o.overwrite = true;
  o.progress = [&](int, int, int) { throw Fault("injected"); };
  EXPECT_THROW(quantize_checkpoint(in, out, o), Fault);
  EXPECT_EQ(clitest::snapshot(out).at("config.json"), "the user's config");
  o.progress = nullptr;
  const QuantizeCheckpointResult r = quantize_checkpoint(in, out, o);
  EXPECT_EQ(r.layers, (std::vector<int>{0, 1}));
  EXPECT_NE(clitest::snapshot(out).at("config.json").find("quantization_config"),
            std::string::npos);
  EXPECT_EQ(clitest::entries(root.str()), (std::vector<std::string>{"in", "out"}));
  // The output may not hold the input (overwrite would delete it).
  expect_error([&] { quantize_checkpoint(in, root.str(), o); },
               {"output_dir", "does not contain the input directory"});
}

}  // namespace
}  // namespace moekit::io
