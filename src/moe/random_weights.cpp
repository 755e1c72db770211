// Deterministic random MoE weights (random_weights.hpp).
#include "moekit/moe/random_weights.hpp"

#include <cmath>
#include <cstring>
#include <numbers>

#include "moe/host_convert.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"

namespace moekit {

namespace {

// splitmix64 finalizer: a good 64-bit mix, used as a counter-based generator.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Distinct streams for the tensors of one layer.
enum Stream : std::uint64_t {
  kStreamW13 = 1,
  kStreamW2,
  kStreamW13Bias,
  kStreamW2Bias,
  kStreamRouter,
  kStreamRouterBias,
  kStreamCorrectionBias,
  kStreamHidden,
};

// Element i of the (seed, stream) sequence is written to dst[i - offset]; offset must be even so
// that Box-Muller pairs are never split.
void fill_normal_at(float* dst, std::int64_t offset, std::int64_t n, float mean, float std,
                    std::uint64_t seed, std::uint64_t stream) {
  const std::uint64_t key = mix64(mix64(seed) ^ (stream * 0xD1B54A32D192ED03ull));
  constexpr double kTwoPi = 2.0 * std::numbers::pi;
  for (std::int64_t i = 0; i < n; i += 2) {
    const std::uint64_t pair = static_cast<std::uint64_t>((offset + i) / 2);
    // 53-bit uniforms; u1 in (0, 1] so that log(u1) is finite.
    const double u1 = (static_cast<double>(mix64(key + 2 * pair) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(mix64(key + 2 * pair + 1) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    dst[i] = static_cast<float>(mean + std * r * std::cos(kTwoPi * u2));
    if (i + 1 < n) dst[i + 1] = static_cast<float>(mean + std * r * std::sin(kTwoPi * u2));
  }
}

void round_to_bf16_values(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    x[i] = detail::bf16_bits_to_float(detail::float_to_bf16_bits(x[i]));
}

Tensor normal_bf16(const Shape& shape, float std, std::uint64_t seed, std::uint64_t stream) {
  Tensor t(DType::kBF16, shape);
  auto* dst = t.ptr<std::uint16_t>();
  const std::int64_t n = t.numel();
  constexpr std::int64_t kChunk = 1 << 16;
  parallel_for((n + kChunk - 1) / kChunk, 1, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> buf(static_cast<std::size_t>(kChunk));
    for (std::int64_t c = b; c < e; ++c) {
      const std::int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
      fill_normal_at(buf.data(), begin, len, 0.0f, std, seed, stream);  // kChunk is even
      for (std::int64_t i = 0; i < len; ++i) dst[begin + i] = detail::float_to_bf16_bits(buf[i]);
    }
  });
  return t;
}

Tensor normal_f32(const Shape& shape, float std, std::uint64_t seed, std::uint64_t stream,
                  bool bf16_values) {
  Tensor t(DType::kF32, shape);
  fill_random_normal(t.ptr<float>(), t.numel(), 0.0f, std, seed, stream);
  if (bf16_values) round_to_bf16_values(t.ptr<float>(), t.numel());
  return t;
}

Tensor copy_tensor(const Tensor& src) {
  if (!src.defined()) return {};
  Tensor t(src.dtype(), src.shape(), src.device());
  copy(t.view(), src.view());
  return t;
}

}  // namespace

void fill_random_normal(float* dst, std::int64_t n, float mean, float std, std::uint64_t seed,
                        std::uint64_t stream) {
  fill_normal_at(dst, 0, n, mean, std, seed, stream);
}

MoeWeights random_master_weights(const MoeLayerConfig& config, std::uint64_t seed) {
  config.validate();
  MoeWeights w;
  w.num_experts = config.num_experts;
  w.hidden_size = config.hidden_size;
  w.intermediate_size = config.intermediate_size;
  w.gated = is_gated(config.activation.kind);
  w.quant = QuantConfig{};  // kBF16
  const std::int64_t e = config.num_experts, h = config.hidden_size;
  const std::int64_t i = config.intermediate_size, rows = w.w13_rows();
  w.w13.config = w.quant;
  w.w13.values = normal_bf16(Shape{e, rows, h}, static_cast<float>(1.0 / std::sqrt(double(h))),
                             seed, kStreamW13);
  w.w2.config = w.quant;
  w.w2.values =
      normal_bf16(Shape{e, h, i}, static_cast<float>(1.0 / std::sqrt(double(i))), seed, kStreamW2);
  if (config.has_bias) {
    w.w13_bias = normal_f32(Shape{e, rows}, kRandomBiasStd, seed, kStreamW13Bias, true);
    w.w2_bias = normal_f32(Shape{e, h}, kRandomBiasStd, seed, kStreamW2Bias, true);
  }
  return w;
}

MoeWeights quantize_moe_weights(const MoeWeights& master, const QuantConfig& quant) {
  master.validate();
  MOEKIT_CHECK_ARG(master.quant.scheme == QuantScheme::kBF16, "master.quant", "bf16",
                   master.quant.str());
  MoeWeights w;
  w.num_experts = master.num_experts;
  w.hidden_size = master.hidden_size;
  w.intermediate_size = master.intermediate_size;
  w.gated = master.gated;
  w.quant = quant;
  w.w13 = quantize(master.w13.values.view(), quant);
  w.w2 = quantize(master.w2.values.view(), quant);
  w.w13_bias = copy_tensor(master.w13_bias);
  w.w2_bias = copy_tensor(master.w2_bias);
  w.a13_scale = copy_tensor(master.a13_scale);
  w.a2_scale = copy_tensor(master.a2_scale);
  w.validate();
  return w;
}

MoeWeights random_moe_weights(const MoeLayerConfig& config, const QuantConfig& quant,
                              std::uint64_t seed) {
  return quantize_moe_weights(random_master_weights(config, seed), quant);
}

RouterWeights random_router_weights(const MoeLayerConfig& config, std::uint64_t seed) {
  config.validate();
  const std::int64_t e = config.num_experts, h = config.hidden_size;
  RouterWeights r;
  r.weight = normal_f32(Shape{e, h}, static_cast<float>(1.0 / std::sqrt(double(h))), seed,
                        kStreamRouter, false);
  if (config.has_router_bias)
    r.bias = normal_f32(Shape{e}, kRandomBiasStd, seed, kStreamRouterBias, false);
  if (routing_uses_bias(config.routing.method))
    r.correction_bias = normal_f32(Shape{e}, kRandomBiasStd, seed, kStreamCorrectionBias, false);
  return r;
}

Tensor random_hidden_states(std::int64_t tokens, std::int64_t hidden_size, DType dtype,
                            std::uint64_t seed) {
  MOEKIT_CHECK_ARG(tokens >= 0, "tokens", ">= 0", tokens);
  MOEKIT_CHECK_ARG(hidden_size >= 1, "hidden_size", ">= 1", hidden_size);
  MOEKIT_CHECK_ARG(dtype == DType::kF32 || dtype == DType::kBF16, "dtype", "f32 or bf16",
                   dtype_name(dtype));
  if (dtype == DType::kBF16)
    return normal_bf16(Shape{tokens, hidden_size}, 1.0f, seed, kStreamHidden);
  return normal_f32(Shape{tokens, hidden_size}, 1.0f, seed, kStreamHidden, false);
}

}  // namespace moekit
