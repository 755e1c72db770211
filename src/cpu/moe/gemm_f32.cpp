// The fp32 "A B^T" product of the CPU reference (gemm_f32.hpp). Both operands are read along K
// contiguously, so no transpose is needed. A 2x4 block of outputs keeps 8 lanes of partial sums
// each; the lane loop vectorizes with baseline SSE2 and with AVX when enabled.
#include "cpu/moe/gemm_f32.hpp"

namespace moekit::cpu {

namespace {

constexpr int kLanes = 8;
constexpr int kMr = 2;  // rows of A per block
constexpr int kNr = 4;  // rows of B per block

inline float reduce_lanes(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// Generic block of mr x nr outputs (mr <= kMr, nr <= kNr). Templated so that the full block
// has compile-time trip counts.
template <int MR, int NR>
void block(const float* const* a, const float* const* b, std::int64_t k_len, float* c,
           std::int64_t ldc) {
  float acc[MR][NR][kLanes] = {};
  std::int64_t k = 0;
  for (; k + kLanes <= k_len; k += kLanes) {
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) {
        for (int l = 0; l < kLanes; ++l) acc[i][j][l] += a[i][k + l] * b[j][k + l];
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = reduce_lanes(acc[i][j]);
      for (std::int64_t kk = k; kk < k_len; ++kk) s += a[i][kk] * b[j][kk];
      c[i * ldc + j] = s;
    }
  }
}

template <int MR>
void block_rows(const float* const* a, const float* const* b, int nr, std::int64_t k_len, float* c,
                std::int64_t ldc) {
  switch (nr) {
    case 4: block<MR, 4>(a, b, k_len, c, ldc); break;
    case 3: block<MR, 3>(a, b, k_len, c, ldc); break;
    case 2: block<MR, 2>(a, b, k_len, c, ldc); break;
    default: block<MR, 1>(a, b, k_len, c, ldc); break;
  }
}

}  // namespace

void gemm_rows_nt(const float* const* a, std::int64_t m, const float* b, std::int64_t n,
                  std::int64_t k_len, float* c, std::int64_t ldc) {
  // B rows outer so a group of kNr weight rows stays in L1 while the (small) A tile streams.
  for (std::int64_t j = 0; j < n; j += kNr) {
    const int nr = static_cast<int>(n - j < kNr ? n - j : kNr);
    const float* brows[kNr];
    for (int jj = 0; jj < nr; ++jj) brows[jj] = b + (j + jj) * k_len;
    for (std::int64_t i = 0; i < m; i += kMr) {
      if (m - i >= kMr)
        block_rows<kMr>(a + i, brows, nr, k_len, c + i * ldc + j, ldc);
      else
        block_rows<1>(a + i, brows, nr, k_len, c + i * ldc + j, ldc);
    }
  }
}

}  // namespace moekit::cpu
