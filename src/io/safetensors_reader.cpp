// Safetensors reader: header validation (the file is untrusted) and zero-copy views.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "io/json_util.hpp"
#include "io/safetensors_dtypes.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/safetensors.hpp"

namespace moekit::io {

namespace {

// A read-only mapping of a whole file, or an owned byte vector.
class ByteSource {
 public:
  ByteSource() = default;
  explicit ByteSource(std::vector<std::uint8_t> bytes) : owned_(std::move(bytes)) {
    data_ = owned_.data();
    size_ = owned_.size();
  }
  static std::unique_ptr<ByteSource> map_file(const std::string& path) {
    auto src = std::make_unique<ByteSource>();
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) MOEKIT_FAIL("safetensors '", path, "': cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      MOEKIT_FAIL("safetensors '", path, "': not a regular file");
    }
    src->size_ = static_cast<std::size_t>(st.st_size);
    if (src->size_ > 0) {
      void* p = ::mmap(nullptr, src->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        MOEKIT_FAIL("safetensors '", path, "': mmap of ", src->size_,
                    " bytes failed: ", std::strerror(err));
      }
      src->mapped_ = p;
      src->data_ = static_cast<const std::uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
    return src;
  }
  ~ByteSource() {
    if (mapped_) ::munmap(mapped_, size_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::vector<std::uint8_t> owned_;
  void* mapped_ = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

std::string sq(const std::string& s) { return "'" + s + "'"; }

}  // namespace

struct SafetensorsFile::Impl {
  std::string path;
  std::unique_ptr<ByteSource> source;
  std::uint64_t header_bytes = 0;
  std::map<std::string, std::string> metadata;
  std::vector<SafetensorsTensorInfo> tensors;  // data-buffer order
  std::map<std::string, std::size_t, std::less<>> index;

  const std::uint8_t* data_begin() const { return source->data() + 8 + header_bytes; }
  [[noreturn]] void fail(const std::string& field, const std::string& expected,
                         const std::string& actual) const {
    throw_arg_error(("safetensors " + sq(path)).c_str(), field, expected, actual);
  }
  [[noreturn]] void fail_tensor(const std::string& tensor, const std::string& field,
                                const std::string& expected, const std::string& actual) const {
    throw_arg_error(("safetensors " + sq(path)).c_str(), "tensor " + sq(tensor) + " " + field,
                    expected, actual);
  }
  void parse();
  void parse_entry(const std::string& name, const nlohmann::json& entry,
                   std::uint64_t buffer_bytes);
};

void SafetensorsFile::Impl::parse() {
  const std::string where = "safetensors " + sq(path);
  const std::uint64_t size = source->size();
  if (size < 8)
    fail("file size", ">= 8 bytes (the header length)", std::to_string(size) + " bytes");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | source->data()[i];  // little-endian u64
  if (n > kMaxHeaderBytes)
    fail("header length", "<= " + std::to_string(kMaxHeaderBytes), std::to_string(n));
  if (n > size - 8)
    fail("header length", "<= " + std::to_string(size - 8) + " (file size - 8)", std::to_string(n));
  if (n < 2) fail("header length", ">= 2 (a JSON object)", std::to_string(n));
  header_bytes = n;
  std::string_view text(reinterpret_cast<const char*>(source->data() + 8), n);
  if (text.front() != '{')
    fail("header", "a JSON object starting with '{'",
         "first byte " + std::to_string(static_cast<unsigned char>(text.front())));
  nlohmann::json header = detail::parse_json_strict(text, where + ": header");
  if (!header.is_object()) fail("header", "a JSON object", detail::json_excerpt(header));

  const std::uint64_t buffer_bytes = size - 8 - n;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        fail("__metadata__", "an object of strings", detail::json_excerpt(value));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) fail("__metadata__ " + sq(mk), "a string", detail::json_excerpt(mv));
        metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    parse_entry(key, value, buffer_bytes);
  }

  // The tensors must tile [0, buffer_bytes): sort by (begin, end) so empty tensors come first.
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  std::string previous = "(start of the data buffer)";
  for (const auto& t : tensors) {
    if (t.begin < cursor)
      fail_tensor(t.name, "data_offsets",
                  "no overlap with " + previous + " (begin >= " + std::to_string(cursor) + ")",
                  "begin " + std::to_string(t.begin));
    if (t.begin > cursor)
      fail_tensor(t.name, "data_offsets",
                  "to start at " + std::to_string(cursor) + " (no hole after " + previous + ")",
                  "begin " + std::to_string(t.begin));
    cursor = t.end;
    previous = sq(t.name);
  }
  if (cursor != buffer_bytes)
    fail("data buffer", "fully covered by tensors (" + std::to_string(buffer_bytes) + " bytes)",
         std::to_string(cursor) + " bytes covered");
  for (std::size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
}

void SafetensorsFile::Impl::parse_entry(const std::string& name, const nlohmann::json& entry,
                                        std::uint64_t buffer_bytes) {
  if (!entry.is_object()) fail_tensor(name, "entry", "an object", detail::json_excerpt(entry));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) fail_tensor(name, field, "present", "missing");
  }
  SafetensorsTensorInfo t;
  t.name = name;

  const auto& dtype = entry.at("dtype");
  if (!dtype.is_string()) fail_tensor(name, "dtype", "a string", detail::json_excerpt(dtype));
  t.dtype = dtype.get<std::string>();
  const detail::StDtype* st = detail::find_st_dtype(t.dtype);
  if (!st) fail_tensor(name, "dtype", std::string(detail::known_st_dtype_names()), sq(t.dtype));

