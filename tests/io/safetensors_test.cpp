// Safetensors reader/writer: malformed headers (each with its specific message), round trips of
// every dtype, the exact byte layout the writer produces.
#include "moekit/io/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "io/io_test_util.hpp"

namespace moekit::io {
namespace {

using testing::expect_error;
using testing::raw_safetensors;

SafetensorsFile parse(const std::string& header, std::size_t data_bytes) {
  return SafetensorsFile::from_bytes(raw_safetensors(header, data_bytes), "bad.safetensors");
}

// Every message names the file; tensor-level ones name the tensor.
void expect_bad(const std::string& header, std::size_t data_bytes,
                std::initializer_list<std::string> needles) {
  SCOPED_TRACE(header);
  std::string msg = expect_error([&] { parse(header, data_bytes); }, needles);
  EXPECT_NE(msg.find("bad.safetensors"), std::string::npos) << msg;
}

TEST(SafetensorsReader, ParsesAValidFile) {
  auto f = parse(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}})",
      12);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));  // data order
  TensorView a = f.view("a");
  EXPECT_EQ(a.dtype, DType::kBF16);
  EXPECT_EQ(a.shape, (Shape{1, 2}));
  TensorView b = f.view("b");
  EXPECT_EQ(b.dtype, DType::kF32);
  EXPECT_EQ(static_cast<const std::uint8_t*>(b.data) - static_cast<const std::uint8_t*>(a.data), 4);
  EXPECT_EQ(f.bytes("b")[0], static_cast<std::uint8_t>(4 * 7 + 1));
  EXPECT_TRUE(f.contains("a"));
  EXPECT_FALSE(f.contains("c"));
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST(SafetensorsReader, EmptyHeaderAndEmptyTensors) {
  auto f = parse("{}", 0);
  EXPECT_TRUE(f.tensors().empty());
  auto g = parse(R"({"z":{"dtype":"F32","shape":[0,3],"data_offsets":[0,0]},)"
                 R"("y":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                 R"("x":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}})",
                 8);
  EXPECT_EQ(g.view("z").numel(), 0);
  EXPECT_EQ(g.view("y").shape.rank(), 0);
  EXPECT_EQ(g.view("x").numel(), 0);
}

TEST(SafetensorsReader, RejectsShortFile) {
  expect_error(
      [] {
        SafetensorsFile::from_bytes({1, 2, 3}, "bad.safetensors");
      },
      {"bad.safetensors", "file size", ">= 8 bytes", "got 3 bytes"});
  expect_error([] { SafetensorsFile::from_bytes({}, "bad.safetensors"); }, {"file size", "got 0"});
}

TEST(SafetensorsReader, RejectsHeaderLengthBeyondFile) {
  expect_error(
      [] { SafetensorsFile::from_bytes(raw_safetensors("{}", 10, 1000), "bad.safetensors"); },
      {"header length", "<= 12 (file size - 8)", "got 1000"});
}

TEST(SafetensorsReader, RejectsAbsurdHeaderLength) {
  expect_error(
      [] { SafetensorsFile::from_bytes(raw_safetensors("{}", 0, 200'000'000), "bad.safetensors"); },
      {"header length", "<= 100000000", "got 200000000"});
  expect_error(
      [] { SafetensorsFile::from_bytes(raw_safetensors("{}", 0, ~0ull - 1), "bad.safetensors"); },
      {"header length"});
}

TEST(SafetensorsReader, RejectsTinyHeader) {
  expect_error([] { SafetensorsFile::from_bytes(raw_safetensors("{", 0), "bad.safetensors"); },
               {"header length", ">= 2"});
}

TEST(SafetensorsReader, RejectsInvalidJson) {
  expect_bad("{\"a\":", 0, {"header", "invalid JSON"});
  expect_bad("{\"a\":1} trailing", 0, {"invalid JSON"});
  expect_bad("{\"\xff\":1}", 0, {"invalid JSON"});  // not UTF-8
}

TEST(SafetensorsReader, RejectsNonObjectHeader) {
  expect_bad("[1, 2]", 0, {"header", "a JSON object starting with '{'"});
  expect_bad(" {}", 0, {"header", "starting with '{'"});
}

TEST(SafetensorsReader, RejectsEntryThatIsNotAnObject) {
  expect_bad(R"({"a":[1,2]})", 0, {"tensor 'a' entry", "expected an object"});
}

TEST(SafetensorsReader, RejectsMissingFields) {
  expect_bad(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4,
             {"tensor 'a' dtype", "expected present", "got missing"});
  expect_bad(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"tensor 'a' shape", "missing"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1]}})", 4, {"tensor 'a' data_offsets", "missing"});
}

