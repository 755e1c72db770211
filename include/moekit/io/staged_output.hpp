// Outputs that lose nothing: a file or directory is written under a hidden sibling name and
// renamed into place only once it is complete, so a failure or an interruption leaves neither a
// partial output nor an empty directory, and an existing output is replaced only when allowed.
//
//   io::StagedOutput out(path, io::OutputKind::kDirectory, {.overwrite = false, .argument = "OUT"});
//   write_everything_into(out.staging_path());
//   out.commit();  // not reached on an exception: the destructor removes the staging path
//
// The rules (check_output_path, also called by the constructor):
//   - the parent directory must exist; `path` must not be a symbolic link;
//   - `path` may not exist, or be an empty file / empty directory of the right kind;
//   - an existing non-empty one is replaced only with `overwrite`, and a directory only when it
//     holds no subdirectory (a previous checkpoint is flat; a tree is more likely the user's);
//   - a path of the other kind (a file where a directory is written, or the reverse) is an error.
// Errors are moekit::Error naming `argument`, what was expected and what was found.
//
// Interruptions: every staging path of the process is listed until it is committed or removed;
// remove_uncommitted_outputs() deletes them (the CLI calls it from its signal-watching thread
// before exiting on SIGINT / SIGTERM). A commit and that removal never interleave.
#pragma once

#include <string>

namespace moekit::io {

enum class OutputKind { kFile, kDirectory };

struct OutputPolicy {
  bool overwrite = false;           // replace an existing non-empty output of the right kind
  std::string argument = "output";  // how errors name the path: "--output", "output_dir", ...
};

void check_output_path(const std::string& path, OutputKind kind, const OutputPolicy& policy);

class StagedOutput {
 public:
  // check_output_path, then reserves the staging path (and creates it for a directory).
  StagedOutput(std::string path, OutputKind kind, OutputPolicy policy);
  ~StagedOutput();  // not committed: removes the staging path and whatever was written there
  StagedOutput(const StagedOutput&) = delete;
  StagedOutput& operator=(const StagedOutput&) = delete;

  const std::string& path() const { return path_; }                   // the final path
  const std::string& staging_path() const { return staging_path_; }  // write here
  // Renames the staging path to path(). An existing output (allowed by the policy) is swapped
  // out atomically and then deleted. Throws moekit::Error if the rename fails (the staging path
  // is then removed by the destructor).
  void commit();

 private:
  std::string path_, staging_path_;
  OutputKind kind_;
  OutputPolicy policy_;
  bool committed_ = false;
};

// Removes every staging path of this process that was neither committed nor removed yet.
// Not async-signal-safe: call it from a thread, not from a signal handler.
void remove_uncommitted_outputs() noexcept;

}  // namespace moekit::io
