// Closest valid names (closest_name.hpp).
#include "run/closest_name.hpp"

#include <algorithm>
#include <cctype>

namespace moekit::app {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the dynamic programme; case-insensitive, as names are matched that way.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_name(std::string_view given, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = static_cast<std::size_t>(-1);
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(given, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view given, const std::vector<std::string>& candidates) {
  const std::string best = closest_name(given, candidates);
  if (best.empty()) return {};
  const std::size_t limit = std::max<std::size_t>(1, std::max(best.size(), given.size()) / 3);
  // A prefix ("--tok" for "--tokens") is a plausible abbreviation however short.
  const bool prefix = given.size() >= 3 && best.compare(0, given.size(), given) == 0;
  if (edit_distance(given, best) > limit && !prefix) return {};
  return "; did you mean '" + best + "'?";
}

}  // namespace moekit::app
