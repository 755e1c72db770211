// Reduce-policy helpers of the Experts contract.
#include "moekit/framework/experts.hpp"

namespace moekit {

std::string_view reduce_policy_name(ReducePolicy p) {
  switch (p) {
    case ReducePolicy::kAlreadyReduced:
      return "already_reduced";
    case ReducePolicy::kContiguous:
      return "contiguous";
    case ReducePolicy::kBatchedPerExpert:
      return "batched_per_expert";
    case ReducePolicy::kDelegate:
      return "delegate";
  }
  return "?";
}

ReducePolicy resolve_reduce_policy(ReducePolicy p, ActivationFormat format) {
  if (p != ReducePolicy::kDelegate) return p;
  return format == ActivationFormat::kStandard ? ReducePolicy::kContiguous
                                               : ReducePolicy::kBatchedPerExpert;
}

}  // namespace moekit
