// `moekit run --checkpoint DIR --layer N` and layer replay (--input / --output): a tiny Qwen3-MoE
// BF16 checkpoint written by moekit's own exporter, run through run_job, and a replay file whose
// output must equal the reference layer on the same routing bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "io/io_test_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/moe_export.hpp"
#include "moekit/io/safetensors.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "run/run_job.hpp"

namespace moekit {
namespace {

struct TinyCheckpoint {
  io::testing::TempDir dir;
  MoeLayerConfig config;
  MoeWeights weights;
  RouterWeights router;
};

// E=4, k=2, H=64, I=128, RenormalizeNaive (Qwen3-MoE with norm_topk_prob), layer 1 of 2.
void write_tiny_checkpoint(TinyCheckpoint& c, std::uint64_t seed) {
  c.config.name = "qwen3_moe";
  c.config.num_experts = 4;
  c.config.hidden_size = 64;
  c.config.intermediate_size = 128;
  c.config.routing.top_k = 2;
  c.config.routing.method = RoutingMethod::kRenormalizeNaive;
  c.weights = random_moe_weights(c.config, QuantConfig{QuantScheme::kBF16}, seed);
  c.router = random_router_weights(c.config, seed + 1);
  auto tensors = io::export_moe_layer(c.weights, c.router, io::CheckpointFormat::kBF16, 1,
                                      io::ExpertNaming::kQwen);
  io::write_safetensors(c.dir.file("model.safetensors"), io::named_views(tensors));
  std::ofstream(c.dir.file("config.json"))
      << R"({"model_type":"qwen3_moe","num_hidden_layers":2,"hidden_size":64,"num_experts":4,)"
      << R"("num_experts_per_tok":2,"moe_intermediate_size":128,"norm_topk_prob":true})";
}

TEST(RunCheckpoint, RunsALoadedLayerAndChecksIt) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  TinyCheckpoint c;
  write_tiny_checkpoint(c, seed);
  RunJobOptions o;
  o.checkpoint = c.dir.str();
  o.layer = 1;
  o.tokens = 9;
  const RunJobReport r = run_job(o);
  EXPECT_TRUE(r.pass) << r.text();
  EXPECT_EQ(r.num_experts, 4);
  EXPECT_EQ(r.hidden_size, 64);
  EXPECT_EQ(r.quant, "bf16");
  EXPECT_EQ(r.tokens, 9);
}

TEST(RunCheckpoint, LayerWithoutCheckpointIsAnError) {
  RunJobOptions o;
  o.layer = 0;
  try {
    run_job(o);
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--checkpoint"), std::string::npos) << e.what();
  }
}

TEST(RunReplay, OutputFileEqualsTheReferenceOnTheGivenRouting) {
  const std::uint64_t seed = io::testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  TinyCheckpoint c;
  write_tiny_checkpoint(c, seed);
  const std::int64_t m = 5;
  Tensor hidden = random_hidden_states(m, 64, DType::kBF16, seed + 7);
  // Routing an engine chose (all tokens share expert 3: an adversarial, uneven routing).
  Tensor ids(DType::kI32, Shape{m, 2}), w(DType::kF32, Shape{m, 2});
  for (std::int64_t t = 0; t < m; ++t) {
    ids.ptr<std::int32_t>()[2 * t] = 3;
    ids.ptr<std::int32_t>()[2 * t + 1] = static_cast<std::int32_t>(t % 3);
    w.ptr<float>()[2 * t] = 0.75f;
    w.ptr<float>()[2 * t + 1] = 0.25f;
  }
  const std::string in_path = c.dir.file("in.safetensors");
  const std::string out_path = c.dir.file("out.safetensors");
  io::write_safetensors(in_path, {{"hidden_states", hidden.view()},
                                  {"topk_ids", ids.view()},
                                  {"topk_weights", w.view()}});
  RunJobOptions o;
  o.checkpoint = c.dir.str();
  o.layer = 1;
  o.input = in_path;
  o.output = out_path;
  const RunJobReport r = run_job(o);
  EXPECT_TRUE(r.pass) << r.text();
  EXPECT_EQ(r.tokens, m);

  Tensor expected(DType::kF32, Shape{m, 64});
  moe_reference_routed(hidden, ids, w, c.config, c.weights, expected);
  const io::SafetensorsFile f = io::SafetensorsFile::open(out_path);
  const Tensor out = f.to_tensor("output");
  ASSERT_EQ(out.shape(), expected.shape());
  EXPECT_EQ(std::memcmp(out.data(), expected.data(), expected.nbytes()), 0);
  const Tensor out_ids = f.to_tensor("topk_ids");
  EXPECT_EQ(std::memcmp(out_ids.data(), ids.data(), ids.nbytes()), 0);
}

}  // namespace
}  // namespace moekit
