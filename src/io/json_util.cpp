#include "io/json_util.hpp"

#include <fstream>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "moekit/core/error.hpp"

namespace moekit::io::detail {

nlohmann::json parse_json_strict(std::string_view text, const std::string& what) {
  // One key set per open object. The callback only records the first duplicate: throwing through
  // nlohmann's parser is avoided on purpose, and a recorded error is rethrown after parsing.
  std::vector<std::unordered_set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty() && parsed.is_string()) {
      if (!open_objects.back().insert(parsed.get_ref<const std::string&>()).second &&
          duplicate.empty())
        duplicate = parsed.get_ref<const std::string&>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    MOEKIT_FAIL(what, ": invalid JSON: ", e.what());
  }
  if (!duplicate.empty()) MOEKIT_FAIL(what, ": duplicate key '", duplicate, "' in JSON");
  return j;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEKIT_FAIL("cannot open '", path, "' for reading");
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) MOEKIT_FAIL("error reading '", path, "'");
  return os.str();
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_strict(read_text_file(path), "'" + path + "'");
}

std::string json_excerpt(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

}  // namespace moekit::io::detail
