// The oracle: hardware gates, quant/format/routing reasons, priority, overrides (flag and env),
// the registry of compiled-in backends, and kernels built for a selection.
#include "moekit/oracle/oracle.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/framework_test_util.hpp"
#include "framework/seed_util.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"

namespace moekit {
namespace {

using testing::expect_error;

const Candidate* find(const BackendSelection& s, Backend b) {
  for (const Candidate& c : s.candidates)
    if (c.backend == b) return &c;
  return nullptr;
}

// Restores MOEKIT_BACKEND after a test.
struct EnvGuard {
  std::string saved;
  bool had;
  EnvGuard() {
    const char* v = std::getenv(kBackendEnvVar);
    had = v != nullptr;
    if (v) saved = v;
    unsetenv(kBackendEnvVar);
  }
  ~EnvGuard() {
    if (had)
      setenv(kBackendEnvVar, saved.c_str(), 1);
    else
      unsetenv(kBackendEnvVar);
  }
};

TEST(Oracle, NamesRoundTrip) {
  for (Backend b : all_moe_backends()) {
    EXPECT_EQ(parse_moe_backend(moe_backend_name(b)), b);
    EXPECT_EQ(backend_traits(b).backend, b);
  }
  EXPECT_EQ(parse_moe_backend("REFERENCE"), Backend::kCpuReference);
  expect_error([] { parse_moe_backend("fastest"); }, {"backend", "fastest", "cuda_w4a16_grouped"});
}

TEST(Oracle, Fp4ActivationsAreGatedOnSm90) {
  EnvGuard env;
  const MoeProblem p = cli_problem("tiny", "nvfp4", 64, "nvfp4");  // W4A4
  const BackendSelection s = select_backend(p, DeviceCapabilities::parse("sm90"));
  for (Backend b : {Backend::kCudaW4A16Grouped, Backend::kCudaW4A8Grouped}) {
    const Candidate* c = find(s, b);
    ASSERT_NE(c, nullptr) << moe_backend_name(b);
    EXPECT_FALSE(c->accepted);
    EXPECT_NE(c->reason.find("need FP4 tensor cores (SM100+)"), std::string::npos) << c->reason;
    EXPECT_NE(c->reason.find("W4A16"), std::string::npos) << c->reason;
  }
  EXPECT_EQ(s.backend, Backend::kCpuReference);  // W4A4 is emulated on the CPU only
  EXPECT_NE(s.table().find("-> cpu_reference"), std::string::npos) << s.table();
  // The SM90 kernels are not offered on another architecture.
  const BackendSelection b = select_backend(p, DeviceCapabilities::parse("sm_100a"));
  EXPECT_NE(find(b, Backend::kCudaW4A16Grouped)->reason.find("sm_90a"), std::string::npos);
}

TEST(Oracle, ReasonsForQuantFormatRoutingShapesParallel) {
  EnvGuard env;
  const DeviceCapabilities sm90 = DeviceCapabilities::parse("sm90");
  MoeProblem p = cli_problem("tiny", "mxfp4", 4, "w4a16");
  auto reason = [&](Backend b, const MoeProblem& q,
                    ActivationFormat f = ActivationFormat::kStandard) {
    return backend_supports(b, q, sm90, f).reason;
  };
  EXPECT_NE(reason(Backend::kCudaW4A8Grouped, p).find("W4A8"), std::string::npos);
  EXPECT_NE(reason(Backend::kCudaW4A16Grouped, p, ActivationFormat::kBatched)
                .find("standard activation format"),
            std::string::npos);
  EXPECT_NE(backend_supports(Backend::kCudaW4A16Grouped, p, DeviceCapabilities::cpu(),
                             ActivationFormat::kStandard)
                .reason.find("needs a CUDA device"),
            std::string::npos);
  MoeProblem relu = p;
  relu.layer.activation.kind = Activation::kRelu2;
  EXPECT_NE(reason(Backend::kCudaW4A16Grouped, relu).find("activation relu2"), std::string::npos);
  MoeProblem llama = cli_problem("tiny", "mxfp4", 4, "w4a16");
  llama.layer.routing.method = RoutingMethod::kLlama4;
  llama.layer.routing.top_k = 2;
  EXPECT_NE(reason(Backend::kCudaW4A16Grouped, llama).find("routing llama4"), std::string::npos);
  MoeProblem odd = cli_problem("tiny", "mxfp4", 4, "w4a16", 1, false, 208, 0);  // 208 % 32 != 0
  EXPECT_NE(reason(Backend::kCudaW4A16Grouped, odd).find("multiples of 32"), std::string::npos);
  MoeProblem ep = cli_problem("tiny", "bf16", 4, "w4a16", 2);
  EXPECT_NE(reason(Backend::kCpuMonolithic, ep).find("monolithic kernels run one rank"),
            std::string::npos);
  EXPECT_TRUE(backend_supports(Backend::kCpuReference, ep, sm90, ActivationFormat::kStandard).ok);
}

TEST(Oracle, FormatFollowsTheParallelConfig) {
  EnvGuard env;
  const MoeProblem p = cli_problem("tiny", "bf16", 16, "w4a16", 2, /*low_latency=*/true);
  const BackendSelection s = select_backend(p, DeviceCapabilities::cpu());
  EXPECT_EQ(s.format, ActivationFormat::kBatched);
  EXPECT_EQ(s.backend, Backend::kCpuBatched);
  EXPECT_FALSE(find(s, Backend::kCpuReference)->accepted);
}

TEST(Oracle, OverridesAreValidatedNeverSilent) {
  EnvGuard env;
  const MoeProblem p = cli_problem("tiny", "nvfp4", 8, "w4a16");
  const DeviceCapabilities sm90 = DeviceCapabilities::parse("sm90");
  expect_error([&] { select_backend_for_run(p, sm90, "warp_speed"); },
               {"'warp_speed'", "--backend", "not a known backend"});
  expect_error([&] { select_backend_for_run(p, DeviceCapabilities::cpu(), "cuda_w4a16_grouped"); },
               {"cuda_w4a16_grouped", "--backend", "needs a CUDA device"});
  setenv(kBackendEnvVar, "cuda_bf16_grouped", 1);
  expect_error([&] { select_backend_for_run(p, sm90); },
               {"MOEKIT_BACKEND", "cuda_bf16_grouped", "bf16 weights"});
  // The flag wins over the environment.
  const BackendSelection s = select_backend_for_run(p, sm90, "cpu_monolithic");
  EXPECT_EQ(s.backend, Backend::kCpuMonolithic);
  EXPECT_TRUE(s.overridden);
  EXPECT_EQ(s.override_source, "--backend");
  setenv(kBackendEnvVar, "cpu_reference", 1);
  EXPECT_EQ(select_backend_for_run(p, sm90).override_source, "MOEKIT_BACKEND");
  setenv(kBackendEnvVar, "", 1);
  EXPECT_FALSE(select_backend_for_run(p, sm90).overridden);
  EXPECT_FALSE(select_backend_for_run(p, sm90, "auto").overridden);
}

// A fake CUDA implementation registered like a real one: the oracle consults its supports().
// `prefixed`: the reason already names the implementation (the oracle must not repeat it).
class FakeExperts final : public ModularExperts {
 public:
  explicit FakeExperts(bool prefixed = false) : prefixed_(prefixed) {}
  std::string name() const override { return "fake_w4a16"; }
  ActivationFormat activation_format() const override { return ActivationFormat::kStandard; }
  Device device() const override { return Device::cuda(0); }
  Support supports(const MoeProblem& p) const override {
    if (p.num_tokens <= 1024) return Support::yes();
    return Support::no(prefixed_ ? "fake_w4a16: M > 1024 not tuned" : "M > 1024 not tuned");
  }
  WorkspaceShapes workspace_shapes(const MoeProblem&) const override { return {}; }
  void prepare_weights(const MoeProblem&, const MoeWeights&, StreamHandle) override {}
  ReducePolicy reduce_policy() const override { return ReducePolicy::kAlreadyReduced; }
  void apply(const DispatchedActivations&, const TensorView&, const TensorView&, const TensorView&,
             StreamHandle) override {}

