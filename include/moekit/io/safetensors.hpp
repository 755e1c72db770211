// Safetensors files: a reader (memory-mapped, zero-copy views) and a writer.
//
// File layout (huggingface/safetensors, docs "format"): an 8-byte little-endian u64 N, N bytes of
// UTF-8 JSON (the header, possibly padded with trailing spaces), then the data buffer. The header
// is an object: "__metadata__" -> {string: string} (optional), and for every tensor
//   name -> {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
// with offsets relative to the start of the data buffer. The tensors must tile the buffer exactly
// (no holes, no overlaps; empty tensors have begin == end).
//
// Files are untrusted input: every violation (short file, header length beyond the file or above
// kMaxHeaderBytes, invalid JSON, duplicate keys, missing/ill-typed fields, unknown dtype, shape
// product overflow, byte count != numel * dtype size, reversed / out-of-range / overlapping /
// non-covering offsets) throws moekit::Error naming the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moekit/core/tensor.hpp"

namespace moekit::io {

// The reader refuses headers larger than this (the Rust reference implementation uses 100 MB too).
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// Safetensors dtype name -> moekit DType. F8_E4M3 -> kE4M3, F8_E8M0 -> kE8M0, U8 -> kU8,
// F4 -> kE2M1x2 (two values per byte; the view's last dim is halved). Returns nullopt for dtypes
// that safetensors defines but moekit has no type for (BOOL, I8, I16, U16, U32, U64, F64,
// F8_E5M2, F6_*); those tensors are still validated and readable as raw bytes.
std::optional<DType> dtype_from_safetensors(std::string_view name);
// moekit DType -> the name the writer uses: f32 F32, f16 F16, bf16 BF16, e4m3 F8_E4M3,
// e8m0 F8_E8M0, u8 U8, i32 I32, i64 I64, and e2m1x2 U8 (packed bytes, as ModelOpt, compressed-
// tensors and gpt-oss checkpoints store FP4; the shape stays in bytes).
std::string_view safetensors_dtype_name(DType t);

// One tensor as described by the header.
struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;                // as written: "BF16", "F8_E4M3", ...
  std::vector<std::int64_t> shape;  // as written (F4 counts 4-bit elements)
  std::uint64_t begin = 0;          // byte offsets into the data buffer
  std::uint64_t end = 0;
  std::uint64_t nbytes() const { return end - begin; }
};

// A parsed, validated safetensors file over a read-only memory mapping (or an owned byte buffer).
// Cheap to copy (shared ownership of the mapping); views stay valid while any copy lives.
// The mapped memory is READ-ONLY: TensorView::data is non-const only because TensorView has no
// const flavour; writing through it crashes. Tensor data is not necessarily aligned to its dtype
// (the format does not pad between tensors): read through memcpy or to_tensor() when unsure.
// The file must not be truncated while mapped (the OS would raise SIGBUS).
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  static SafetensorsFile open(const std::string& path);
  // Parses a whole file image held in memory (tests, fuzzing); `name` is used in error messages.
  static SafetensorsFile from_bytes(std::vector<std::uint8_t> bytes, std::string name = "<memory>");

  bool is_open() const { return impl_ != nullptr; }
  const std::string& path() const;
  const std::map<std::string, std::string>& metadata() const;
  // Every tensor, in data-buffer order.
  const std::vector<SafetensorsTensorInfo>& tensors() const;
  std::vector<std::string> names() const;  // in data-buffer order
  bool contains(std::string_view name) const;
  const SafetensorsTensorInfo* find(std::string_view name) const;  // nullptr when absent
  const SafetensorsTensorInfo& info(std::string_view name) const;  // throws naming file + tensor

  // Zero-copy view into the mapping (see the class comment). Throws for dtypes without a moekit
  // DType and for F4 tensors whose last dim is odd.
  TensorView view(std::string_view name) const;
  // The tensor's raw bytes, any dtype.
  std::span<const std::uint8_t> bytes(std::string_view name) const;
  // An owning, aligned host copy of view(name).
  Tensor to_tensor(std::string_view name) const;

  std::uint64_t header_bytes() const;  // N
  std::uint64_t file_bytes() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Data order of the tensors in a written file. kAlignment sorts by dtype size (largest first),
// then by name, which keeps every tensor aligned to its element size (what the Python writer
// does); kName sorts by name; kInsertion keeps the caller's order.
enum class TensorOrder : std::uint8_t { kAlignment, kName, kInsertion };

struct SafetensorsWriteOptions {
  TensorOrder order = TensorOrder::kAlignment;
  std::map<std::string, std::string> metadata;  // written as "__metadata__" when non-empty
};

// A tensor to write: host, contiguous. `dtype` overrides the name written for the view's DType
// (e.g. "U8" for e8m0 scales in a gpt-oss checkpoint); it must have the same element size.
struct NamedTensor {
  std::string name;
  TensorView view;
  std::string dtype = {};
};

// The whole file image (header padded with spaces so that the data buffer starts at a multiple
// of 8). Names must be unique, non-empty and not "__metadata__"; errors name the tensor.
std::vector<std::uint8_t> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                                const SafetensorsWriteOptions& options = {});
// Writes the file under a hidden name in the same directory and renames it into place
// (replacing an existing file; never leaving a partial one: see staged_output.hpp).
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const SafetensorsWriteOptions& options = {});

}  // namespace moekit::io
