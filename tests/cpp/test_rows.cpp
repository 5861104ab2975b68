// rows_of (an N-d tensor as M rows with one stride) and rows_may_overlap (may two row sets share
// an element). The overlap check is also compared with a brute-force byte map on small layouts.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/rows.h"

namespace oink {
namespace {

struct View {
  std::optional<RowLayout> layout;
  std::string why;
};

View view(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  View v;
  v.layout = rows_of(sizes.data(), strides.data(), static_cast<int>(sizes.size()), &v.why);
  return v;
}

void expect_rows(const View& v, int64_t rows, int64_t cols, int64_t ld) {
  ASSERT_TRUE(v.layout.has_value()) << v.why;
  EXPECT_EQ(v.layout->rows, rows);
  EXPECT_EQ(v.layout->cols, cols);
  EXPECT_EQ(v.layout->ld, ld);
}

TEST(RowsOf, Contiguous) {
  expect_rows(view({7}, {1}), 1, 7, 7);
  expect_rows(view({5, 7}, {7, 1}), 5, 7, 7);
  expect_rows(view({2, 3, 7}, {21, 7, 1}), 6, 7, 7);
  expect_rows(view({2, 3, 4, 7}, {84, 28, 7, 1}), 24, 7, 7);
}

TEST(RowsOf, PaddedRows) {
  expect_rows(view({4, 7}, {10, 1}), 4, 7, 10);            // x = buf[:, :7] of a [4, 10] buffer
  expect_rows(view({2, 3, 7}, {30, 10, 1}), 6, 7, 10);     // 3-D view of the same
  expect_rows(view({4, 4096}, {8192, 1}), 4, 4096, 8192);  // one half of interleaved rows
}

TEST(RowsOf, SizeOneDimsCarryNoStride) {
  expect_rows(view({1, 4, 7}, {999, 10, 1}), 4, 7, 10);
  expect_rows(view({4, 1, 7}, {10, 12345, 1}), 4, 7, 10);
  expect_rows(view({2, 1, 3, 7}, {30, -5, 10, 1}), 6, 7, 10);
  expect_rows(view({1, 1, 7}, {3, 5, 1}), 1, 7, 7);  // one row: ld is N whatever the strides
  expect_rows(view({1, 7}, {0, 1}), 1, 7, 7);
}

TEST(RowsOf, EmptyTensors) {
  const View no_rows = view({0, 7}, {7, 1});
  ASSERT_TRUE(no_rows.layout.has_value()) << no_rows.why;
  EXPECT_EQ(no_rows.layout->rows, 0);
  EXPECT_EQ(no_rows.layout->cols, 7);
  const View inner_zero = view({3, 0, 7}, {0, 7, 1});  // zero rows whatever the other strides
  ASSERT_TRUE(inner_zero.layout.has_value()) << inner_zero.why;
  EXPECT_EQ(inner_zero.layout->rows, 0);
  const View no_cols = view({4, 0}, {1, 1});
  ASSERT_TRUE(no_cols.layout.has_value()) << no_cols.why;
  EXPECT_EQ(no_cols.layout->rows, 4);
  EXPECT_EQ(no_cols.layout->cols, 0);
}

TEST(RowsOf, RejectsLeadingDimsWithoutOneStride) {
  // A [2, 3, N] slice of a [2, 4, N] buffer: a gap of one row between the two blocks of 3.
  const int64_t n = 64;
  const View gap = view({2, 3, n}, {4 * n, n, 1});
  EXPECT_FALSE(gap.layout.has_value());
  EXPECT_FALSE(gap.why.empty());
  // Leading dims transposed: row r is not at r * ld.
  const View transposed = view({3, 2, n}, {n, 3 * n, 1});
  EXPECT_FALSE(transposed.layout.has_value());
  EXPECT_FALSE(transposed.why.empty());
}

TEST(RowsOf, RejectsRowStrideBelowN) {
  const View short_ld = view({4, 7}, {5, 1});
  EXPECT_FALSE(short_ld.layout.has_value());
  EXPECT_FALSE(short_ld.why.empty());
  const View broadcast = view({4, 7}, {0, 1});  // expand(): every row is the same memory
  EXPECT_FALSE(broadcast.layout.has_value());
  EXPECT_FALSE(broadcast.why.empty());
  const View inner_broadcast = view({2, 3, 7}, {7, 0, 1});
  EXPECT_FALSE(inner_broadcast.layout.has_value());
  EXPECT_FALSE(inner_broadcast.why.empty());
}

RowLayout rows(int64_t m, int64_t n, int64_t ld) { return RowLayout{m, n, ld}; }

constexpr uintptr_t kBase = 0x100000;

TEST(RowsMayOverlap, DisjointRanges) {
  const RowLayout l = rows(8, 100, 128);
  const uintptr_t end = kBase + (7 * 128 + 100) * 2;  // one past the last byte of the first set
  EXPECT_FALSE(rows_may_overlap(kBase, l, end, l, 2));
  EXPECT_FALSE(rows_may_overlap(end, l, kBase, l, 2));
  EXPECT_FALSE(rows_may_overlap(kBase, l, end + 4096, rows(3, 5, 7), 2));
}

TEST(RowsMayOverlap, SameBuffer) {
  const RowLayout l = rows(8, 100, 128);
  EXPECT_TRUE(rows_may_overlap(kBase, l, kBase, l, 2));
  EXPECT_TRUE(rows_may_overlap(kBase, rows(1, 100, 100), kBase, rows(1, 100, 100), 4));
}

TEST(RowsMayOverlap, InterleavedHalvesOfOneBuffer) {
  // x = buf[:, :N], residual = buf[:, N:2N] with ld = 2N: the ranges interleave, elements never
  // meet.
  for (int64_t n : {1, 7, 4096}) {
    const RowLayout l = rows(17, n, 2 * n);
    const uintptr_t r = kBase + static_cast<uintptr_t>(n) * 2;
    EXPECT_FALSE(rows_may_overlap(kBase, l, r, l, 2)) << n;
    EXPECT_FALSE(rows_may_overlap(r, l, kBase, l, 2)) << n;
    // One element further: residual row i now reaches the first element of x's row i + 1.
    EXPECT_TRUE(rows_may_overlap(kBase, l, r + 2, l, 2)) << n;
  }
}

TEST(RowsMayOverlap, ShiftedByLessThanARow) {
  const RowLayout l = rows(4, 64, 64);
  for (int64_t shift : {1, 2, 63}) {
    EXPECT_TRUE(rows_may_overlap(kBase, l, kBase + static_cast<uintptr_t>(shift) * 4, l, 4));
  }
  EXPECT_TRUE(rows_may_overlap(kBase, l, kBase + 64 * 4, l, 4));  // a whole row: rows coincide
  EXPECT_TRUE(rows_may_overlap(kBase, l, kBase + 1, l, 4));       // not a whole element
}

TEST(RowsMayOverlap, DifferentStridesAreConservative) {
  EXPECT_TRUE(rows_may_overlap(kBase, rows(4, 64, 128), kBase + 64 * 2, rows(4, 64, 96), 2));
  EXPECT_TRUE(rows_may_overlap(kBase, rows(4, 64, 128), kBase + 64 * 2, rows(4, 32, 128), 2));
}

TEST(RowsMayOverlap, NothingToOverlap) {
  EXPECT_FALSE(rows_may_overlap(kBase, rows(0, 64, 64), kBase, rows(4, 64, 64), 2));
  EXPECT_FALSE(rows_may_overlap(kBase, rows(4, 64, 64), kBase, rows(0, 64, 64), 2));
  EXPECT_FALSE(rows_may_overlap(kBase, rows(4, 0, 64), kBase, rows(4, 0, 64), 2));
}

std::set<uintptr_t> bytes_of(uintptr_t base, const RowLayout& l, int elem) {
  std::set<uintptr_t> s;
  for (int64_t i = 0; i < l.rows; ++i) {
    for (int64_t j = 0; j < l.cols * elem; ++j)
      s.insert(base + static_cast<uintptr_t>(i * l.ld * elem + j));
  }
  return s;
}

bool really_overlap(uintptr_t a, const RowLayout& la, uintptr_t b, const RowLayout& lb, int elem) {
  const std::set<uintptr_t> sa = bytes_of(a, la, elem);
  for (uintptr_t x : bytes_of(b, lb, elem)) {
    if (sa.count(x)) return true;
  }
  return false;
}

// Small layouts, every offset: never "no overlap" when bytes are shared (a false negative would let
// the fused op corrupt memory), and exact when both sets have the same N and ld (the documented
// exact case, which the interleaved x/residual buffers of vLLM rely on).
TEST(RowsMayOverlap, AgreesWithBruteForce) {
  const int elem = 2;
  for (int64_t n = 1; n <= 4; ++n) {
    for (int64_t ld = n; ld <= 3 * n + 1; ++ld) {
      for (int64_t ma = 1; ma <= 3; ++ma) {
        for (int64_t mb = 1; mb <= 3; ++mb) {
          for (int64_t nb : {n, n + 1}) {
            for (int64_t ldb : {ld, ld + 1}) {
              const RowLayout la = rows(ma, n, ld), lb = rows(mb, nb, ldb);
              for (uintptr_t off = 0; off < static_cast<uintptr_t>(4 * ld * elem); ++off) {
                for (bool swap : {false, true}) {
                  const uintptr_t a = swap ? kBase + off : kBase, b = swap ? kBase : kBase + off;
                  const bool real = really_overlap(a, la, b, lb, elem);
                  const bool may = rows_may_overlap(a, la, b, lb, elem);
                  const bool exact_case = nb == n && ldb == ld && ma >= 2 && off % elem == 0;
                  ASSERT_TRUE(may || !real) << "missed overlap: n=" << n << " ld=" << ld
                                            << " off=" << off << " ma=" << ma << " mb=" << mb;
                  if (exact_case) {
                    ASSERT_EQ(may, real) << "n=" << n << " ld=" << ld << " off=" << off
                                         << " ma=" << ma << " mb=" << mb << " swap=" << swap;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace oink
