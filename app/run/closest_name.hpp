// "Did you mean ...?": the valid name closest to a mistyped one (Levenshtein distance, ties to the
// earlier candidate), for unknown subcommands, flags and backend names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moekit::app {

std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `given` ("" when there are none).
std::string closest_name(std::string_view given, const std::vector<std::string>& candidates);

// "; did you mean 'tokens'?" when a candidate is close enough to be a plausible typo (at most a
// third of its letters wrong, at least one), else "" (a far-off "closest" name reads as noise).
std::string did_you_mean(std::string_view given, const std::vector<std::string>& candidates);

}  // namespace moekit::app
