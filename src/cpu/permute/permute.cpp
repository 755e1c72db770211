// CPU reference of token permutation (include/moekit/permute/permute.hpp is the contract).
#include "moekit/permute/permute.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit {
namespace {

void check_i32(const TensorView& t, const char* name, int rank) {
  MOEKIT_CHECK_ARG(t.defined(), name, "a tensor", "absent");
  MOEKIT_CHECK_ARG(t.dtype == DType::kI32, std::string(name) + " dtype", "i32",
                   dtype_name(t.dtype));
  MOEKIT_CHECK_ARG(t.rank() == rank, std::string(name) + " rank", rank, t.rank());
  MOEKIT_CHECK_ARG(t.device.is_host(), std::string(name) + " device", "host", t.device.str());
  MOEKIT_CHECK_ARG(t.is_contiguous(), std::string(name), "contiguous", "strided");
}

// Local expert of every assignment (-1 = dropped), validating ids and the map.
std::vector<int> local_experts(const TensorView& topk_ids, const TensorView& expert_map,
                               int num_local_experts) {
  check_i32(topk_ids, "topk_ids", 2);
  MOEKIT_CHECK_ARG(num_local_experts >= 1, "num_local_experts", ">= 1", num_local_experts);
  std::int64_t num_global = num_local_experts;
  const std::int32_t* map = nullptr;
  if (expert_map.defined()) {
    check_i32(expert_map, "expert_map", 1);
    num_global = expert_map.size(0);
    map = expert_map.ptr<const std::int32_t>();
    std::vector<int> seen(static_cast<std::size_t>(num_local_experts), 0);
    for (std::int64_t g = 0; g < num_global; ++g) {
      const int l = map[g];
      MOEKIT_CHECK_ARG(l >= -1 && l < num_local_experts, "expert_map[" + std::to_string(g) + "]",
                       "-1 or a local id in [0, " + std::to_string(num_local_experts) + ")", l);
      if (l >= 0) {
        MOEKIT_CHECK_ARG(seen[static_cast<std::size_t>(l)] == 0,
                         "expert_map[" + std::to_string(g) + "]",
                         "a local id not used by another global expert", l);
        seen[static_cast<std::size_t>(l)] = 1;
      }
    }
  }
  const std::int64_t n = topk_ids.numel();
  const auto* ids = topk_ids.ptr<const std::int32_t>();
  std::vector<int> local(static_cast<std::size_t>(n));
  for (std::int64_t a = 0; a < n; ++a) {
    const int g = ids[a];
    if (g < 0 || g >= num_global) {
      MOEKIT_CHECK_ARG(false,
                       "topk_ids[" + std::to_string(a / topk_ids.size(1)) + ", " +
                           std::to_string(a % topk_ids.size(1)) + "]",
                       "an expert id in [0, " + std::to_string(num_global) + ")", g);
    }
    local[static_cast<std::size_t>(a)] = map ? map[g] : g;
  }
  return local;
}

std::size_t row_bytes(const TensorView& t) {
  std::int64_t n = 1;
  for (int d = 1; d < t.rank(); ++d) n *= t.size(d);
  return static_cast<std::size_t>(n) * dtype_size(t.dtype);
}

void check_rows_compatible(const TensorView& src, const TensorView& out, int out_lead_dims,
                           const char* out_name) {
  MOEKIT_CHECK_ARG(src.defined() && src.rank() >= 1, "src", "a tensor of rank >= 1", src.str());
  MOEKIT_CHECK_ARG(src.is_contiguous() && src.device.is_host(), "src", "contiguous host tensor",
                   src.str());
  MOEKIT_CHECK_ARG(out.defined(), out_name, "a tensor", "absent");
  MOEKIT_CHECK_ARG(out.is_contiguous() && out.device.is_host(), out_name, "contiguous host tensor",
                   out.str());
  MOEKIT_CHECK_ARG(out.dtype == src.dtype, std::string(out_name) + " dtype", dtype_name(src.dtype),
                   dtype_name(out.dtype));
  MOEKIT_CHECK_ARG(out.rank() == src.rank() - 1 + out_lead_dims, std::string(out_name) + " rank",
                   src.rank() - 1 + out_lead_dims, out.rank());
  for (int d = 1; d < src.rank(); ++d) {
    MOEKIT_CHECK_ARG(out.size(d - 1 + out_lead_dims) == src.size(d),
                     std::string(out_name) + " shape", "trailing dims of src " + src.shape.str(),
                     out.shape.str());
  }
}

}  // namespace