  const auto& shape = entry.at("shape");
  if (!shape.is_array()) fail_tensor(name, "shape", "an array", detail::json_excerpt(shape));
  // Bits, checked for overflow: numel * bits must fit in u64 with room to spare.
  std::uint64_t bits = st->bits;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto& d = shape[i];
    const std::string field = "shape[" + std::to_string(i) + "]";
    if (!d.is_number_integer()) fail_tensor(name, field, "an integer", detail::json_excerpt(d));
    if (d.is_number_unsigned()) {
      std::uint64_t v = d.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail_tensor(name, field, "<= 2^63-1", std::to_string(v));
      t.shape.push_back(static_cast<std::int64_t>(v));
    } else {
      std::int64_t v = d.get<std::int64_t>();
      if (v < 0) fail_tensor(name, field, ">= 0", std::to_string(v));
      t.shape.push_back(v);
    }
    if (__builtin_mul_overflow(bits, static_cast<std::uint64_t>(t.shape.back()), &bits))
      fail_tensor(name, "shape", "a product that fits in 64 bits", detail::json_excerpt(shape));
  }
  if (t.shape.size() > static_cast<std::size_t>(Shape::kMaxRank))
    fail_tensor(name, "shape", "rank <= " + std::to_string(Shape::kMaxRank),
                std::to_string(t.shape.size()));

  const auto& off = entry.at("data_offsets");
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    fail_tensor(name, "data_offsets", "[begin, end] (two non-negative integers)",
                detail::json_excerpt(off));
  t.begin = off[0].get<std::uint64_t>();
  t.end = off[1].get<std::uint64_t>();
  if (t.end < t.begin) fail_tensor(name, "data_offsets", "begin <= end", detail::json_excerpt(off));
  if (t.end > buffer_bytes)
    fail_tensor(name, "data_offsets",
                "end <= " + std::to_string(buffer_bytes) + " (the data buffer size)",
                detail::json_excerpt(off));
  if (bits % 8 != 0)
    fail_tensor(name, "shape", "a whole number of bytes for dtype " + t.dtype,
                detail::json_excerpt(shape));
  if (bits / 8 != t.nbytes())
    fail_tensor(name, "byte count", std::to_string(bits / 8) + " (numel x " + t.dtype + " size)",
                std::to_string(t.nbytes()) + " (data_offsets " + detail::json_excerpt(off) + ")");
  for (const auto& [k, v] : entry.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      fail_tensor(name, "entry", "only dtype, shape and data_offsets", "key " + sq(k));
  }
  tensors.push_back(std::move(t));
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->source = ByteSource::map_file(path);
  impl->parse();
  SafetensorsFile f;
  f.impl_ = std::move(impl);
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::uint8_t> bytes, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->path = std::move(name);
  impl->source = std::make_unique<ByteSource>(std::move(bytes));
  impl->parse();
  SafetensorsFile f;
  f.impl_ = std::move(impl);
  return f;
}

template <typename P>
static const auto& checked(const P& p) {
  MOEKIT_CHECK(p != nullptr, "SafetensorsFile: no file is open");
  return *p;
}

const std::string& SafetensorsFile::path() const { return checked(impl_).path; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return checked(impl_).metadata;
}
const std::vector<SafetensorsTensorInfo>& SafetensorsFile::tensors() const {
  return checked(impl_).tensors;
}
std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& t : tensors()) out.push_back(t.name);
  return out;
}
std::uint64_t SafetensorsFile::header_bytes() const { return checked(impl_).header_bytes; }
std::uint64_t SafetensorsFile::file_bytes() const { return checked(impl_).source->size(); }

const SafetensorsTensorInfo* SafetensorsFile::find(std::string_view name) const {
  const Impl& impl = checked(impl_);
  auto it = impl.index.find(name);
  return it == impl.index.end() ? nullptr : &impl.tensors[it->second];
}

bool SafetensorsFile::contains(std::string_view name) const { return find(name) != nullptr; }

const SafetensorsTensorInfo& SafetensorsFile::info(std::string_view name) const {
  const SafetensorsTensorInfo* t = find(name);
  if (!t)
    MOEKIT_FAIL("safetensors '", path(), "': tensor '", name, "': not found (the file has ",
                tensors().size(), " tensors)");
  return *t;
}

std::span<const std::uint8_t> SafetensorsFile::bytes(std::string_view name) const {
  const SafetensorsTensorInfo& t = info(name);
  return {impl_->data_begin() + t.begin, static_cast<std::size_t>(t.nbytes())};
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const SafetensorsTensorInfo& t = info(name);
  std::optional<DType> dt = dtype_from_safetensors(t.dtype);
  if (!dt)
    impl_->fail_tensor(
        t.name, "dtype",
        "one with a moekit DType (" + std::string(detail::supported_st_dtype_names()) + ")",
        t.dtype);
  std::vector<std::int64_t> dims = t.shape;
  if (*dt == DType::kE2M1x2) {  // F4: shape in elements, moekit shapes packed FP4 in bytes
    if (dims.empty() || dims.back() % 2 != 0)
      impl_->fail_tensor(t.name, "shape", "an even last dim for F4 (two values per byte)",
                         Shape(dims).str());
    dims.back() /= 2;
  }
  // const_cast: the mapping is read-only; see the class comment.
  auto* data = const_cast<std::uint8_t*>(impl_->data_begin() + t.begin);
  return TensorView(data, *dt, Shape(dims));
}

Tensor SafetensorsFile::to_tensor(std::string_view name) const {
  TensorView v = view(name);
  Tensor out(v.dtype, v.shape);
  if (v.nbytes()) std::memcpy(out.data(), v.data, v.nbytes());
  return out;
}

}  // namespace moekit::io
