#include "framework/prepare_checks.hpp"

#include <string>

#include "moekit/quant/scheme.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit::detail {

Support prepare_input_supports(const MoeProblem& problem) {
  if (problem.apply_router_weight_on_input() && problem.top_k() != 1) {
    return Support::no("routing '" +
                       std::string(routing_method_name(problem.layer.routing.method)) +
                       "' applies the weight on the input and needs top_k 1, got " +
                       std::to_string(problem.top_k()));
  }
  const int sfv = scale_block_size(problem.activation_quant.scheme);
  if (has_block_scales(problem.activation_quant.scheme) && problem.hidden_size() % sfv != 0) {
    return Support::no("hidden size " + std::to_string(problem.hidden_size()) +
                       " is not a multiple of " + std::to_string(sfv) + " (" +
                       std::string(scheme_name(problem.activation_quant.scheme)) + " blocks)");
  }
  return Support::yes();
}

}  // namespace moekit::detail