std::int64_t permute_capacity(std::int64_t num_tokens, int top_k, int num_local_experts,
                              int block_size) {
  MOEKIT_CHECK_ARG(num_tokens >= 0, "num_tokens", ">= 0", num_tokens);
  MOEKIT_CHECK_ARG(top_k >= 1, "top_k", ">= 1", top_k);
  MOEKIT_CHECK_ARG(num_local_experts >= 1, "num_local_experts", ">= 1", num_local_experts);
  MOEKIT_CHECK_ARG(block_size >= 1, "block_size", ">= 1", block_size);
  return num_tokens * top_k + static_cast<std::int64_t>(num_local_experts) * (block_size - 1);
}

void compute_permutation(const TensorView& topk_ids, const TensorView& expert_map,
                         int num_local_experts, int block_size, const PermutationView& out) {
  MOEKIT_CHECK_ARG(block_size >= 1, "block_size", ">= 1", block_size);
  const std::vector<int> local = local_experts(topk_ids, expert_map, num_local_experts);
  const std::int64_t m = topk_ids.size(0);
  const int k = static_cast<int>(topk_ids.size(1));
  check_i32(out.expert_counts, "expert_counts", 1);
  check_i32(out.expert_offsets, "expert_offsets", 1);
  check_i32(out.sorted_ids, "sorted_ids", 1);
  check_i32(out.permuted_row, "permuted_row", 2);
  MOEKIT_CHECK_ARG(out.expert_counts.size(0) == num_local_experts, "expert_counts shape",
                   Shape{num_local_experts}.str(), out.expert_counts.shape.str());
  MOEKIT_CHECK_ARG(out.expert_offsets.size(0) == num_local_experts + 1, "expert_offsets shape",
                   Shape{num_local_experts + 1}.str(), out.expert_offsets.shape.str());
  MOEKIT_CHECK_ARG(out.permuted_row.shape == topk_ids.shape, "permuted_row shape",
                   topk_ids.shape.str(), out.permuted_row.shape.str());
  const std::int64_t capacity = permute_capacity(m, k, num_local_experts, block_size);
  MOEKIT_CHECK_ARG(out.sorted_ids.size(0) >= capacity, "sorted_ids size",
                   ">= " + std::to_string(capacity), out.sorted_ids.size(0));

  auto* counts = out.expert_counts.ptr<std::int32_t>();
  auto* offsets = out.expert_offsets.ptr<std::int32_t>();
  auto* sorted = out.sorted_ids.ptr<std::int32_t>();
  auto* rows = out.permuted_row.ptr<std::int32_t>();
  for (int e = 0; e < num_local_experts; ++e) counts[e] = 0;
  for (int l : local)
    if (l >= 0) ++counts[l];
  offsets[0] = 0;
  for (int e = 0; e < num_local_experts; ++e) {
    const std::int32_t padded = (counts[e] + block_size - 1) / block_size * block_size;
    offsets[e + 1] = offsets[e] + padded;
  }
  for (std::int64_t r = 0; r < out.sorted_ids.size(0); ++r) sorted[r] = -1;
  // Ascending a within each expert: one pass in a order with a cursor per expert.
  std::vector<std::int32_t> cursor(offsets, offsets + num_local_experts);
  for (std::int64_t a = 0; a < m * k; ++a) {
    const int l = local[static_cast<std::size_t>(a)];
    if (l < 0) {
      rows[a] = -1;
      continue;
    }
    const std::int32_t r = cursor[static_cast<std::size_t>(l)]++;
    sorted[r] = static_cast<std::int32_t>(a);
    rows[a] = r;
  }
}

void permute_gather(const TensorView& src, const TensorView& sorted_ids, int top_k,
                    const TensorView& out) {
  check_i32(sorted_ids, "sorted_ids", 1);
  MOEKIT_CHECK_ARG(top_k >= 1, "top_k", ">= 1", top_k);
  check_rows_compatible(src, out, 1, "out");
  MOEKIT_CHECK_ARG(out.size(0) <= sorted_ids.size(0), "out rows",
                   "<= sorted_ids size " + std::to_string(sorted_ids.size(0)), out.size(0));
  const std::size_t rb = row_bytes(src);
  const auto* ids = sorted_ids.ptr<const std::int32_t>();
  const auto* s = static_cast<const unsigned char*>(src.data);
  auto* o = static_cast<unsigned char*>(out.data);
  const std::int64_t m = src.size(0);
  for (std::int64_t r = 0; r < out.size(0); ++r) {
    const std::int32_t a = ids[r];
    if (a < 0) {
      if (rb) std::memset(o + r * rb, 0, rb);
      continue;
    }
    const std::int64_t t = a / top_k;
    MOEKIT_CHECK_ARG(t < m, "sorted_ids[" + std::to_string(r) + "]",
                     "an assignment of one of the " + std::to_string(m) + " tokens", a);
    if (rb) std::memcpy(o + r * rb, s + t * rb, rb);
  }
}