TEST(SafetensorsReader, RejectsIllTypedFields) {
  expect_bad(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4,
             {"tensor 'a' dtype", "a string", "got 7"});
  expect_bad(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4,
             {"tensor 'a' shape", "an array"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4,
             {"tensor 'a' shape[0]", "an integer", "1.5"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4,
             {"tensor 'a' data_offsets", "[begin, end]"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4,
             {"tensor 'a' data_offsets", "non-negative"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":"0,4"}})", 4,
             {"tensor 'a' data_offsets"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
             {"tensor 'a' entry", "only dtype, shape and data_offsets", "key 'x'"});
}

TEST(SafetensorsReader, RejectsUnknownDtype) {
  expect_bad(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16,
             {"tensor 'w' dtype", "one of BOOL|", "'F128'"});
}

TEST(SafetensorsReader, RejectsReversedOffsets) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4,
             {"tensor 'a' data_offsets", "begin <= end", "[4,0]"});
}

TEST(SafetensorsReader, RejectsOutOfRangeOffsets) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[25],"data_offsets":[0,100]}})", 8,
             {"tensor 'a' data_offsets", "end <= 8", "[0,100]"});
  expect_bad(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", 8,
             {"tensor 'a' data_offsets"});
}

TEST(SafetensorsReader, RejectsOverlap) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             12, {"tensor 'b' data_offsets", "no overlap with 'a'"});
  // The same range twice.
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
             4, {"data_offsets", "no overlap with"});
}

TEST(SafetensorsReader, RejectsHoleAndUncoveredTail) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
             12, {"tensor 'b' data_offsets", "to start at 4", "no hole after 'a'"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
             {"tensor 'a' data_offsets", "to start at 0"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8,
             {"data buffer", "fully covered by tensors (8 bytes)", "got 4 bytes covered"});
}

TEST(SafetensorsReader, RejectsByteCountMismatch) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
             {"tensor 'a' byte count", "expected 12 (numel x F32 size)", "got 8"});
  expect_bad(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
             {"tensor 'a' shape", "whole number of bytes"});
}

TEST(SafetensorsReader, RejectsNegativeAndOverflowingDims) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]}})", 0,
             {"tensor 'a' shape[1]", ">= 0", "got -1"});
  expect_bad(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", 0,
             {"tensor 'a' shape", "fits in 64 bits"});
  expect_bad(R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0,
             {"tensor 'a' shape[0]", "<= 2^63-1"});
  expect_bad(R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})", 1,
             {"tensor 'a' shape", "rank <= 6", "got 7"});
}

TEST(SafetensorsReader, RejectsDuplicateNames) {
  expect_bad(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             8, {"duplicate key 'a'"});
  expect_bad(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4,
             {"duplicate key 'dtype'"});
  expect_bad(R"({"__metadata__":{"k":"1","k":"2"}})", 0, {"duplicate key 'k'"});
}

TEST(SafetensorsReader, RejectsBadMetadata) {
  expect_bad(R"({"__metadata__":{"k":1}})", 0, {"__metadata__ 'k'", "a string"});
  expect_bad(R"({"__metadata__":[1]})", 0, {"__metadata__", "an object of strings"});
}

TEST(SafetensorsReader, ViewNeedsAMoekitDtype) {
  auto f = parse(R"({"a":{"dtype":"I8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"F4","shape":[3,2],"data_offsets":[4,7]},)"
                 R"("c":{"dtype":"F4","shape":[2,3],"data_offsets":[7,10]}})",
                 10);
  EXPECT_EQ(f.bytes("a").size(), 4u);  // raw bytes stay readable
  expect_error([&] { f.view("a"); }, {"bad.safetensors", "tensor 'a' dtype", "got I8"});
  TensorView b = f.view("b");
  EXPECT_EQ(b.dtype, DType::kE2M1x2);
  EXPECT_EQ(b.shape, (Shape{3, 1}));
  expect_error([&] { f.view("c"); }, {"tensor 'c' shape", "even last dim"});
  expect_error([&] { f.info("nope"); }, {"bad.safetensors", "tensor 'nope'", "not found"});
}

TEST(SafetensorsReader, OpenReportsMissingFile) {
  expect_error([] { SafetensorsFile::open("/nonexistent/x.safetensors"); },
               {"/nonexistent/x.safetensors", "cannot open"});
}

TEST(SafetensorsWriter, ExactBytes) {
  // One f32 tensor: the header is 54 bytes, padded with 2 spaces to 56 so data starts at 64.
  float v = 1.5f;
  auto bytes = serialize_safetensors({{"a", TensorView(&v, DType::kF32, Shape{1})}});
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  ASSERT_EQ(header.size(), 54u);
  std::vector<std::uint8_t> expected = raw_safetensors(header + "  ", 0);
  expected.resize(expected.size() + 4);
  std::memcpy(expected.data() + 64, &v, 4);
  EXPECT_EQ(bytes, expected);
}

