// Exhaustive check of the fast device element codecs against the normative scalar codecs.
#pragma once

#include <cstdint>

namespace moekit::cuda_test {

enum class FastCodec { kE4M3, kE2M1, kMxScale, kNvfp4Scale };

struct FastCodecCheck {
  bool launched = false;
  std::uint64_t checked = 0;  // inputs compared (must be 2^32)
  std::uint64_t mismatches = 0;
  std::uint32_t first_mismatch = 0xFFFFFFFFu;  // the smallest differing fp32 bit pattern
};

// Runs all 2^32 fp32 bit patterns through the fast and the normative codec on the current device.
FastCodecCheck check_fast_codec_all_inputs(FastCodec codec);

// Entries where the kernels' computed e2m1-of-e4m3 table (fill_e2m1_table, one CTA of `threads`)
// differs from the constant table kE2m1OfE4m3 that the e2m1_code check covers; -1: launch failed.
int e2m1_table_mismatches(int threads);

}  // namespace moekit::cuda_test