void batched_rows(const TensorView& topk_ids, const TensorView& expert_map,
                  const TensorView& permuted_row, const TensorView& expert_offsets,
                  std::int64_t max_tokens_per_expert, const TensorView& batched_row) {
  check_i32(expert_offsets, "expert_offsets", 1);
  const int num_local = static_cast<int>(expert_offsets.size(0)) - 1;
  const std::vector<int> local = local_experts(topk_ids, expert_map, num_local);
  check_i32(permuted_row, "permuted_row", 2);
  check_i32(batched_row, "batched_row", 2);
  MOEKIT_CHECK_ARG(permuted_row.shape == topk_ids.shape, "permuted_row shape", topk_ids.shape.str(),
                   permuted_row.shape.str());
  MOEKIT_CHECK_ARG(batched_row.shape == topk_ids.shape, "batched_row shape", topk_ids.shape.str(),
                   batched_row.shape.str());
  MOEKIT_CHECK_ARG(max_tokens_per_expert >= 0, "max_tokens_per_expert", ">= 0",
                   max_tokens_per_expert);
  const auto* off = expert_offsets.ptr<const std::int32_t>();
  const auto* pr = permuted_row.ptr<const std::int32_t>();
  auto* br = batched_row.ptr<std::int32_t>();
  for (int e = 0; e < num_local; ++e) {
    const std::int64_t count = off[e + 1] - off[e];
    MOEKIT_CHECK_ARG(count <= max_tokens_per_expert,
                     "assignments to local expert " + std::to_string(e),
                     "<= max_tokens_per_expert " + std::to_string(max_tokens_per_expert), count);
  }
  for (std::size_t a = 0; a < local.size(); ++a) {
    const int l = local[a];
    if (l < 0 || pr[a] < 0) {
      br[a] = -1;
      continue;
    }
    const std::int64_t pos = pr[a] - off[l];
    MOEKIT_CHECK_ARG(
        pos >= 0 && pos < off[l + 1] - off[l], "permuted_row[" + std::to_string(a) + "]",
        "a row of local expert " + std::to_string(l) + " (unpadded permutation)", pr[a]);
    br[a] = static_cast<std::int32_t>(l * max_tokens_per_expert + pos);
  }
}

void scatter_batched(const TensorView& src, const TensorView& topk_ids,
                     const TensorView& expert_map, int num_local_experts, const TensorView& out,
                     const TensorView& expert_num_tokens) {
  const std::vector<int> local = local_experts(topk_ids, expert_map, num_local_experts);
  check_rows_compatible(src, out, 2, "out");
  check_i32(expert_num_tokens, "expert_num_tokens", 1);
  MOEKIT_CHECK_ARG(src.size(0) == topk_ids.size(0), "src rows", topk_ids.size(0), src.size(0));
  MOEKIT_CHECK_ARG(out.size(0) == num_local_experts, "out dim 0 (local experts)", num_local_experts,
                   out.size(0));
  MOEKIT_CHECK_ARG(expert_num_tokens.size(0) == num_local_experts, "expert_num_tokens shape",
                   Shape{num_local_experts}.str(), expert_num_tokens.shape.str());
  const std::int64_t t_max = out.size(1);
  const int k = static_cast<int>(topk_ids.size(1));
  auto* counts = expert_num_tokens.ptr<std::int32_t>();
  std::vector<std::int64_t> n(static_cast<std::size_t>(num_local_experts), 0);
  for (int l : local)
    if (l >= 0) ++n[static_cast<std::size_t>(l)];
  for (int e = 0; e < num_local_experts; ++e) {
    MOEKIT_CHECK_ARG(
        n[static_cast<std::size_t>(e)] <= t_max, "assignments to local expert " + std::to_string(e),
        "<= T_max (out dim 1) " + std::to_string(t_max), n[static_cast<std::size_t>(e)]);
    counts[e] = static_cast<std::int32_t>(n[static_cast<std::size_t>(e)]);
  }
  const std::size_t rb = row_bytes(src);
  const auto* s = static_cast<const unsigned char*>(src.data);
  auto* o = static_cast<unsigned char*>(out.data);
  if (rb) std::memset(o, 0, out.nbytes());
  std::vector<std::int64_t> cursor(static_cast<std::size_t>(num_local_experts), 0);
  for (std::size_t a = 0; a < local.size(); ++a) {
    const int l = local[a];
    if (l < 0) continue;
    const std::int64_t i = cursor[static_cast<std::size_t>(l)]++;
    const std::int64_t t = static_cast<std::int64_t>(a) / k;
    if (rb) std::memcpy(o + (l * t_max + i) * rb, s + t * rb, rb);
  }
}

