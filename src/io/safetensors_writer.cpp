// Safetensors writer: header with 8-byte aligned padding, chosen data order, staged file write.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "io/json_util.hpp"
#include "io/safetensors_dtypes.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/safetensors.hpp"
#include "moekit/io/staged_output.hpp"

namespace moekit::io {

namespace {

template <typename E, typename A>
void check(bool cond, const std::string& argument, const E& expected, const A& actual) {
  if (!cond) throw_arg_error("write_safetensors", argument, expected, actual);
}

struct Planned {
  const NamedTensor* tensor;
  std::string dtype;
  std::size_t elem_bytes;
};

// Validates the tensors, fixes their data order and builds the padded header. Returns the header
// bytes (without the 8-byte length) and the planned order.
std::string plan(const std::vector<NamedTensor>& tensors, const SafetensorsWriteOptions& options,
                 std::vector<Planned>& order) {
  std::set<std::string, std::less<>> seen;
  order.clear();
  for (const auto& t : tensors) {
    const std::string arg = "tensor '" + t.name + "'";
    check(!t.name.empty(), "tensor name", "non-empty", "\"\"");
    check(t.name != "__metadata__", "tensor name", "not __metadata__", t.name);
    check(seen.insert(t.name).second, arg, "a unique name", "a duplicate");
    check(t.view.device.is_host(), arg + " device", "host", t.view.device.str());
    check(t.view.is_contiguous(), arg, "contiguous", t.view.str());
    check(t.view.data != nullptr || t.view.nbytes() == 0, arg + " data", "non-null", "nullptr");
    std::string dtype =
        t.dtype.empty() ? std::string(safetensors_dtype_name(t.view.dtype)) : t.dtype;
    const detail::StDtype* st = detail::find_st_dtype(dtype);
    check(st != nullptr, arg + " dtype", detail::known_st_dtype_names(), dtype);
    check(st->bits == 8 * static_cast<int>(dtype_size(t.view.dtype)), arg + " dtype",
          "a safetensors dtype of the view's element size (" +
              std::to_string(dtype_size(t.view.dtype)) + " bytes)",
          dtype);
    order.push_back({&t, std::move(dtype), dtype_size(t.view.dtype)});
  }
  if (options.order == TensorOrder::kAlignment) {
    std::stable_sort(order.begin(), order.end(), [](const Planned& a, const Planned& b) {
      return a.elem_bytes != b.elem_bytes ? a.elem_bytes > b.elem_bytes
                                          : a.tensor->name < b.tensor->name;
    });
  } else if (options.order == TensorOrder::kName) {
    std::stable_sort(order.begin(), order.end(), [](const Planned& a, const Planned& b) {
      return a.tensor->name < b.tensor->name;
    });
  }

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!options.metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : options.metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const auto& p : order) {
    const TensorView& v = p.tensor->view;
    std::uint64_t nbytes = v.nbytes();
    header[p.tensor->name] = {
        {"dtype", p.dtype}, {"shape", v.shape.vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    MOEKIT_FAIL("serialize_safetensors: header: expected valid UTF-8 names and metadata, got ",
                e.what());
  }
  // Pad with spaces so that the data buffer (at 8 + N) starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void put_u64_le(std::uint8_t* dst, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace

std::vector<std::uint8_t> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                                const SafetensorsWriteOptions& options) {
  std::vector<Planned> order;
  std::string header = plan(tensors, options, order);
  std::size_t total = 8 + header.size();
  for (const auto& p : order) total += p.tensor->view.nbytes();
  std::vector<std::uint8_t> out(total);
  put_u64_le(out.data(), header.size());
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::size_t pos = 8 + header.size();
  for (const auto& p : order) {
    std::size_t n = p.tensor->view.nbytes();
    if (n) std::memcpy(out.data() + pos, p.tensor->view.data, n);
    pos += n;
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const SafetensorsWriteOptions& options) {
  std::vector<Planned> order;
  std::string header = plan(tensors, options, order);
  // Written under a hidden sibling name and renamed into place: readers never see a partial
  // file, and a failure or an interruption (remove_uncommitted_outputs) leaves none behind.
  StagedOutput staged(path, OutputKind::kFile,
                      {.overwrite = true, .argument = "write_safetensors: path"});
  const std::string& tmp = staged.staging_path();
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) MOEKIT_FAIL("write_safetensors: cannot create '", tmp, "': ", std::strerror(errno));
  auto put = [&](const void* data, std::size_t n) {
    if (n && std::fwrite(data, 1, n, f) != n) {
      int err = errno;
      std::fclose(f);
      MOEKIT_FAIL("write_safetensors: writing '", tmp, "' failed: ", std::strerror(err));
    }
  };
  std::uint8_t len[8];
  put_u64_le(len, header.size());
  put(len, 8);
  put(header.data(), header.size());
  for (const auto& p : order) put(p.tensor->view.data, p.tensor->view.nbytes());
  if (std::fclose(f) != 0)
    MOEKIT_FAIL("write_safetensors: closing '", tmp, "' failed: ", std::strerror(errno));
  staged.commit();
}

}  // namespace moekit::io
