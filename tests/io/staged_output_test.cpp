// io::StagedOutput and check_output_path: outputs appear complete or not at all, an existing
// one is replaced only when allowed, and an uncommitted one leaves nothing behind.
#include "moekit/io/staged_output.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/io_test_util.hpp"

namespace moekit::io {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::size_t count_entries(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(StagedOutput, DirectoryAppearsOnlyOnCommit) {
  TempDir d;
  const std::string out = d.file("out");
  {
    StagedOutput s(out, OutputKind::kDirectory, {});
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(fs::is_directory(s.staging_path()));
    EXPECT_EQ(fs::path(s.staging_path()).parent_path(), fs::path(d.str()));
    EXPECT_EQ(fs::path(s.staging_path()).filename().string().rfind(".out.moekit-partial-", 0), 0u);
    std::ofstream(s.staging_path() + "/a") << "new";
    s.commit();
  }
  EXPECT_EQ(read(out + "/a"), "new");
  EXPECT_EQ(count_entries(d.str()), 1u);  // no staging leftovers
  // "out2/" names the directory out2.
  {
    StagedOutput s(d.file("out2") + "/", OutputKind::kDirectory, {});
    EXPECT_EQ(s.path(), d.file("out2"));
    s.commit();
  }
  EXPECT_TRUE(fs::is_directory(d.file("out2")));
}

TEST(StagedOutput, UncommittedOutputLeavesNothing) {
  TempDir d;
  {
    StagedOutput s(d.file("out"), OutputKind::kDirectory, {});
    std::ofstream(s.staging_path() + "/partial") << "half";
  }
  {
    StagedOutput f(d.file("x.bin"), OutputKind::kFile, {});
    std::ofstream(f.staging_path()) << "half";
  }
  EXPECT_EQ(count_entries(d.str()), 0u);
}

TEST(StagedOutput, RemoveUncommittedOutputsClearsEveryStagingPath) {
  TempDir d;
  StagedOutput a(d.file("a"), OutputKind::kDirectory, {});
  StagedOutput b(d.file("b.txt"), OutputKind::kFile, {});
  std::ofstream(a.staging_path() + "/x") << "x";
  std::ofstream(b.staging_path()) << "y";
  remove_uncommitted_outputs();  // what the CLI's signal thread does
  EXPECT_EQ(count_entries(d.str()), 0u);
}

TEST(StagedOutput, ExistingOutputsAreReplacedOnlyWhenAllowed) {
  TempDir d;
  const std::string dir = d.file("dir"), file = d.file("file");
  fs::create_directory(dir);
  std::ofstream(dir + "/old") << "old";
  std::ofstream(file) << "old";
  // Refused without overwrite, naming the argument and what is there.
  expect_error([&] { StagedOutput(dir, OutputKind::kDirectory, {.argument = "OUT"}); },
               {"OUT '", "non-empty directory (1 entries: old)", "--overwrite"});
  expect_error([&] { StagedOutput(file, OutputKind::kFile, {.argument = "--output"}); },
               {"--output", "existing file of 3 bytes", "--overwrite"});
  // Replaced whole with it: the old contents are gone once the new one is in place.
  {
    StagedOutput s(dir, OutputKind::kDirectory, {.overwrite = true});
    std::ofstream(s.staging_path() + "/new") << "new";
    EXPECT_EQ(read(dir + "/old"), "old");  // untouched until commit
    s.commit();
  }
  EXPECT_FALSE(fs::exists(dir + "/old"));
  EXPECT_EQ(read(dir + "/new"), "new");
  {
    StagedOutput s(file, OutputKind::kFile, {.overwrite = true});
    std::ofstream(s.staging_path()) << "new";
    s.commit();
  }
  EXPECT_EQ(read(file), "new");
  EXPECT_EQ(count_entries(d.str()), 2u);
  // Empty ones need no overwrite.
  fs::create_directory(d.file("empty"));
  std::ofstream(d.file("empty.txt")).close();
  EXPECT_NO_THROW(check_output_path(d.file("empty"), OutputKind::kDirectory, {}));
  EXPECT_NO_THROW(check_output_path(d.file("empty.txt"), OutputKind::kFile, {}));
}

TEST(StagedOutput, WrongKindsAndUnsafeTargetsAreRefused) {
  TempDir d;
  fs::create_directories(d.file("tree/sub"));
  std::ofstream(d.file("file")) << "x";
  fs::create_symlink(d.file("tree"), d.file("link"));
  const OutputPolicy over{.overwrite = true, .argument = "out"};
  expect_error([&] { check_output_path(d.file("file"), OutputKind::kDirectory, over); },
               {"out '", "expected a directory (new or empty), got an existing file"});
  expect_error([&] { check_output_path(d.file("tree"), OutputKind::kFile, over); },
               {"expected a file (new or empty), got an existing directory"});
  expect_error([&] { check_output_path(d.file("tree"), OutputKind::kDirectory, over); },
               {"without subdirectories"});
  expect_error([&] { check_output_path(d.file("link"), OutputKind::kDirectory, over); },
               {"symbolic link"});
  expect_error([&] { check_output_path(d.file("no/such/x"), OutputKind::kFile, over); },
               {"existing directory", "no/such"});
  expect_error([&] { check_output_path("", OutputKind::kFile, over); }, {"out", "a path"});
  EXPECT_TRUE(fs::exists(d.file("tree/sub")));
}

}  // namespace
}  // namespace moekit::io
