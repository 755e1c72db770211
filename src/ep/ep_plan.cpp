#include "ep/ep_plan.hpp"

#include <string>

#include "moekit/core/error.hpp"

namespace moekit::ep {

DispatchPlan plan_dispatch(const std::int32_t* ids, std::int64_t m, int k,
                           const std::vector<int>& owner, int ranks) {
  const std::int64_t e = static_cast<std::int64_t>(owner.size());
  DispatchPlan p;
  p.send_count.assign(static_cast<std::size_t>(ranks), 0);
  p.send_first.assign(static_cast<std::size_t>(ranks), 0);
  std::vector<std::vector<std::int32_t>> per(static_cast<std::size_t>(ranks));
  std::vector<char> to(static_cast<std::size_t>(ranks));
  for (std::int64_t t = 0; t < m; ++t) {
    std::fill(to.begin(), to.end(), 0);
    for (int j = 0; j < k; ++j) {
      const std::int32_t g = ids[t * k + j];
      MOEKIT_CHECK_ARG(g >= 0 && g < e,
                       "topk_ids[" + std::to_string(t) + ", " + std::to_string(j) + "]",
                       "an expert id in [0, " + std::to_string(e) + ")", g);
      to[static_cast<std::size_t>(owner[static_cast<std::size_t>(g)])] = 1;
    }
    for (int d = 0; d < ranks; ++d)
      if (to[static_cast<std::size_t>(d)])
        per[static_cast<std::size_t>(d)].push_back(static_cast<std::int32_t>(t));
  }
  for (int d = 0; d < ranks; ++d) {
    p.send_first[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(p.send_token.size());
    p.send_count[static_cast<std::size_t>(d)] =
        static_cast<std::int64_t>(per[static_cast<std::size_t>(d)].size());
    p.send_token.insert(p.send_token.end(), per[static_cast<std::size_t>(d)].begin(),
                        per[static_cast<std::size_t>(d)].end());
  }
  return p;
}

}  // namespace moekit::ep
