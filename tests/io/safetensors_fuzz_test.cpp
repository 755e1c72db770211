// A deterministic mutation fuzzer for the safetensors header parser, run for a fixed budget in the
// normal suite. The only acceptable outcomes are a parsed file or moekit::Error: any other
// exception fails the test, and a crash, hang or sanitizer report kills it. Seeds come from
// tests/io/corpus/ (regenerate with tests/io/make_corpus.py) plus random JSON-ish headers.
//
// CI runs it under ASan + UBSan with 200k cases (scripts/test_sanitizers.sh sets
// MOEKIT_FUZZ_CASES=200000 MOEKIT_FUZZ_SECONDS=60); by hand, in that script's build directory:
//   MOEKIT_FUZZ_CASES=200000 MOEKIT_FUZZ_SECONDS=60 build-sanitize/tests/moekit_tests
//         --gtest_filter='SafetensorsFuzz.*'
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/io_test_util.hpp"
#include "moekit/io/safetensors.hpp"

namespace moekit::io {
namespace {

using Bytes = std::vector<std::uint8_t>;

std::vector<Bytes> load_corpus() {
  std::vector<Bytes> out;
  const std::filesystem::path dir = std::filesystem::path(MOEKIT_SOURCE_DIR) / "tests/io/corpus";
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // deterministic order for a given seed
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    out.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  return out;
}

const char* const kTokens[] = {"{",
                               "}",
                               "[",
                               "]",
                               ",",
                               ":",
                               "\"",
                               "\"dtype\"",
                               "\"shape\"",
                               "\"data_offsets\"",
                               "\"__metadata__\"",
                               "\"F32\"",
                               "\"BF16\"",
                               "\"F4\"",
                               "\"U8\"",
                               "\"F8_E4M3\"",
                               "\"I64\"",
                               "\"BOOL\"",
                               "\"x\"",
                               "0",
                               "1",
                               "-1",
                               "4",
                               "8",
                               "1.5",
                               "1e3",
                               "4294967296",
                               "9223372036854775807",
                               "18446744073709551615",
                               "18446744073709551616",
                               "99999999999999999999999999",
                               "null",
                               "true",
                               "\"\\u0000\"",
                               "\"\\ud800\"",
                               " "};

std::uint64_t pick(std::mt19937_64& rng, std::uint64_t n) { return n ? rng() % n : 0; }

// A random header built from tensor-entry-shaped pieces, sometimes broken.
std::string random_header(std::mt19937_64& rng) {
  std::string h = "{";
  const int entries = static_cast<int>(pick(rng, 5));
  std::uint64_t off = 0;
  for (int i = 0; i < entries; ++i) {
    if (i) h += ",";
    if (pick(rng, 8) == 0) {
      h += "\"__metadata__\":{\"a\":\"b\"}";
      continue;
    }
    h += "\"t";
    h += std::to_string(pick(rng, 3));
    h += "\":{";
    const char* dtypes[] = {"F32", "BF16", "U8", "F4", "I64", "F8_E4M3", "Q"};
    h += "\"dtype\":\"" + std::string(dtypes[pick(rng, 7)]) + "\",\"shape\":[";
    const int rank = static_cast<int>(pick(rng, 4));
    std::uint64_t numel = 1;
    for (int r = 0; r < rank; ++r) {
      std::uint64_t d = pick(rng, 4);
      numel *= d;
      if (r) h += ",";
      h += std::to_string(d);
    }
    std::uint64_t len = pick(rng, 4) == 0 ? pick(rng, 16) : numel * (1 + pick(rng, 4));
    h += "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + len) + "]}";
    off += pick(rng, 6) == 0 ? pick(rng, 8) : len;
  }
  for (int i = static_cast<int>(pick(rng, 3)); i > 0; --i)  // sprinkle tokens
    h.insert(pick(rng, h.size() + 1), kTokens[pick(rng, std::size(kTokens))]);
  return h + "}";
}

Bytes with_header(const std::string& h, std::size_t data) {
  return testing::raw_safetensors(h, data);
}