 private:
  bool prefixed_;
};

TEST(Oracle, RegisteredImplementationsAreCompiledInAndAsked) {
  EnvGuard env;
  const DeviceCapabilities sm90 = DeviceCapabilities::parse("sm90");
  std::optional<BackendRegistration> saved;  // the real one (CUDA builds), restored at the end
  if (const BackendRegistration* r = BackendRegistry::instance().find(Backend::kCudaW4A16Grouped))
    saved = *r;
  BackendRegistry::instance().add(
      Backend::kCudaW4A16Grouped,
      {.make_experts = [](const MoeProblem&) { return std::make_unique<FakeExperts>(); },
       .make_prepare_finalize = {}});
  const BackendSelection s = select_backend(cli_problem("tiny", "nvfp4", 64, "w4a16"), sm90);
  EXPECT_EQ(s.backend, Backend::kCudaW4A16Grouped) << s.table();
  const BackendSelection big = select_backend(cli_problem("tiny", "nvfp4", 4096, "w4a16"), sm90);
  EXPECT_EQ(find(big, Backend::kCudaW4A16Grouped)->reason, "fake_w4a16: M > 1024 not tuned");
  EXPECT_EQ(big.backend, Backend::kCpuReference);
  expect_error([] { make_moe_kernel(Backend::kCudaW4A16Grouped, cli_problem("tiny", "nvfp4", 8)); },
               {"registered no PrepareFinalize"});
  BackendRegistry::instance().remove(Backend::kCudaW4A16Grouped);
  EXPECT_FALSE(BackendRegistry::instance().compiled_in(Backend::kCudaW4A16Grouped));
  if (saved) BackendRegistry::instance().add(Backend::kCudaW4A16Grouped, *saved);
}

// Each refusal reason names the implementation once, whether or not its supports() reason
// already starts with the name.
TEST(Oracle, ImplementationReasonsNameTheImplementationOnce) {
  EnvGuard env;
  const DeviceCapabilities sm90 = DeviceCapabilities::parse("sm90");
  std::optional<BackendRegistration> saved;
  if (const BackendRegistration* r = BackendRegistry::instance().find(Backend::kCudaW4A16Grouped))
    saved = *r;
  BackendRegistry::instance().add(
      Backend::kCudaW4A16Grouped,
      {.make_experts = [](const MoeProblem&) { return std::make_unique<FakeExperts>(true); },
       .make_prepare_finalize = {}});
  const BackendSelection big = select_backend(cli_problem("tiny", "nvfp4", 4096, "w4a16"), sm90);
  EXPECT_EQ(find(big, Backend::kCudaW4A16Grouped)->reason, "fake_w4a16: M > 1024 not tuned");
  if (saved) {
    BackendRegistry::instance().add(Backend::kCudaW4A16Grouped, *saved);
  } else {
    BackendRegistry::instance().remove(Backend::kCudaW4A16Grouped);
  }
}

// The registered CUDA implementations (CUDA builds): problems the oracle's own chain passes but
// the implementation refuses on any machine (no device, or a device and an unsupported activation
// / alignment): the reason starts with the implementation's name and does not repeat it.
TEST(Oracle, RegisteredCudaReasonsNameTheImplementationOnce) {
  EnvGuard env;
  const DeviceCapabilities sm90 = DeviceCapabilities::parse("sm90");
  struct Case {
    Backend backend;
    MoeProblem problem;
  };
  const std::vector<Case> cases = {
      // SwiGLU-OAI with biases: the bf16 / fp8 grouped experts run SiLU-and-mul only.
      {Backend::kCudaBf16Grouped, cli_problem("gpt-oss-120b", "bf16", 8, "w4a16", 1, false, 256,
                                              128, 32)},
      {Backend::kCudaFp8BlockGrouped, cli_problem("gpt-oss-120b", "fp8_block", 8, "emulate", 1,
                                                  false, 256, 128, 32)},
      // H 96: a multiple of the nvfp4 blocks (16) and of 8, not of the W4A16 GEMM's 64.
      {Backend::kCudaW4A16Grouped, cli_problem("mixtral-8x7b", "nvfp4", 8, "w4a16", 1, false, 96,
                                               128, 8)},
  };
  int asked = 0;
  for (const Case& c : cases) {
    if (!BackendRegistry::instance().compiled_in(c.backend)) continue;  // CUDA OFF build
    ++asked;
    const std::string name =
        BackendRegistry::instance().find(c.backend)->make_experts(c.problem)->name();
    const Support s = backend_supports(c.backend, c.problem, sm90, ActivationFormat::kStandard);
    ASSERT_FALSE(s.ok) << name;
    EXPECT_EQ(s.reason.rfind(name + ": ", 0), 0u) << s.reason;
    EXPECT_EQ(s.reason.find(name, name.size()), std::string::npos) << s.reason;
  }
#if MOEKIT_WITH_CUDA
  EXPECT_GT(asked, 0) << "no CUDA implementation registered in a CUDA build";
#else
  EXPECT_EQ(asked, 0);
#endif
}

TEST(Oracle, ExecutableFilterForTools) {
  EnvGuard env;
  const MoeProblem p = cli_problem("tiny", "nvfp4", 8, "w4a16");
  const BackendSelection s =
      select_backend_for_run(p, DeviceCapabilities::cpu(), "", {"reference"});
  EXPECT_EQ(s.backend, Backend::kCpuReference);
  EXPECT_EQ(find(s, Backend::kCpuMonolithic)->reason, "accepted, but not executable by this tool");
  expect_error(
      [&] {
        select_backend_for_run(p, DeviceCapabilities::cpu(), "cpu_monolithic", {"reference"});
      },
      {"cpu_monolithic", "not executable by this tool"});
  EXPECT_EQ(run_backend_for(Backend::kCpuReference), "reference");
}

TEST(Oracle, DeviceParsing) {
  EXPECT_EQ(DeviceCapabilities::parse("sm_90a").sm(), 90);
  EXPECT_EQ(DeviceCapabilities::parse("SM100").sm(), 100);
  EXPECT_FALSE(DeviceCapabilities::parse("cpu").is_cuda);
  expect_error([] { DeviceCapabilities::parse("h200"); }, {"--device", "h200"});
}

TEST(Oracle, SelectedCpuKernelsMatchTheReference) {
  EnvGuard env;
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  MoeProblem p = cli_problem("qwen3-30b-a3b", "mxfp4", 6, "emulate", 1, false, 128, 64, 16);
  p.activation_dtype = DType::kF32;
  const MoeWeights w = random_moe_weights(p.layer, p.weight_quant, seed);
  const Tensor x = random_hidden_states(6, 128, DType::kF32, seed);
  const Tensor logits = router_logits_reference(x, random_router_weights(p.layer, seed));
  Tensor ref(DType::kF32, Shape{6, 128});
  moe_reference(x, logits, {}, p.layer, w, ref,
                {MoeNumerics::kEmulateActivationQuant, p.activation_quant});
  for (Backend b : {Backend::kCpuReference, Backend::kCpuBatched, Backend::kCpuMonolithic}) {
    FusedMoEKernel k = make_moe_kernel(b, p);
    k.prepare(p, w);
    Tensor out(DType::kF32, Shape{6, 128});
    k.apply_logits(x, logits, out);
    EXPECT_EQ(testing::first_bit_difference(out, ref), -1) << moe_backend_name(b);
  }
}

}  // namespace
}  // namespace moekit
