// Resource limits up front: a command adds up the host (and device) memory its arguments will
// need (weights, activations, workspace) before allocating any of it, and refuses with an error
// naming the flags, the bytes needed and the bytes available, instead of being killed by the
// kernel's OOM killer (or failing deep inside with "allocation of N bytes failed").
//
// Available host memory: the smallest of MemAvailable (/proc/meminfo), the cgroup's limit minus
// its usage (v2 memory.max / v1 memory.limit_in_bytes) and RLIMIT_AS minus the current virtual
// size. Available device memory: cudaMemGetInfo's free bytes (device_runtime shim).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moekit::app {

struct MemoryAvailable {
  double bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo", "cgroup memory.max - memory.current"...
};

MemoryAvailable host_memory_available();
// Free memory of CUDA device `device`; nullopt when there is none (or the build has no CUDA).
std::optional<MemoryAvailable> device_memory_available(int device);

// One part of a command's need, and the flags (with their values) that size it.
struct MemoryItem {
  std::string what;   // "weights", "activations and float64 check", "workspace"
  double bytes = 0;
  std::string flags;  // "--tokens 20000000", "--preset mixtral-8x7b --hidden 4096"
};

struct MemoryNeed {
  std::vector<MemoryItem> items;
  double total() const;
};

// Throws moekit::Error (exit 1: the arguments ask for more than the machine has) when the need
// exceeds what is available:
//   "run: --tokens 20000000 needs 442691813376 bytes (412.3 GiB) of host memory (activations and
//    float64 check 412.2 GiB [--tokens 20000000], weights 0.1 GiB [--preset tiny]); 22.6 GiB
//    (24264589312 bytes) available (MemAvailable in /proc/meminfo)"
// The lead flags are those of the largest item.
void check_host_memory(const std::string& command, const MemoryNeed& need);
void check_host_memory(const std::string& command, const MemoryNeed& need,
                       const MemoryAvailable& available);  // for tests
// Same for device `device` (no check when there is no device: the backend choice reports that).
void check_device_memory(const std::string& command, const MemoryNeed& need, int device);

std::string gib(double bytes);  // "412.3 GiB"

}  // namespace moekit::app
