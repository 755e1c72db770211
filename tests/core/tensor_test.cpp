#include <gtest/gtest.h>

#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/core/tensor.hpp"

#include <atomic>

namespace moekit {
namespace {

TEST(Shape, NumelAndStr) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
}

TEST(Shape, RejectsNegativeExtent) {
  try {
    Shape s{2, -1};
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shape[1]"), std::string::npos) << e.what();
  }
}

TEST(Tensor, HostAllocationIsAlignedAndContiguous) {
  Tensor t(DType::kBF16, Shape{7, 13});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % Buffer::kHostAlignment, 0u);
  EXPECT_EQ(t.nbytes(), 7u * 13u * 2u);
  EXPECT_TRUE(t.view().is_contiguous());
  EXPECT_EQ(t.view().strides[0], 13);
}

TEST(Tensor, CopyChecksSize) {
  Tensor a(DType::kF32, Shape{4}), b(DType::kF32, Shape{5});
  EXPECT_THROW(copy(b.view(), a.view()), Error);
}

TEST(Parallel, CoversRangeExactlyOnce) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(1000, 7, [&](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(Parallel, PropagatesExceptions) {
  EXPECT_THROW(parallel_for(100, 1, [](std::int64_t b, std::int64_t) {
                 if (b > 0) throw Error("boom");
               }),
               Error);
}

}  // namespace
}  // namespace moekit