TEST(SafetensorsWriter, RoundTripsEveryDtypeBitExactly) {
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  testing::TempDir dir;
  const DType dtypes[] = {DType::kF32,    DType::kF16, DType::kBF16, DType::kE4M3, DType::kE8M0,
                          DType::kE2M1x2, DType::kU8,  DType::kI32,  DType::kI64};
  std::vector<Tensor> owned;
  std::vector<NamedTensor> named;
  for (DType t : dtypes) {
    for (Shape s : {Shape{3, 5}, Shape{1}, Shape{}, Shape{0, 4}, Shape{2, 1, 3, 1, 2, 1}}) {
      Tensor x(t, s);
      auto* p = x.ptr<std::uint8_t>();
      for (std::size_t i = 0; i < x.nbytes(); ++i) p[i] = static_cast<std::uint8_t>(rng());
      named.push_back({std::string(dtype_name(t)) + "/" + s.str(), x.view()});
      owned.push_back(std::move(x));
    }
  }
  for (TensorOrder order : {TensorOrder::kAlignment, TensorOrder::kName, TensorOrder::kInsertion}) {
    SafetensorsWriteOptions opts;
    opts.order = order;
    opts.metadata = {{"format", "pt"}, {"moekit", "test \"quoted\" \u00e9"}};
    const std::string path = dir.file("rt.safetensors");
    write_safetensors(path, named, opts);
    auto f = SafetensorsFile::open(path);
    EXPECT_EQ((8 + f.header_bytes()) % 8, 0u);
    EXPECT_EQ(f.metadata(), opts.metadata);
    ASSERT_EQ(f.tensors().size(), named.size());
    for (const auto& n : named) {
      SCOPED_TRACE(n.name);
      TensorView v = f.view(n.name);
      EXPECT_EQ(v.dtype, n.view.dtype == DType::kE2M1x2 ? DType::kU8 : n.view.dtype);
      EXPECT_EQ(v.shape, n.view.shape);
      ASSERT_EQ(v.nbytes(), n.view.nbytes());
      if (v.nbytes()) {
        EXPECT_EQ(std::memcmp(v.data, n.view.data, v.nbytes()), 0);
      }
      if (order == TensorOrder::kAlignment) {
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data) % dtype_size(v.dtype), 0u);
      }
      Tensor copy = f.to_tensor(n.name);
      if (v.nbytes()) {
        EXPECT_EQ(std::memcmp(copy.data(), n.view.data, v.nbytes()), 0);
      }
    }
    std::vector<std::string> names = f.names();
    if (order == TensorOrder::kName) {
      EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    }
    if (order == TensorOrder::kInsertion) {
      std::uint64_t off = 0;
      for (const auto& n : named) {
        EXPECT_EQ(f.info(n.name).begin, off) << n.name;
        off += n.view.nbytes();
      }
    }
    // The in-memory image is the same file.
    std::ifstream in(path, std::ios::binary);
    std::vector<std::uint8_t> on_disk((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(on_disk, serialize_safetensors(named, opts));
  }
}

TEST(SafetensorsWriter, DtypeOverride) {
  std::uint8_t s[4] = {127, 128, 0, 254};
  auto f = SafetensorsFile::from_bytes(
      serialize_safetensors({{"scales", TensorView(s, DType::kE8M0, Shape{4}), "U8"}}));
  EXPECT_EQ(f.info("scales").dtype, "U8");
  EXPECT_EQ(f.view("scales").dtype, DType::kU8);
  expect_error(
      [&] {
        serialize_safetensors({{"scales", TensorView(s, DType::kE8M0, Shape{4}), "BF16"}});
      },
      {"tensor 'scales' dtype", "element size (1 bytes)", "BF16"});
  expect_error(
      [&] {
        serialize_safetensors({{"scales", TensorView(s, DType::kE8M0, Shape{4}), "X"}});
      },
      {"tensor 'scales' dtype", "one of BOOL"});
}

TEST(SafetensorsWriter, RejectsBadInput) {
  float v[4] = {};
  TensorView ok(v, DType::kF32, Shape{4});
  expect_error(
      [&] {
        serialize_safetensors({{"a", ok}, {"a", ok}});
      },
      {"write_safetensors", "tensor 'a'", "unique name"});
  expect_error([&] { serialize_safetensors({{"", ok}}); }, {"tensor name", "non-empty"});
  expect_error(
      [&] {
        serialize_safetensors({{"__metadata__", ok}});
      },
      {"tensor name", "not __metadata__"});
  TensorView strided(v, DType::kF32, Shape{2}, Shape{2}, Device::host());
  expect_error([&] { serialize_safetensors({{"s", strided}}); }, {"tensor 's'", "contiguous"});
  TensorView dev(v, DType::kF32, Shape{4}, Device::cuda(0));
  expect_error([&] { serialize_safetensors({{"d", dev}}); }, {"tensor 'd' device", "host"});
  expect_error([&] { serialize_safetensors({{"bad\xff", ok}}); }, {"valid UTF-8"});
  expect_error(
      [&] {
        write_safetensors("/nonexistent/dir/x.safetensors", {{"a", ok}});
      },
      {"write_safetensors", "existing directory", "/nonexistent/dir/x.safetensors"});
}

}  // namespace
}  // namespace moekit::io
