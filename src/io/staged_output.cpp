// Staged outputs (staged_output.hpp): checks, hidden staging siblings, atomic commit and the
// process-wide list of uncommitted staging paths.
#include "moekit/io/staged_output.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include "moekit/core/error.hpp"

namespace moekit::io {

namespace {

namespace fs = std::filesystem;

// Staging paths not yet committed or removed. The mutex also covers a whole commit, so that
// remove_uncommitted_outputs() sees either the staging path or the finished output.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& registry() {
  static std::set<std::string>* paths = new std::set<std::string>();  // outlives static dtors
  return *paths;
}

const char* kind_name(OutputKind k) { return k == OutputKind::kFile ? "a file" : "a directory"; }

[[noreturn]] void fail(const OutputPolicy& p, const std::string& path, const std::string& expected,
                       const std::string& got) {
  MOEKIT_FAIL(p.argument, " '", path, "': expected ", expected, ", got ", got);
}

// What exists at `path`, for messages: "a non-empty directory (3 entries: a, b, c)".
std::string describe_directory(const fs::path& path, std::size_t& entries, bool& has_subdirectory) {
  entries = 0;
  has_subdirectory = false;
  std::string names;
  for (const auto& e : fs::directory_iterator(path)) {
    if (entries < 3) names += (entries ? ", " : "") + e.path().filename().string();
    ++entries;
    std::error_code ec;
    if (e.symlink_status(ec).type() == fs::file_type::directory) has_subdirectory = true;
  }
  if (entries > 3) names += ", ...";
  return "a non-empty directory (" + std::to_string(entries) + " entries: " + names + ")";
}

std::string staging_name(const fs::path& path) {
  static std::atomic<unsigned> counter{0};
  std::string name = ".";  // built by appending (GCC 12's -Wrestrict misfires on "." + ...)
  name.append(path.filename().string());
  name.append(".moekit-partial-");
  name.append(std::to_string(::getpid()));
  name.append("-");
  name.append(std::to_string(counter++));
  return (path.parent_path() / name).string();
}

// Atomically exchanges two paths (Linux renameat2); false when the file system cannot.
bool exchange_paths(const std::string& a, const std::string& b) {
#ifdef RENAME_EXCHANGE
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  (void)a;
  (void)b;
  errno = ENOSYS;
  return false;
#endif
}

// "out/" names the directory "out" (the staging sibling and the rename need its name).
std::string without_trailing_separators(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

void check_output_path(const std::string& given, OutputKind kind, const OutputPolicy& policy) {
  MOEKIT_CHECK_ARG(!given.empty(), policy.argument, "a path", "\"\"");
  const std::string path = without_trailing_separators(given);
  const fs::path p(path);
  fs::path parent = p.parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    fail(policy, path, "a path in an existing directory",
         "no directory '" + parent.string() + "' (create it first)");
  if (p.filename().empty() || p.filename() == "." || p.filename() == "..")
    fail(policy, path, "a path that names " + std::string(kind_name(kind)), "'" + path + "'");
  const fs::file_status st = fs::symlink_status(p, ec);
  if (st.type() == fs::file_type::not_found) return;
  if (st.type() == fs::file_type::symlink)
    fail(policy, path, "a path that is not a symbolic link", "a symbolic link (give its target)");
  const bool want_dir = kind == OutputKind::kDirectory;
  if (want_dir && st.type() != fs::file_type::directory)
    fail(policy, path, "a directory (new or empty)",
         st.type() == fs::file_type::regular ? "an existing file" : "an existing non-directory");
  if (!want_dir && st.type() != fs::file_type::regular)
    fail(policy, path, "a file (new or empty)",
         st.type() == fs::file_type::directory ? "an existing directory"
                                               : "an existing non-regular file");
  if (want_dir) {
    std::size_t entries = 0;
    bool has_subdirectory = false;
    const std::string what = fs::is_empty(p) ? std::string()
                                             : describe_directory(p, entries, has_subdirectory);
    if (entries == 0) return;
    if (!policy.overwrite)
      fail(policy, path, "a new or empty directory (--overwrite replaces an existing one)", what);
    if (has_subdirectory)
      fail(policy, path,
           "a directory without subdirectories to replace (--overwrite replaces a previous "
           "output, which is flat; remove a directory tree yourself)",
           what);
    return;
  }
  if (fs::file_size(p) > 0 && !policy.overwrite)
    fail(policy, path, "a new or empty file (--overwrite replaces an existing one)",
         "an existing file of " + std::to_string(fs::file_size(p)) + " bytes");
}

StagedOutput::StagedOutput(std::string path, OutputKind kind, OutputPolicy policy)
    : path_(without_trailing_separators(std::move(path))),
      kind_(kind),
      policy_(std::move(policy)) {
  check_output_path(path_, kind_, policy_);
  std::lock_guard<std::mutex> lock(registry_mutex());
  staging_path_ = staging_name(fs::path(path_));
  registry().insert(staging_path_);  // listed before it exists: an interruption removes it
  if (kind_ == OutputKind::kDirectory) {
    std::error_code ec;
    if (!fs::create_directory(staging_path_, ec)) {
      registry().erase(staging_path_);
      MOEKIT_FAIL(policy_.argument, " '", path_, "': cannot create the directory '", staging_path_,
                  "' next to it: ", ec ? ec.message() : "it already exists");
    }
  }
}

StagedOutput::~StagedOutput() {
  if (committed_) return;
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::error_code ec;
  fs::remove_all(staging_path_, ec);
  registry().erase(staging_path_);
}

void StagedOutput::commit() {
  MOEKIT_CHECK(!committed_, "StagedOutput::commit: '", path_, "' was already committed");
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::error_code ec;
  const bool exists = fs::symlink_status(path_, ec).type() != fs::file_type::not_found;
  // Re-checked under the lock: what appeared at path() since the start must be replaceable.
  if (exists) check_output_path(path_, kind_, policy_);
  if (exists && kind_ == OutputKind::kDirectory) {
    if (exchange_paths(staging_path_, path_)) {
      fs::remove_all(staging_path_, ec);  // now the old output
    } else {
      // No atomic exchange here: move the old output aside, then the new one in.
      const std::string old = staging_name(fs::path(path_));
      if (std::rename(path_.c_str(), old.c_str()) != 0)
        MOEKIT_FAIL(policy_.argument, " '", path_, "': cannot move the old output aside: ",
                    std::strerror(errno));
      if (std::rename(staging_path_.c_str(), path_.c_str()) != 0) {
        const int err = errno;
        (void)std::rename(old.c_str(), path_.c_str());
        MOEKIT_FAIL(policy_.argument, " '", path_, "': cannot rename '", staging_path_,
                    "' into place: ", std::strerror(err));
      }
      fs::remove_all(old, ec);
    }
  } else if (std::rename(staging_path_.c_str(), path_.c_str()) != 0) {
    MOEKIT_FAIL(policy_.argument, " '", path_, "': cannot rename '", staging_path_,
                "' into place: ", std::strerror(errno));
  }
  registry().erase(staging_path_);
  committed_ = true;
}

void remove_uncommitted_outputs() noexcept {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const std::string& p : registry()) {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  registry().clear();
}

}  // namespace moekit::io
