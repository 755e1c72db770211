// Expert activations. Gated activations map [T, 2I] -> [T, I]; GEMM1's output holds the gate in
// columns [0, I) and the up projection in [I, 2I) ("halves"), unless kInterleaved (gpt-oss
// checkpoints: gate at even, up at odd columns). ReLU^2 maps [T, I] -> [T, I] (no mul).
// Definitions (g = gate, u = up):
//   silu:       silu(g) * u,                       silu(x) = x / (1 + exp(-x))
//   gelu_erf:   0.5 g (1 + erf(g / sqrt(2))) * u
//   gelu_tanh:  0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) * u
//   swiglu_oai: glu = min(g, limit), lin = clamp(u, -limit, limit),
//               out = glu * sigmoid(alpha * glu) * (lin + 1)           (gpt-oss)
//   relu2:      max(x, 0)^2
// The reference evaluates each in float64 from the fp32 inputs and rounds once to fp32.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moekit/core/tensor.hpp"

namespace moekit {

enum class Activation : std::uint8_t {
  kSiluAndMul,
  kGeluErfAndMul,
  kGeluTanhAndMul,
  kSwigluOai,
  kRelu2
};
enum class GateUpLayout : std::uint8_t { kHalves, kInterleaved };

struct ActivationConfig {
  Activation kind = Activation::kSiluAndMul;
  float swiglu_alpha = 1.702f;  // SwiGLU-OAI
  float swiglu_limit = 7.0f;    // SwiGLU-OAI
  GateUpLayout layout = GateUpLayout::kHalves;
  std::string str() const;
  void validate() const;  // SwiGLU-OAI: finite alpha, limit > 0
};

std::string_view activation_name(
    Activation a);  // "silu", "gelu_erf", "gelu_tanh", "swiglu_oai", "relu2"
Activation parse_activation(std::string_view name);
std::string_view gate_up_layout_name(GateUpLayout l);  // "halves", "interleaved"
GateUpLayout parse_gate_up_layout(std::string_view name);
bool is_gated(Activation a);
// Width of the activation input (GEMM1 output) for intermediate size I: 2I gated, I otherwise.
std::int64_t activation_input_width(Activation a, std::int64_t intermediate_size);

// One element of the activation, in float64 (the normative scalar definitions above).
double activation_scalar(const ActivationConfig& config, double gate, double up);

// in: [T, 2I] (gated) or [T, I]; f32. out: [T, I] f32. Host, contiguous.
void activation_reference(const TensorView& in, const ActivationConfig& config,
                          const TensorView& out);

// Raw-pointer form used by the CPU MoE layer: `rows` rows of `in` (row stride = input width)
// into `out` (row stride = I).
void activation_reference_rows(const float* in, std::int64_t rows, std::int64_t intermediate_size,
                               const ActivationConfig& config, float* out);

}  // namespace moekit
