// The CPU reference activations (definitions in activation.hpp).
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>

#include "moekit/activation/activation.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"

namespace moekit {

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kSiluAndMul:
      return "silu";
    case Activation::kGeluErfAndMul:
      return "gelu_erf";
    case Activation::kGeluTanhAndMul:
      return "gelu_tanh";
    case Activation::kSwigluOai:
      return "swiglu_oai";
    case Activation::kRelu2:
      return "relu2";
  }
  return "?";
}

Activation parse_activation(std::string_view name) {
  for (Activation a : {Activation::kSiluAndMul, Activation::kGeluErfAndMul,
                       Activation::kGeluTanhAndMul, Activation::kSwigluOai, Activation::kRelu2}) {
    if (activation_name(a) == name) return a;
  }
  throw_arg_error("parse_activation", "activation",
                  "one of silu|gelu_erf|gelu_tanh|swiglu_oai|relu2", std::string(name));
}

std::string_view gate_up_layout_name(GateUpLayout l) {
  return l == GateUpLayout::kHalves ? "halves" : "interleaved";
}

GateUpLayout parse_gate_up_layout(std::string_view name) {
  if (name == "halves") return GateUpLayout::kHalves;
  if (name == "interleaved") return GateUpLayout::kInterleaved;
  throw_arg_error("parse_gate_up_layout", "gate/up layout", "one of halves|interleaved",
                  std::string(name));
}

bool is_gated(Activation a) { return a != Activation::kRelu2; }

std::int64_t activation_input_width(Activation a, std::int64_t intermediate_size) {
  return is_gated(a) ? 2 * intermediate_size : intermediate_size;
}

std::string ActivationConfig::str() const {
  std::ostringstream os;
  os << activation_name(kind);
  if (kind == Activation::kSwigluOai)
    os << "(alpha=" << swiglu_alpha << ", limit=" << swiglu_limit << ")";
  if (is_gated(kind) && layout == GateUpLayout::kInterleaved) os << "[interleaved]";
  return os.str();
}

void ActivationConfig::validate() const {
  if (kind != Activation::kSwigluOai) return;
  MOEKIT_CHECK_ARG(std::isfinite(swiglu_alpha), "swiglu_alpha", "finite", swiglu_alpha);
  MOEKIT_CHECK_ARG(std::isfinite(swiglu_limit) && swiglu_limit > 0.0f, "swiglu_limit",
                   "finite and > 0", swiglu_limit);
}

double activation_scalar(const ActivationConfig& config, double g, double u) {
  switch (config.kind) {
    case Activation::kSiluAndMul:
      return g / (1.0 + std::exp(-g)) * u;
    case Activation::kGeluErfAndMul:
      return 0.5 * g * (1.0 + std::erf(g * (1.0 / std::numbers::sqrt2))) * u;
    case Activation::kGeluTanhAndMul: {
      const double c = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g))) * u;
    }
    case Activation::kSwigluOai: {
      const double limit = config.swiglu_limit, alpha = config.swiglu_alpha;
      const double glu = std::fmin(g, limit);
      const double lin = std::fmax(-limit, std::fmin(u, limit));
      return glu / (1.0 + std::exp(-alpha * glu)) * (lin + 1.0);
    }
    case Activation::kRelu2: {
      const double r = g > 0.0 ? g : 0.0;
      return r * r;
    }
  }
  return 0.0;
}

void activation_reference_rows(const float* in, std::int64_t rows, std::int64_t inter,
                               const ActivationConfig& config, float* out) {
  const bool gated = is_gated(config.kind);
  const bool interleaved = config.layout == GateUpLayout::kInterleaved;
  const std::int64_t width = activation_input_width(config.kind, inter);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * width;
    float* y = out + r * inter;
    for (std::int64_t i = 0; i < inter; ++i) {
      double g, u = 1.0;
      if (!gated) {
        g = x[i];
      } else if (interleaved) {
        g = x[2 * i];
        u = x[2 * i + 1];
      } else {
        g = x[i];
        u = x[inter + i];
      }
      y[i] = static_cast<float>(activation_scalar(config, g, u));
    }
  }
}

void activation_reference(const TensorView& in, const ActivationConfig& config,
                          const TensorView& out) {
  config.validate();
  MOEKIT_CHECK_ARG(in.rank() == 2, "in rank", 2, in.rank());
  MOEKIT_CHECK_ARG(in.dtype == DType::kF32, "in dtype", "f32", dtype_name(in.dtype));
  MOEKIT_CHECK_ARG(in.device.is_host() && in.is_contiguous(), "in", "a contiguous host tensor",
                   in.str());
  MOEKIT_CHECK_ARG(out.rank() == 2, "out rank", 2, out.rank());
  MOEKIT_CHECK_ARG(out.dtype == DType::kF32, "out dtype", "f32", dtype_name(out.dtype));
  MOEKIT_CHECK_ARG(out.device.is_host() && out.is_contiguous(), "out", "a contiguous host tensor",
                   out.str());
  const std::int64_t rows = in.size(0), width = in.size(1);
  const bool gated = is_gated(config.kind);
  if (gated) {
    MOEKIT_CHECK_ARG(
        width % 2 == 0, "in.shape[1]",
        std::string("even (gate and up) for ") + std::string(activation_name(config.kind)), width);
  }
  const std::int64_t inter = gated ? width / 2 : width;
  const Shape expected{rows, inter};
  MOEKIT_CHECK_ARG(out.shape == expected, "out shape", expected.str(), out.shape.str());
  const float* x = in.ptr<const float>();
  float* y = out.ptr<float>();
  parallel_for(rows, std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(width, 1)),
               [&](std::int64_t b, std::int64_t e) {
                 activation_reference_rows(x + b * width, e - b, inter, config, y + b * inter);
               });
}

}  // namespace moekit
