// Private JSON helpers for io/ (nlohmann_json stays out of public headers).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace moekit::io::detail {

// Parses `text` as JSON. Unlike nlohmann::json::parse, a duplicate key in any object is an error
// (nlohmann silently keeps the last one). Throws moekit::Error("<what>: ...") on any problem.
nlohmann::json parse_json_strict(std::string_view text, const std::string& what);

// Reads and parses a whole JSON file (strict); throws naming the path.
nlohmann::json read_json_file(const std::string& path);

// Reads a whole file into a string; throws naming the path.
std::string read_text_file(const std::string& path);

// A short, printable excerpt of a JSON value for error messages (at most ~80 characters).
std::string json_excerpt(const nlohmann::json& j);

}  // namespace moekit::io::detail
