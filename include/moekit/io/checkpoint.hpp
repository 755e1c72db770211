// A Hugging Face checkpoint directory: one or more safetensors files behind one name space.
//
// Resolution of `open(path)`:
//   - path is a .safetensors file: that file alone;
//   - path is a directory with model.safetensors.index.json: the shards named by its "weight_map"
//     ({tensor name: file name}); every listed tensor must exist in its shard, file names must
//     be plain names inside the directory (no '/', no "..");
//   - otherwise a directory's *.safetensors files, in name order (a tensor name in two files is
//     an error).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moekit/io/safetensors.hpp"

namespace moekit::io {

class Checkpoint {
 public:
  Checkpoint() = default;
  static Checkpoint open(const std::string& path);

  const std::string& path() const { return path_; }  // as given
  const std::string& dir() const { return dir_; }    // the directory holding config.json
  const std::vector<SafetensorsFile>& files() const { return files_; }

  bool contains(std::string_view name) const;
  // The file holding `name`; throws "checkpoint '<path>': tensor '<name>': not found".
  const SafetensorsFile& file_of(std::string_view name) const;
  const SafetensorsTensorInfo& info(std::string_view name) const;
  TensorView view(std::string_view name) const;  // zero-copy, read-only (see SafetensorsFile)
  std::vector<std::string> names() const;        // sorted

 private:
  std::string path_, dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t, std::less<>> where_;  // tensor -> index into files_
};

}  // namespace moekit::io
