// Replay files: inputs read with their optional parts, outputs written, every shape mismatch named.
#include "moekit/io/replay.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "io/io_test_util.hpp"
#include "moekit/io/safetensors.hpp"

namespace moekit::io {
namespace {

using testing::expect_error;

Tensor filled(DType t, Shape s, int seed) {
  Tensor x(t, s);
  for (std::size_t i = 0; i < x.nbytes(); ++i)
    x.ptr<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 13 + static_cast<std::size_t>(seed));
  return x;
}

TEST(Replay, ReadsInputsWithRoutingAndWritesOutputs) {
  testing::TempDir dir;
  Tensor h = filled(DType::kBF16, Shape{3, 8}, 1);
  Tensor logits = filled(DType::kF32, Shape{3, 4}, 2);
  Tensor ids(DType::kI64, Shape{3, 2});
  for (int i = 0; i < 6; ++i) ids.ptr<std::int64_t>()[i] = i % 4;
  Tensor w(DType::kBF16, Shape{3, 2});
  for (int i = 0; i < 6; ++i) w.ptr<std::uint16_t>()[i] = 0x3F80;  // 1.0
  write_safetensors(dir.file("in.safetensors"),
                    {{"hidden_states", h.view()},
                     {"router_logits", logits.view()},
                     {"topk_ids", ids.view()},
                     {"topk_weights", w.view()}},
                    {TensorOrder::kAlignment, {{"source", "test"}}});
  ReplayInputs in = read_replay_inputs(dir.file("in.safetensors"), 8, 4);
  EXPECT_EQ(in.num_tokens(), 3);
  EXPECT_EQ(in.hidden_states.dtype(), DType::kBF16);
  EXPECT_EQ(std::memcmp(in.hidden_states.data(), h.data(), h.nbytes()), 0);
  EXPECT_EQ(std::memcmp(in.router_logits.data(), logits.data(), logits.nbytes()), 0);
  ASSERT_EQ(in.topk_ids.dtype(), DType::kI32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(in.topk_ids.ptr<std::int32_t>()[i], i % 4);
  ASSERT_EQ(in.topk_weights.dtype(), DType::kF32);
  EXPECT_EQ(in.topk_weights.ptr<float>()[5], 1.0f);
  EXPECT_EQ(in.metadata.at("source"), "test");

  Tensor out = filled(DType::kF32, Shape{3, 8}, 3);
  write_replay_outputs(dir.file("out.safetensors"), out.view(), in.topk_ids.view(),
                       in.topk_weights.view(), {{"layer", "7"}});
  auto f = SafetensorsFile::open(dir.file("out.safetensors"));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"output", "topk_ids", "topk_weights"}));
  EXPECT_EQ(std::memcmp(f.view("output").data, out.data(), out.nbytes()), 0);
  EXPECT_EQ(f.metadata().at("layer"), "7");
}

TEST(Replay, ZeroTokensAndHiddenStatesOnly) {
  testing::TempDir dir;
  Tensor h(DType::kF32, Shape{0, 8});
  write_safetensors(dir.file("in.safetensors"), {{"hidden_states", h.view()}});
  ReplayInputs in = read_replay_inputs(dir.file("in.safetensors"), 8, 4);
  EXPECT_EQ(in.num_tokens(), 0);
  EXPECT_FALSE(in.router_logits.defined());
  EXPECT_FALSE(in.topk_ids.defined());
  write_replay_outputs(dir.file("out.safetensors"), Tensor(DType::kF32, Shape{0, 8}).view());
  EXPECT_EQ(SafetensorsFile::open(dir.file("out.safetensors")).view("output").numel(), 0);
}

TEST(Replay, RejectsInconsistentFiles) {
  testing::TempDir dir;
  const std::string p = dir.file("in.safetensors");
  Tensor h = filled(DType::kF32, Shape{2, 8}, 1);
  write_safetensors(p, {{"x", h.view()}});
  expect_error([&] { read_replay_inputs(p); }, {p, "tensor 'hidden_states'", "missing"});
  write_safetensors(p, {{"hidden_states", h.view()}});
  expect_error([&] { read_replay_inputs(p, 16); },
               {"tensor 'hidden_states' shape", "[2, 16]", "got [2, 8]"});
  Tensor logits = filled(DType::kF32, Shape{3, 4}, 1);
  write_safetensors(p, {{"hidden_states", h.view()}, {"router_logits", logits.view()}});
  expect_error([&] { read_replay_inputs(p, 8, 4); }, {"tensor 'router_logits' shape", "[2, 4]"});
  Tensor ids = Tensor::zeros(DType::kI32, Shape{2, 2});
  write_safetensors(p, {{"hidden_states", h.view()}, {"topk_ids", ids.view()}});
  expect_error([&] { read_replay_inputs(p); }, {"tensor 'topk_weights'", "come together"});
  ids.ptr<std::int32_t>()[3] = 4;
  Tensor w = Tensor::zeros(DType::kF32, Shape{2, 2});
  write_safetensors(
      p, {{"hidden_states", h.view()}, {"topk_ids", ids.view()}, {"topk_weights", w.view()}});
  expect_error([&] { read_replay_inputs(p, 8, 4); },
               {"tensor 'topk_ids' element 3", "in [0, 4)", "got 4"});
  Tensor w3 = Tensor::zeros(DType::kF32, Shape{2, 3});
  ids.ptr<std::int32_t>()[3] = 0;
  write_safetensors(
      p, {{"hidden_states", h.view()}, {"topk_ids", ids.view()}, {"topk_weights", w3.view()}});
  expect_error([&] { read_replay_inputs(p, 8, 4); }, {"tensor 'topk_weights' shape", "[2, 2]"});
  Tensor u8 = Tensor::zeros(DType::kU8, Shape{2, 8});
  write_safetensors(p, {{"hidden_states", u8.view()}});
  expect_error([&] { read_replay_inputs(p); }, {"tensor 'hidden_states' dtype", "got u8"});
  expect_error([&] { write_replay_outputs(dir.file("o"), u8.view()); }, {"output dtype", "got u8"});
  expect_error(
      [&] {
        write_replay_outputs(dir.file("o"), h.view(),
                             Tensor::zeros(DType::kI32, Shape{3, 2}).view());
      },
      {"topk_ids shape", "[2, k]"});
}

}  // namespace
}  // namespace moekit::io