void unpermute_reduce(const TensorView& expert_out, const TensorView& source_row,
                      const TensorView& topk_weights, const TensorView& out) {
  check_i32(source_row, "source_row", 2);
  const std::int64_t m = source_row.size(0);
  const std::int64_t k = source_row.size(1);
  MOEKIT_CHECK_ARG(expert_out.defined() && expert_out.rank() >= 2, "expert_out",
                   "a tensor of rank >= 2", expert_out.str());
  MOEKIT_CHECK_ARG(expert_out.dtype == DType::kF32 || expert_out.dtype == DType::kBF16,
                   "expert_out dtype", "f32 or bf16", dtype_name(expert_out.dtype));
  MOEKIT_CHECK_ARG(expert_out.is_contiguous() && expert_out.device.is_host(), "expert_out",
                   "contiguous host tensor", expert_out.str());
  MOEKIT_CHECK_ARG(out.defined() && out.rank() == 2, "out", "[M, H]", out.str());
  MOEKIT_CHECK_ARG(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "out dtype",
                   "f32 or bf16", dtype_name(out.dtype));
  MOEKIT_CHECK_ARG(out.is_contiguous() && out.device.is_host(), "out", "contiguous host tensor",
                   out.str());
  const std::int64_t h = expert_out.size(-1);
  MOEKIT_CHECK_ARG(out.size(0) == m && out.size(1) == h, "out shape", (Shape{m, h}.str()),
                   out.shape.str());
  const std::int64_t rows = h ? expert_out.numel() / h : 0;
  const float* w = nullptr;
  if (topk_weights.defined()) {
    MOEKIT_CHECK_ARG(topk_weights.dtype == DType::kF32, "topk_weights dtype", "f32",
                     dtype_name(topk_weights.dtype));
    MOEKIT_CHECK_ARG(topk_weights.shape == source_row.shape, "topk_weights shape",
                     source_row.shape.str(), topk_weights.shape.str());
    MOEKIT_CHECK_ARG(topk_weights.is_contiguous() && topk_weights.device.is_host(), "topk_weights",
                     "contiguous host tensor", topk_weights.str());
    w = topk_weights.ptr<const float>();
  }
  const auto* src_rows = source_row.ptr<const std::int32_t>();
  for (std::int64_t a = 0; a < m * k; ++a) {
    MOEKIT_CHECK_ARG(src_rows[a] < rows,
                     "source_row[" + std::to_string(a / k) + ", " + std::to_string(a % k) + "]",
                     "-1 or a row < " + std::to_string(rows), src_rows[a]);
  }
  const bool in_bf16 = expert_out.dtype == DType::kBF16;
  const bool out_bf16 = out.dtype == DType::kBF16;
  const void* in = expert_out.data;
  std::vector<float> acc(static_cast<std::size_t>(h));
  for (std::int64_t t = 0; t < m; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t r = src_rows[t * k + j];
      if (r < 0) continue;
      const float wt = w ? w[t * k + j] : 1.0f;
      for (std::int64_t c = 0; c < h; ++c) {
        const float v = in_bf16 ? bf16_to_float(static_cast<const std::uint16_t*>(in)[r * h + c])
                                : static_cast<const float*>(in)[r * h + c];
        // ISO C++ mode (-std=c++20) compiles with -ffp-contract=off: p is rounded on its own.
        const float p = wt * v;
        acc[static_cast<std::size_t>(c)] = acc[static_cast<std::size_t>(c)] + p;
      }
    }
    for (std::int64_t c = 0; c < h; ++c) {
      if (out_bf16)
        out.ptr<std::uint16_t>()[t * h + c] = float_to_bf16(acc[static_cast<std::size_t>(c)]);
      else
        out.ptr<float>()[t * h + c] = acc[static_cast<std::size_t>(c)];
    }
  }
}

}  // namespace moekit
