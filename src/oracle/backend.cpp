// Backend names and traits, device capabilities, and the registry of compiled-in backends.
#include "moekit/oracle/backend.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/device_runtime.hpp"
#include "moekit/core/error.hpp"

namespace moekit {
namespace {

// One row per Backend, in enum order.
const BackendTraits kTraits[] = {
    {Backend::kCpuReference, ActivationFormat::kStandard, false, false, 0,
     "CPU reference: NoEP prepare/finalize + standard experts (dequantized fp32 GEMMs)"},
    {Backend::kCpuBatched, ActivationFormat::kBatched, false, false, 0,
     "CPU batched: per-expert buffers [E_local, T_max, H]"},
    {Backend::kCpuMonolithic, ActivationFormat::kStandard, true, false, 0,
     "CPU monolithic: routing + experts + reduce in one piece"},
    {Backend::kCudaBf16Grouped, ActivationFormat::kStandard, false, true, 90,
     "SM90 bf16 grouped GEMM (W16A16)"},
    {Backend::kCudaFp8BlockGrouped, ActivationFormat::kStandard, false, true, 90,
     "SM90 fp8 grouped GEMM, DeepSeek 128x128 / 1x128 block scales"},
    {Backend::kCudaW4A16Grouped, ActivationFormat::kStandard, false, true, 90,
     "SM90 4-bit weights dequantized to bf16 in registers (W4A16)"},
    {Backend::kCudaW4A8Grouped, ActivationFormat::kStandard, false, true, 90,
     "SM90 MXFP4 weights as e4m3 (exact) x fp8 per-token activations (W4A8)"},
};
constexpr const char* kNames[] = {"cpu_reference",          "cpu_batched",
                                  "cpu_monolithic",         "cuda_bf16_grouped",
                                  "cuda_fp8_block_grouped", "cuda_w4a16_grouped",
                                  "cuda_w4a8_grouped"};
constexpr std::size_t kNumBackends = sizeof(kNames) / sizeof(kNames[0]);
static_assert(sizeof(kTraits) / sizeof(kTraits[0]) == kNumBackends);

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

std::string_view moe_backend_name(Backend b) {
  const auto i = static_cast<std::size_t>(b);
  return i < kNumBackends ? kNames[i] : "?";
}

const std::vector<Backend>& all_moe_backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> v;
    for (std::size_t i = 0; i < kNumBackends; ++i) v.push_back(static_cast<Backend>(i));
    return v;
  }();
  return all;
}

std::optional<Backend> find_moe_backend(std::string_view name) {
  const std::string n = lower(name);
  if (n == "reference" || n == "cpu") return Backend::kCpuReference;  // aliases
  for (std::size_t i = 0; i < kNumBackends; ++i)
    if (n == kNames[i]) return static_cast<Backend>(i);
  return std::nullopt;
}

Backend parse_moe_backend(std::string_view name) {
  if (auto b = find_moe_backend(name)) return *b;
  std::string valid;
  for (std::size_t i = 0; i < kNumBackends; ++i) {
    if (i) valid += '|';
    valid += kNames[i];
  }
  throw_arg_error("parse_moe_backend", "backend", "one of " + valid, std::string(name));
}

const BackendTraits& backend_traits(Backend b) {
  const auto i = static_cast<std::size_t>(b);
  MOEKIT_CHECK(i < kNumBackends, "backend_traits: unknown backend ", i);
  return kTraits[i];
}

std::string DeviceCapabilities::str() const {
  return is_cuda ? "sm_" + std::to_string(sm()) : std::string("cpu");
}

DeviceCapabilities DeviceCapabilities::cpu() {
  DeviceCapabilities d;
  d.name = "cpu";
  return d;
}

DeviceCapabilities DeviceCapabilities::cuda_sm(int sm_major, int sm_minor, std::string name) {
  DeviceCapabilities d;
  d.is_cuda = true;
  d.sm_major = sm_major;
  d.sm_minor = sm_minor;
  d.name = name.empty() ? std::string("assumed, not detected") : name;
  return d;
}

DeviceCapabilities DeviceCapabilities::parse(std::string_view text) {
  std::string t = lower(text);
  if (t == "cpu") return cpu();
  std::string digits;
  if (t.rfind("sm_", 0) == 0)
    digits = t.substr(3);
  else if (t.rfind("sm", 0) == 0)
    digits = t.substr(2);
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();
  const bool ok =
      (digits.size() == 2 || digits.size() == 3) &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!ok)
    throw_arg_error("DeviceCapabilities::parse", "--device", "cpu|sm90|sm_90a|sm100|sm120|...",
                    std::string(text));
  const int sm = std::stoi(digits);
  return cuda_sm(sm / 10, sm % 10);
}

DeviceCapabilities DeviceCapabilities::detect() {
  if (!device_runtime::compiled_with_cuda() || device_runtime::device_count() == 0) return cpu();
  const auto info = device_runtime::device_info(0);
  return cuda_sm(info.sm_major, info.sm_minor, info.name);
}

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry* r = [] {
    auto* reg = new BackendRegistry();  // never destroyed: usable from other static destructors
    register_builtin_backends(*reg);
    return reg;
  }();
  return *r;
}

BackendRegistry::BackendRegistry() : entries_(kNumBackends) {}

void BackendRegistry::add(Backend backend, BackendRegistration registration) {
  const auto i = static_cast<std::size_t>(backend);
  MOEKIT_CHECK(i < kNumBackends, "BackendRegistry::add: unknown backend ", i);
  MOEKIT_CHECK(static_cast<bool>(registration.make_experts), "BackendRegistry::add(",
               moe_backend_name(backend), "): make_experts is required");
  entries_[i] = std::move(registration);
}

void BackendRegistry::remove(Backend backend) {
  const auto i = static_cast<std::size_t>(backend);
  if (i < kNumBackends) entries_[i].reset();
}

bool BackendRegistry::compiled_in(Backend backend) const { return find(backend) != nullptr; }

std::vector<Backend> BackendRegistry::registered() const {
  std::vector<Backend> v;
  for (std::size_t i = 0; i < kNumBackends; ++i)
    if (entries_[i]) v.push_back(static_cast<Backend>(i));
  return v;
}

const BackendRegistration* BackendRegistry::find(Backend backend) const {
  const auto i = static_cast<std::size_t>(backend);
  if (i >= kNumBackends || !entries_[i]) return nullptr;
  return &*entries_[i];
}

}  // namespace moekit