Bytes mutate(const Bytes& seed, std::mt19937_64& rng) {
  Bytes b = seed;
  const int rounds = 1 + static_cast<int>(pick(rng, 4));
  for (int r = 0; r < rounds; ++r) {
    switch (pick(rng, 8)) {
      case 0:  // bit flips
        if (!b.empty()) b[pick(rng, b.size())] ^= static_cast<std::uint8_t>(1u << pick(rng, 8));
        break;
      case 1: {  // interesting byte
        const std::uint8_t v[] = {'{', '}', '"', ':',  ',',  '[',  ']', '-',
                                  '0', '9', 0,   0xff, 0x80, '\\', ' '};
        if (!b.empty()) b[pick(rng, b.size())] = v[pick(rng, std::size(v))];
        break;
      }
      case 2:  // truncation
        b.resize(pick(rng, b.size() + 1));
        break;
      case 3:  // append
        for (int i = static_cast<int>(pick(rng, 16)); i > 0; --i)
          b.push_back(static_cast<std::uint8_t>(rng()));
        break;
      case 4: {  // the header length field
        if (b.size() < 8) break;
        std::uint64_t n = 0;
        std::memcpy(&n, b.data(), 8);
        const std::uint64_t choices[] = {
            0, 1, 2, n + 1, n - 1, n + 8, b.size() - 8, b.size(), ~0ull, 1ull << 40, 100'000'001};
        n = choices[pick(rng, std::size(choices))];
        std::memcpy(b.data(), &n, 8);
        break;
      }
      case 5: {  // replace a digit run in the header with an interesting number
        if (b.size() < 9) break;
        std::size_t start = 8 + pick(rng, b.size() - 8);
        while (start < b.size() && !(b[start] >= '0' && b[start] <= '9')) ++start;
        std::size_t end = start;
        while (end < b.size() && b[end] >= '0' && b[end] <= '9') ++end;
        if (start == end) break;
        const char* nums[] = {
            "0",   "-1",  "4294967296",         "18446744073709551615", "18446744073709551616",
            "1.5", "1e5", "9223372036854775808"};
        std::string s = nums[pick(rng, std::size(nums))];
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(start),
                b.begin() + static_cast<std::ptrdiff_t>(end));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(start), s.begin(), s.end());
        break;
      }
      case 6: {  // insert a JSON token (header length left alone: often now wrong)
        std::string t = kTokens[pick(rng, std::size(kTokens))];
        std::size_t at = b.size() < 8 ? b.size() : 8 + pick(rng, b.size() - 7);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
        break;
      }
      default: {  // splice a random header onto the seed's data
        std::string h = random_header(rng);
        b = with_header(h, pick(rng, 64));
        break;
      }
    }
  }
  return b;
}

// Parses and touches everything a caller would; returns true when the file was accepted.
bool exercise(Bytes bytes) {
  const std::size_t size = bytes.size();
  try {
    SafetensorsFile f = SafetensorsFile::from_bytes(std::move(bytes), "fuzz");
    for (const auto& t : f.tensors()) {
      EXPECT_LE(t.begin, t.end);
      EXPECT_LE(8 + f.header_bytes() + t.end, size);
      auto raw = f.bytes(t.name);
      volatile std::uint8_t sink = 0;
      for (std::uint8_t c : raw) sink = static_cast<std::uint8_t>(sink + c);
      try {
        TensorView v = f.view(t.name);
        EXPECT_EQ(v.nbytes(), t.nbytes());
        Tensor copy = f.to_tensor(t.name);
      } catch (const Error&) {  // dtypes without a moekit type, odd F4 dims
      }
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(SafetensorsFuzz, HeaderParserOnlyThrowsMoekitError) {
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  const std::vector<Bytes> corpus = load_corpus();
  ASSERT_GE(corpus.size(), 8u) << "seed corpus missing: tests/io/corpus/";
  const char* env_cases = std::getenv("MOEKIT_FUZZ_CASES");
  const char* env_seconds = std::getenv("MOEKIT_FUZZ_SECONDS");
  const long max_cases = env_cases ? std::atol(env_cases) : 20000;
  const double max_seconds = env_seconds ? std::atof(env_seconds) : 2.0;

  // Every seed as is: the valid ones must parse, the bad ones must not.
  for (std::size_t i = 0; i < corpus.size(); ++i) exercise(corpus[i]);

  const auto start = std::chrono::steady_clock::now();
  long cases = 0, accepted = 0;
  for (; cases < max_cases; ++cases) {
    if ((cases & 255) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            max_seconds)
      break;
    Bytes input = pick(rng, 10) == 0 ? with_header(random_header(rng), pick(rng, 64))
                                     : mutate(corpus[pick(rng, corpus.size())], rng);
    try {
      accepted += exercise(std::move(input));
    } catch (const std::exception& e) {
      FAIL() << "case " << cases << ": non-moekit exception: " << e.what();
    }
  }
  RecordProperty("cases", std::to_string(cases));
  RecordProperty("accepted", std::to_string(accepted));
  std::printf("[ fuzz     ] %ld cases, %ld accepted (seed %llu)\n", cases, accepted,
              static_cast<unsigned long long>(seed));
  EXPECT_GT(cases, 1000);  // the budget really ran
  EXPECT_GT(accepted, 0);  // mutations do reach the success path
}

TEST(SafetensorsFuzz, CorpusSeedsParseAsLabelled) {
  const std::filesystem::path dir = std::filesystem::path(MOEKIT_SOURCE_DIR) / "tests/io/corpus";
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::ifstream in(e.path(), std::ios::binary);
    Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(exercise(std::move(b)), name.rfind("valid_", 0) == 0) << name;
    ++n;
  }
  EXPECT_GE(n, 8);
}

}  // namespace
}  // namespace moekit::io
