#include "moekit/io/checkpoint.hpp"

#include <algorithm>
#include <filesystem>

#include "io/json_util.hpp"
#include "moekit/core/error.hpp"

namespace moekit::io {

namespace fs = std::filesystem;

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    c.dir_ = fs::path(path).parent_path().string();
    if (c.dir_.empty()) c.dir_ = ".";
    c.files_.push_back(SafetensorsFile::open(path));
    for (const auto& t : c.files_[0].tensors()) c.where_.emplace(t.name, 0);
    return c;
  }
  if (!fs::is_directory(path, ec))
    MOEKIT_FAIL("checkpoint '", path, "': expected a .safetensors file or a directory, got ",
                fs::exists(path, ec) ? "something else" : "no such path");
  c.dir_ = path;
  const fs::path index_path = fs::path(path) / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    const std::string where = "checkpoint index '" + index_path.string() + "'";
    nlohmann::json index = detail::read_json_file(index_path.string());
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      MOEKIT_FAIL(where, ": weight_map: expected an object {tensor: file}, got ",
                  detail::json_excerpt(index.is_object() && index.contains("weight_map")
                                           ? index["weight_map"]
                                           : index));
    std::map<std::string, std::size_t> file_index;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        MOEKIT_FAIL(where, ": weight_map['", tensor, "']: expected a file name, got ",
                    detail::json_excerpt(file));
      const std::string name = file.get<std::string>();
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
        MOEKIT_FAIL(where, ": weight_map['", tensor,
                    "']: expected a plain file name inside the directory, got '", name, "'");
      auto it = file_index.find(name);
      if (it == file_index.end()) {
        it = file_index.emplace(name, c.files_.size()).first;
        c.files_.push_back(SafetensorsFile::open((fs::path(path) / name).string()));
      }
      if (!c.files_[it->second].contains(tensor))
        MOEKIT_FAIL(where, ": weight_map['", tensor, "']: expected the tensor in '", name,
                    "', got a file without it");
      c.where_.emplace(tensor, it->second);
    }
    return c;
  }
  std::vector<fs::path> shards;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") shards.push_back(e.path());
  std::sort(shards.begin(), shards.end());
  if (shards.empty())
    MOEKIT_FAIL("checkpoint '", path, "': expected *.safetensors files or ",
                "model.safetensors.index.json, got none");
  for (const auto& s : shards) {
    c.files_.push_back(SafetensorsFile::open(s.string()));
    for (const auto& t : c.files_.back().tensors()) {
      auto [it, inserted] = c.where_.emplace(t.name, c.files_.size() - 1);
      if (!inserted)
        MOEKIT_FAIL("checkpoint '", path, "': tensor '", t.name, "': expected in one file, got '",
                    c.files_[it->second].path(), "' and '", s.string(), "'");
    }
  }
  return c;
}

bool Checkpoint::contains(std::string_view name) const { return where_.find(name) != where_.end(); }

const SafetensorsFile& Checkpoint::file_of(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end()) MOEKIT_FAIL("checkpoint '", path_, "': tensor '", name, "': not found");
  return files_[it->second];
}

const SafetensorsTensorInfo& Checkpoint::info(std::string_view name) const {
  return file_of(name).info(name);
}

TensorView Checkpoint::view(std::string_view name) const { return file_of(name).view(name); }

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

}  // namespace moekit::io
