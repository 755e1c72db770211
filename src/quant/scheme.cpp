#include "moekit/quant/scheme.hpp"

#include <string>

#include "moekit/core/error.hpp"

namespace moekit {

namespace {

constexpr QuantScheme kAllSchemes[] = {
    QuantScheme::kBF16,          QuantScheme::kFP8PerTensor,    QuantScheme::kFP8PerToken,
    QuantScheme::kFP8Block1x128, QuantScheme::kFP8Block128x128, QuantScheme::kMXFP8,
    QuantScheme::kNVFP4,         QuantScheme::kNVFP4PerToken,   QuantScheme::kMXFP4};
constexpr ScaleLayout kAllLayouts[] = {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4,
                                       ScaleLayout::kSwizzled8x4};
constexpr ScaleRule kAllRules[] = {ScaleRule::kRceil, ScaleRule::kFloor};
constexpr QuantBackend kAllBackends[] = {QuantBackend::kReference, QuantBackend::kCuda};

// "a|b|c" of every name of an enum, for error messages.
template <typename E, std::size_t N, typename NameFn>
std::string joined_names(const E (&all)[N], NameFn name) {
  std::string out = "one of ";
  for (std::size_t i = 0; i < N; ++i) {
    if (i) out += "|";
    out += name(all[i]);
  }
  return out;
}

template <typename E, std::size_t N, typename NameFn>
bool find_name(const E (&all)[N], NameFn name, std::string_view text, E* out) {
  for (E e : all) {
    if (name(e) == text) {
      *out = e;
      return true;
    }
  }
  return false;
}

}  // namespace

std::string_view scheme_name(QuantScheme s) {
  switch (s) {
    case QuantScheme::kBF16:
      return "bf16";
    case QuantScheme::kFP8PerTensor:
      return "fp8_tensor";
    case QuantScheme::kFP8PerToken:
      return "fp8_token";
    case QuantScheme::kFP8Block1x128:
      return "fp8_1x128";
    case QuantScheme::kFP8Block128x128:
      return "fp8_block";
    case QuantScheme::kMXFP8:
      return "mxfp8";
    case QuantScheme::kNVFP4:
      return "nvfp4";
    case QuantScheme::kNVFP4PerToken:
      return "nvfp4_token";
    case QuantScheme::kMXFP4:
      return "mxfp4";
  }
  return "?";
}

std::string_view layout_name(ScaleLayout l) {
  switch (l) {
    case ScaleLayout::kLinear:
      return "linear";
    case ScaleLayout::kSwizzled128x4:
      return "swizzled_128x4";
    case ScaleLayout::kSwizzled8x4:
      return "swizzled_8x4";
  }
  return "?";
}

std::string_view rule_name(ScaleRule r) {
  switch (r) {
    case ScaleRule::kRceil:
      return "rceil";
    case ScaleRule::kFloor:
      return "floor";
  }
  return "?";
}

std::string_view backend_name(QuantBackend b) {
  switch (b) {
    case QuantBackend::kReference:
      return "reference";
    case QuantBackend::kCuda:
      return "cuda";
  }
  return "?";
}

QuantScheme parse_scheme(std::string_view name) {
  QuantScheme s{};
  if (!find_name(kAllSchemes, scheme_name, name, &s)) {
    throw_arg_error("parse_scheme", "scheme", joined_names(kAllSchemes, scheme_name),
                    detail::concat("'", name, "'"));
  }
  return s;
}

ScaleLayout parse_layout(std::string_view name) {
  ScaleLayout l{};
  if (!find_name(kAllLayouts, layout_name, name, &l)) {
    throw_arg_error("parse_layout", "layout", joined_names(kAllLayouts, layout_name),
                    detail::concat("'", name, "'"));
  }
  return l;
}

ScaleRule parse_rule(std::string_view name) {
  ScaleRule r{};
  if (!find_name(kAllRules, rule_name, name, &r)) {
    throw_arg_error("parse_rule", "rule", joined_names(kAllRules, rule_name),
                    detail::concat("'", name, "'"));
  }
  return r;
}

QuantBackend parse_quant_backend(std::string_view name) {
  QuantBackend b{};
  if (!find_name(kAllBackends, backend_name, name, &b)) {
    throw_arg_error("parse_quant_backend", "backend", joined_names(kAllBackends, backend_name),
                    detail::concat("'", name, "'"));
  }
  return b;
}

std::string QuantConfig::str() const {
  std::string out(scheme_name(scheme));
  if (has_block_scales(scheme)) {
    out += "/";
    out += layout_name(layout);
  }
  if (is_mx(scheme)) {
    out += "/";
    out += rule_name(rule);
  }
  return out;
}

QuantConfig parse_quant_config(std::string_view text) {
  QuantConfig c;
  std::size_t pos = text.find('/');
  c.scheme = parse_scheme(text.substr(0, pos));
  bool have_layout = false, have_rule = false;
  while (pos != std::string_view::npos) {
    const std::size_t next = text.find('/', pos + 1);
    const std::string_view part = text.substr(
        pos + 1, next == std::string_view::npos ? std::string_view::npos : next - pos - 1);
    ScaleLayout l{};
    ScaleRule r{};
    if (!have_layout && has_block_scales(c.scheme) &&
        find_name(kAllLayouts, layout_name, part, &l)) {
      c.layout = l;
      have_layout = true;
    } else if (!have_rule && is_mx(c.scheme) && find_name(kAllRules, rule_name, part, &r)) {
      c.rule = r;
      have_rule = true;
    } else {
      std::string expected = detail::concat("for ", scheme_name(c.scheme), ": ");
      if (has_block_scales(c.scheme) && !have_layout) {
        expected += joined_names(kAllLayouts, layout_name);
      }
      if (is_mx(c.scheme) && !have_rule) {
        expected += (has_block_scales(c.scheme) && !have_layout ? " or " : "") +
                    joined_names(kAllRules, rule_name);
      }
      if (!(has_block_scales(c.scheme) && !have_layout) && !(is_mx(c.scheme) && !have_rule)) {
        expected += "nothing after the scheme";
      }
      throw_arg_error("parse_quant_config", "config", expected,
                      detail::concat("'", part, "' in '", text, "'"));
    }
    pos = next;
  }
  return c;
}

int scale_block_size(QuantScheme s) {
  switch (s) {
    case QuantScheme::kNVFP4:
    case QuantScheme::kNVFP4PerToken:
      return 16;
    case QuantScheme::kMXFP4:
    case QuantScheme::kMXFP8:
      return 32;
    case QuantScheme::kFP8Block1x128:
    case QuantScheme::kFP8Block128x128:
      return 128;
    default:
      return 0;
  }
}

bool is_fp4(QuantScheme s) {
  return s == QuantScheme::kNVFP4 || s == QuantScheme::kNVFP4PerToken || s == QuantScheme::kMXFP4;
}

bool has_block_scales(QuantScheme s) { return is_fp4(s) || s == QuantScheme::kMXFP8; }

bool is_mx(QuantScheme s) { return s == QuantScheme::kMXFP4 || s == QuantScheme::kMXFP8; }

bool is_fp8(QuantScheme s) {
  return s == QuantScheme::kFP8PerTensor || s == QuantScheme::kFP8PerToken ||
         s == QuantScheme::kFP8Block1x128 || s == QuantScheme::kFP8Block128x128 ||
         s == QuantScheme::kMXFP8;
}

}  // namespace moekit
