// The fp32 "A B^T" product of the CPU reference (gemm_f32.hpp). Both operands are read along K
// contiguously, so no transpose is needed. Each A row meets kNr rows of B at a time with 8 lanes
// of partial sums per output (8 xmm registers of accumulators: no spills with baseline SSE2; the
// lane loop vectorizes). Measured on this machine's x86-64 cores (2 cores shared, noisy):
// ~7-8 GFLOP/s per thread, vs ~5 for 2x4 and 2x2 register blocks, which spill or load more.
// The summation order is fixed by the code (not by the vector width), so results are the same
// bits whatever the instruction set.
#include "cpu/moe/gemm_f32.hpp"

namespace moekit::cpu {

namespace {

constexpr int kLanes = 8;
constexpr int kNr = 4;  // rows of B per block

inline float reduce_lanes(const float* v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

// One row of A against NR rows of B: c[j] = dot(a, b[j]).
template <int NR>
void block(const float* a, const float* const* b, std::int64_t k_len, float* c) {
  float acc[NR][kLanes] = {};
  const float* bp[NR];
  for (int j = 0; j < NR; ++j) bp[j] = b[j];
  std::int64_t k = 0;
  for (; k + kLanes <= k_len; k += kLanes) {
    for (int j = 0; j < NR; ++j) {
      for (int l = 0; l < kLanes; ++l) acc[j][l] += a[k + l] * bp[j][k + l];
    }
  }
  for (int j = 0; j < NR; ++j) {
    float s = reduce_lanes(acc[j]);
    for (std::int64_t kk = k; kk < k_len; ++kk) s += a[kk] * bp[j][kk];
    c[j] = s;
  }
}

}  // namespace

void gemm_rows_nt(const float* const* a, std::int64_t m, const float* b, std::int64_t n,
                  std::int64_t k_len, float* c, std::int64_t ldc) {
  // B rows outer, so a group of kNr weight rows stays in L1/L2 while the (small) A tile streams.
  for (std::int64_t j = 0; j < n; j += kNr) {
    const int nr = static_cast<int>(n - j < kNr ? n - j : kNr);
    const float* brows[kNr];
    for (int jj = 0; jj < nr; ++jj) brows[jj] = b + (j + jj) * k_len;
    for (std::int64_t i = 0; i < m; ++i) {
      float* ci = c + i * ldc + j;
      switch (nr) {
        case 4:
          block<4>(a[i], brows, k_len, ci);
          break;
        case 3:
          block<3>(a[i], brows, k_len, ci);
          break;
        case 2:
          block<2>(a[i], brows, k_len, ci);
          break;
        default:
          block<1>(a[i], brows, k_len, ci);
          break;
      }
    }
  }
}

}  // namespace moekit::cpu
