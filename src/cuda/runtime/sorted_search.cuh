// Binary search over a nondecreasing device array (expert offsets, token-tile prefixes).
#pragma once

#include <cuda_runtime.h>

namespace moekit::cuda {

// The largest i in [0, n) with a[i] <= x (a nondecreasing, a[0] <= x). With a = expert offsets
// (or token-tile starts) this is the expert that owns row (tile) x: an empty expert shares its
// successor's start and loses the tie.
template <typename T>
__device__ __forceinline__ int last_at_most(const int* a, int n, T x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace moekit::cuda
