#include "moekit/core/parallel.hpp"

#include "core/env_switch.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace moekit {

int num_threads() {
  static const int n = [] {
    if (const auto v = env::integer("MOEKIT_NUM_THREADS", 1, 4096)) return static_cast<int>(*v);
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? static_cast<int>(hc) : 1;
  }();
  return n;
}

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  std::int64_t max_chunks = (n + grain - 1) / grain;
  std::int64_t workers = std::min<std::int64_t>(num_threads(), max_chunks);
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  std::int64_t chunk = (n + workers - 1) / workers;
  std::exception_ptr first_error;
  std::mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(workers - 1));
  auto body = [&](std::int64_t b, std::int64_t e) {
    try {
      fn(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_error) first_error = std::current_exception();
    }
  };
  for (std::int64_t w = 1; w < workers; ++w) {
    std::int64_t b = w * chunk, e = std::min(n, b + chunk);
    if (b < e) threads.emplace_back(body, b, e);
  }
  body(0, std::min(n, chunk));
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace moekit
