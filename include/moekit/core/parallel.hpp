// A small host thread pool for the CPU reference backend: parallel_for over [0, n).
#pragma once

#include <cstdint>
#include <functional>

namespace moekit {

// Number of worker threads used by parallel_for (MOEKIT_NUM_THREADS, else hardware concurrency).
int num_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel. Chunks are at least
// `grain` long. Exceptions thrown by fn are rethrown on the calling thread (the first one).
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

}  // namespace moekit
