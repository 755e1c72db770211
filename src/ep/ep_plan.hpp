// Internal: the host-side routing plan of all-to-all dispatch and combine (pure functions of the
// top-k ids and the expert owners; unit-tested without MPI in tests/ep/ep_plan_test.cpp).
//
// Orders (every rank derives the same ones, which is what lets sizes be exchanged once):
//   dispatch: rank r sends to rank d its tokens t having a slot whose expert d owns, ascending t;
//             rank d receives source 0's tokens first, then source 1's, ...
//   combine:  for every received token i (receive order) and slot j (ascending) whose expert is
//             local, one row goes back to the token's rank ("slot rows"); or, with experts that
//             reduce themselves, one partial-sum row per received token ("partial rows").
//             The home rank lays them out per source rank d ascending, then its tokens sent to d
//             ascending, then slots ascending.
#pragma once

#include <cstdint>
#include <vector>

namespace moekit::ep {

struct DispatchPlan {
  std::vector<std::int32_t> send_token;  // token of each sent row, grouped by destination
  std::vector<std::int64_t> send_count;  // [ranks] tokens to each rank
  std::vector<std::int64_t> send_first;  // [ranks] first row of each destination's group
};

// ids: [m, k] global expert ids (validated in [0, owner.size())); owner: rank of every expert.
DispatchPlan plan_dispatch(const std::int32_t* ids, std::int64_t m, int k,
                           const std::vector<int>& owner, int ranks);

struct CombinePlan {
  // Sender side (the experts' rank): rows of the experts' output to send, grouped by the token's
  // rank, and how many go to each rank.
  std::vector<std::int32_t> send_row;
  std::vector<std::int64_t> send_count;
  // Home side: source_row of unpermute_reduce ([m, k] slot rows, or [m, ranks] partial rows, -1
  // where nothing comes) into the received rows, and how many rows come from each rank.
  std::vector<std::int32_t> home_row;
  std::vector<std::int64_t> home_count;
};

// recv_ids [R, k]: ids of the received tokens (receive order); recv_count [ranks] tokens per
// source. expert_row(i, j) -> the experts' output row of received slot (i, j) (i*k + j for the
// standard format, the batched row otherwise); unused for partial rows.
// own_ids [m, k] and `dispatch`: this rank's tokens and how they were sent.
template <typename ExpertRow>
CombinePlan plan_combine(const std::int32_t* recv_ids, const std::vector<std::int64_t>& recv_count,
                         const std::int32_t* own_ids, std::int64_t m, int k,
                         const DispatchPlan& dispatch, const std::vector<int>& owner, int rank,
                         bool partial, ExpertRow expert_row) {
  const int ranks = static_cast<int>(recv_count.size());
  CombinePlan c;
  c.send_count.assign(static_cast<std::size_t>(ranks), 0);
  c.home_count.assign(static_cast<std::size_t>(ranks), 0);
  std::int64_t i = 0;
  for (int s = 0; s < ranks; ++s) {
    for (std::int64_t n = 0; n < recv_count[static_cast<std::size_t>(s)]; ++n, ++i) {
      if (partial) {
        c.send_row.push_back(static_cast<std::int32_t>(i));
        ++c.send_count[static_cast<std::size_t>(s)];
        continue;
      }
      for (int j = 0; j < k; ++j) {
        if (owner[static_cast<std::size_t>(recv_ids[i * k + j])] != rank) continue;
        c.send_row.push_back(expert_row(i, j));
        ++c.send_count[static_cast<std::size_t>(s)];
      }
    }
  }
  const std::int64_t width = partial ? ranks : k;
  c.home_row.assign(static_cast<std::size_t>(m * width), -1);
  std::int32_t row = 0;
  for (int d = 0; d < ranks; ++d) {
    const std::int64_t first = dispatch.send_first[static_cast<std::size_t>(d)];
    for (std::int64_t n = 0; n < dispatch.send_count[static_cast<std::size_t>(d)]; ++n) {
      const std::int64_t t = dispatch.send_token[static_cast<std::size_t>(first + n)];
      if (partial) {
        c.home_row[static_cast<std::size_t>(t * ranks + d)] = row++;
        ++c.home_count[static_cast<std::size_t>(d)];
        continue;
      }
      for (int j = 0; j < k; ++j) {
        if (owner[static_cast<std::size_t>(own_ids[t * k + j])] != d) continue;
        c.home_row[static_cast<std::size_t>(t * k + j)] = row++;
        ++c.home_count[static_cast<std::size_t>(d)];
      }
    }
  }
  return c;
}

}  // namespace moekit::ep
