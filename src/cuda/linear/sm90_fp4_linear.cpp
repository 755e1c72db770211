// Dense FP4 linear on SM90: the W4A16 grouped GEMM with one expert and no offsets array.
#include "moekit/core/error.hpp"
#include "moekit/gemm/w4a16.hpp"
#include "moekit/linear/fp4_linear.hpp"

namespace moekit::linear {

std::string fp4_linear_unsupported_reason(W4Format format, std::int64_t n, std::int64_t k) {
  if (n <= 0 || n % 16 != 0) return "n must be a positive multiple of 16, got " + std::to_string(n);
  if (k <= 0 || k % 64 != 0) return "k must be a positive multiple of 64, got " + std::to_string(k);
  return "";
}

void fp4_linear(const Fp4LinearArgs& args) {
  gemm::W4A16GemmArgs g;
  g.format = args.format;
  g.num_experts = 1;
  g.m = args.m;
  g.n = args.n;
  g.k = args.k;
  g.expert_offsets = nullptr;  // dense: rows [0, m)
  g.a = args.x;
  g.lda = args.ldx;
  g.a_order = args.x_order;
  g.w = args.w;
  g.w_scales = args.w_scales;
  g.alpha = args.alpha;
  g.bias = args.bias;
  g.out = args.out;
  g.ldo = args.ldo;
  g.stream = args.stream;
  gemm::w4a16_grouped_gemm(g);
}

}  // namespace moekit::linear
