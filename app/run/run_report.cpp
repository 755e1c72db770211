// The report of `moekit run` (run_job.hpp): text and JSON.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "run/run_job.hpp"

namespace moekit {

std::string RunJobReport::text() const {
  char buf[2048];
  std::snprintf(buf, sizeof(buf),
                "moekit run: %s\n"
                "  tokens %lld  experts %d (touched %d)  top-k %d  H %lld  I %lld\n"
                "  routing %s  activation %s\n"
                "  quant %s  mode %s  backend %s  seed %llu  threads %d\n"
                "  time: layer %.3f ms  setup %.1f ms  float64 check %.1f ms\n"
                "  error vs float64 reference: max abs %.3e  relative L2 %.3e  (output rms %.3e)\n"
                "%s: relative L2 %.3e %s bound %.1e\n",
                layer.c_str(), static_cast<long long>(tokens), num_experts, experts_touched, top_k,
                static_cast<long long>(hidden_size), static_cast<long long>(intermediate_size),
                routing.c_str(), activation.c_str(), quant.c_str(), mode.c_str(), backend.c_str(),
                static_cast<unsigned long long>(seed), threads, layer_ms, setup_ms, reference_ms,
                max_abs_error, relative_l2, output_rms, pass ? "PASS" : "FAIL", relative_l2,
                pass ? "<=" : "exceeds", bound);
  return buf;
}

std::string RunJobReport::json() const {
  nlohmann::json j;
  j["layer"] = layer;
  j["preset"] = preset;
  j["tokens"] = tokens;
  j["experts"] = num_experts;
  j["experts_touched"] = experts_touched;
  j["top_k"] = top_k;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["routing"] = routing;
  j["activation"] = activation;
  j["quant"] = quant;
  j["mode"] = mode;
  j["backend"] = backend;
  j["seed"] = seed;
  j["threads"] = threads;
  j["layer_ms"] = layer_ms;
  j["setup_ms"] = setup_ms;
  j["reference_ms"] = reference_ms;
  j["max_abs_error"] = max_abs_error;
  // JSON has no Inf/NaN: a non-finite error is reported as null (and pass is false).
  j["relative_l2"] = std::isfinite(relative_l2) ? nlohmann::json(relative_l2) : nlohmann::json();
  j["output_rms"] = output_rms;
  j["bound"] = bound;
  j["pass"] = pass;
  return j.dump(2);
}

}  // namespace moekit
