// Helpers for the io/ tests: logged seeds, temporary directories, raw safetensors images and
// error-message expectations.
#pragma once

#include "test_seed.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"

namespace moekit::io::testing {

// Fresh per run, overridable by env MOEKIT_TEST_SEED; log it with MOEKIT_IO_LOG_SEED.
inline std::uint64_t test_seed() {
  return ::moekit::process_test_seed();
}

#define MOEKIT_IO_LOG_SEED(seed)                                                     \
  SCOPED_TRACE("seed " + std::to_string(seed) + " (MOEKIT_TEST_SEED to reproduce)"); \
  ::testing::Test::RecordProperty("seed", std::to_string(seed))

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("moekit_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A file image: 8-byte little-endian header length, the header text, then `data_bytes` bytes.
inline std::vector<std::uint8_t> raw_safetensors(const std::string& header, std::size_t data_bytes,
                                                 std::uint64_t header_len_override = ~0ull) {
  std::uint64_t n = header_len_override == ~0ull ? header.size() : header_len_override;
  std::vector<std::uint8_t> out(8 + header.size() + data_bytes);
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(n >> (8 * i));
  for (std::size_t i = 0; i < header.size(); ++i) out[8 + i] = static_cast<std::uint8_t>(header[i]);
  for (std::size_t i = 0; i < data_bytes; ++i)
    out[8 + header.size() + i] = static_cast<std::uint8_t>(i * 7 + 1);
  return out;
}

// Expects `fn` to throw moekit::Error whose message contains every needle; returns the message.
template <typename Fn>
std::string expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const moekit::Error& e) {
    const std::string msg = e.what();
    for (const auto& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected moekit::Error";
  return {};
}

}  // namespace moekit::io::testing
