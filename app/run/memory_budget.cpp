// Host / device memory available and the up-front checks (memory_budget.hpp).
#include "run/memory_budget.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/device_runtime.hpp"
#include "moekit/core/error.hpp"

namespace moekit::app {

namespace {

// The first number after `key` in a "Key:   123 kB" file, in bytes (0 when absent).
double proc_kb(const char* path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream is(line.substr(key.size()));
    double kb = 0;
    is >> kb;
    return kb * 1024.0;
  }
  return 0;
}

// A file holding one number ("max" or a huge value means no limit): nullopt when absent.
std::optional<double> read_number(const std::string& path) {
  std::ifstream f(path);
  std::string text;
  if (!(f >> text) || text == "max") return std::nullopt;
  try {
    const double v = std::stod(text);
    return v >= 9.0e18 ? std::nullopt : std::optional<double>(v);  // v1 "unlimited"
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// This process's cgroup path for a controller ("" = v2's unified hierarchy).
std::string cgroup_path(const std::string& controller) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (controllers == controller) return line.substr(b + 1);
  }
  return {};
}

void consider(MemoryAvailable& best, double bytes, const std::string& source) {
  if (bytes < best.bytes) best = {std::max(bytes, 0.0), source};
}

void cgroup_limits(MemoryAvailable& best) {
  // v2: the process's own cgroup, then the root of the mount (a container's view).
  const std::vector<std::string> v2_dirs = {"/sys/fs/cgroup" + cgroup_path(""), "/sys/fs/cgroup"};
  for (const std::string& dir : v2_dirs) {
    const auto limit = read_number(dir + "/memory.max");
    const auto used = read_number(dir + "/memory.current");
    if (limit && used) {
      consider(best, *limit - *used, "cgroup " + dir + "/memory.max - memory.current");
      break;
    }
  }
  const std::string v1 = "/sys/fs/cgroup/memory";
  const std::vector<std::string> v1_dirs = {v1 + cgroup_path("memory"), v1};
  for (const std::string& dir : v1_dirs) {
    const auto limit = read_number(dir + "/memory.limit_in_bytes");
    const auto used = read_number(dir + "/memory.usage_in_bytes");
    if (limit && used) {
      consider(best, *limit - *used, "cgroup " + dir + "/memory.limit_in_bytes - usage");
      break;
    }
  }
}

std::string bytes_and_gib(double bytes) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.0f bytes (%s)", bytes, gib(bytes).c_str());
  return buf;
}

void check(const std::string& command, const MemoryNeed& need, const MemoryAvailable& available,
           const char* kind) {
  const double total = need.total();
  if (total <= available.bytes) return;
  std::vector<MemoryItem> items = need.items;
  std::stable_sort(items.begin(), items.end(),
                   [](const MemoryItem& a, const MemoryItem& b) { return a.bytes > b.bytes; });
  std::string parts;
  for (const MemoryItem& i : items) {
    if (i.bytes <= 0) continue;
    parts += (parts.empty() ? "" : ", ") + i.what + " " + gib(i.bytes);
    if (!i.flags.empty()) parts += " [" + i.flags + "]";
  }
  const std::string lead = items.empty() || items.front().flags.empty() ? std::string("this job")
                                                                         : items.front().flags;
  MOEKIT_FAIL(command, ": ", lead, " needs ", bytes_and_gib(total), " of ", kind, " memory (",
              parts, "); ", bytes_and_gib(available.bytes), " available (", available.source,
              ")");
}

}  // namespace

double MemoryNeed::total() const {
  double t = 0;
  for (const MemoryItem& i : items) t += i.bytes;
  return t;
}

std::string gib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

MemoryAvailable host_memory_available() {
  MemoryAvailable best{1e300, "no limit found"};
  if (const double avail = proc_kb("/proc/meminfo", "MemAvailable:"); avail > 0)
    consider(best, avail, "MemAvailable in /proc/meminfo");
  cgroup_limits(best);
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    consider(best, double(as.rlim_cur) - proc_kb("/proc/self/status", "VmSize:"),
             "RLIMIT_AS (ulimit -v) minus this process's size");
  return best;
}

std::optional<MemoryAvailable> device_memory_available(int device) {
  namespace dr = device_runtime;
  if (!dr::compiled_with_cuda() || dr::device_count() <= device) return std::nullopt;
  const dr::MemoryInfo m = dr::memory_info(device);
  return MemoryAvailable{double(m.free_bytes),
                         "cudaMemGetInfo free on cuda:" + std::to_string(device)};
}

void check_host_memory(const std::string& command, const MemoryNeed& need,
                       const MemoryAvailable& available) {
  check(command, need, available, "host");
}

void check_host_memory(const std::string& command, const MemoryNeed& need) {
  check_host_memory(command, need, host_memory_available());
}

void check_device_memory(const std::string& command, const MemoryNeed& need, int device) {
  if (const auto available = device_memory_available(device))
    check(command, need, *available, "device");
}

}  // namespace moekit::app
