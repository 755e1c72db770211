// Internal: the fp32 matrix product of the CPU reference MoE layer.
#pragma once

#include <cstdint>

namespace moekit::cpu {

// c[i * ldc + j] = sum_k a[i][k] * b[j * k_len + k] for i < m, j < n: "A times B transposed" with
// A given as m row pointers (gathered tokens, no copy) and B row-major [n, k_len] (a weight
// matrix as stored: [N, K]). fp32 products and fp32 accumulation in 8 interleaved partial sums
// per output, combined pairwise at the end; single-threaded (callers parallelize over tiles).
void gemm_rows_nt(const float* const* a, std::int64_t m, const float* b, std::int64_t n,
                  std::int64_t k_len, float* c, std::int64_t ldc);

}  // namespace moekit::cpu
