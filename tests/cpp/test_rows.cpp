// core/rows.h (rows_of, joint_rows, rows_may_overlap, RowIndexer / split_row / row_offset) and
// core/fast_divmod.h. Row offsets are compared with the offsets of the original, uncoalesced
// multi-index on many random views; the overlap check with a brute-force byte map on small
// layouts; FastDivmod with plain division.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/fast_divmod.h"
#include "core/rows.h"

namespace oink {
namespace {

using Ints = std::vector<int64_t>;

struct View {
  std::optional<RowView> view;
  std::string why;
};

View view(const Ints& sizes, const Ints& strides) {
  View v;
  v.view = rows_of(sizes.data(), strides.data(), static_cast<int>(sizes.size()), &v.why);
  return v;
}

// Rows with one stride `ld`.
void expect_rows(const View& v, int64_t rows, int64_t cols, int64_t ld) {
  ASSERT_TRUE(v.view.has_value()) << v.why;
  EXPECT_EQ(v.view->rows, rows);
  EXPECT_EQ(v.view->cols, cols);
  EXPECT_TRUE(v.view->one_row_stride());
  EXPECT_EQ(v.view->dims.count, 1);
  EXPECT_EQ(v.view->dims.size[0], rows);
  EXPECT_EQ(v.view->strides.s[0], ld);
}

// Rows over several coalesced dimensions, `dims` and `strides` innermost first.
void expect_dims(const View& v, int64_t rows, int64_t cols, const Ints& dims, const Ints& strides) {
  ASSERT_TRUE(v.view.has_value()) << v.why;
  EXPECT_EQ(v.view->rows, rows);
  EXPECT_EQ(v.view->cols, cols);
  ASSERT_EQ(v.view->dims.count, static_cast<int>(dims.size()));
  EXPECT_EQ(v.view->one_row_stride(), dims.size() == 1);
  for (size_t d = 0; d < dims.size(); ++d) {
    EXPECT_EQ(v.view->dims.size[d], dims[d]) << "dim " << d;
    EXPECT_EQ(v.view->strides.s[d], strides[d]) << "dim " << d;
  }
}

void expect_rejected(const View& v) {
  EXPECT_FALSE(v.view.has_value());
  EXPECT_FALSE(v.why.empty());
}

TEST(RowsOf, Contiguous) {
  expect_rows(view({7}, {1}), 1, 7, 7);
  expect_rows(view({5, 7}, {7, 1}), 5, 7, 7);
  expect_rows(view({2, 3, 7}, {21, 7, 1}), 6, 7, 7);
  expect_rows(view({2, 3, 4, 7}, {84, 28, 7, 1}), 24, 7, 7);
  expect_rows(view({2, 2, 2, 2, 2, 7}, {112, 56, 28, 14, 7, 1}), 32, 7, 7);  // rank 6
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
  expect_rows(view({2, 1, 3, 7}, {30, 0, 10, 1}), 6, 7, 10);
  expect_rows(view({1, 1, 7}, {3, 5, 1}), 1, 7, 7);  // one row: the stride is N whatever they are
  expect_rows(view({1, 7}, {0, 1}), 1, 7, 7);
  // A size-1 dimension between two that do not continue each other changes nothing.
  expect_dims(view({3, 1, 2, 8}, {8, 77, 24, 1}), 6, 8, {2, 3}, {24, 8});
}

TEST(RowsOf, EmptyTensors) {
  const View no_rows = view({0, 7}, {7, 1});
  ASSERT_TRUE(no_rows.view.has_value()) << no_rows.why;
  EXPECT_EQ(no_rows.view->rows, 0);
  EXPECT_EQ(no_rows.view->cols, 7);
  EXPECT_TRUE(no_rows.view->one_row_stride());
  const View inner_zero = view({3, 0, 7}, {0, 7, 1});  // zero rows whatever the other strides
  ASSERT_TRUE(inner_zero.view.has_value()) << inner_zero.why;
  EXPECT_EQ(inner_zero.view->rows, 0);
  const View no_cols = view({4, 0}, {1, 1});
  ASSERT_TRUE(no_cols.view.has_value()) << no_cols.why;
  EXPECT_EQ(no_cols.view->rows, 4);
  EXPECT_EQ(no_cols.view->cols, 0);
}

TEST(RowsOf, RejectsOverlappingRows) {
  expect_rejected(view({4, 7}, {5, 1}));         // row stride below N
  expect_rejected(view({4, 7}, {0, 1}));         // expand(): every row is the same memory
  expect_rejected(view({2, 3, 7}, {7, 0, 1}));   // inner broadcast
  expect_rejected(view({2, 3, 7}, {0, 7, 1}));   // outer broadcast
  expect_rejected(view({2, 3, 7}, {14, 7, 1}));  // the outer dimension steps into the inner one
  expect_rejected(view({3, 2, 7}, {7, 14, 1}));  // the same with the leading dims transposed
  expect_rejected(view({2, 3, 4, 7}, {84, 28, 6, 1}));  // rows overlap in the innermost dim only
}

TEST(RowsOf, QkvHeadView) {
  // q = qkv[:, :H*D].view(T, H, D) of a fused [T, (H + 2 * KV) * D] buffer.
  const int64_t t = 5, h = 4, d = 128, width = (4 + 2 * 2) * 128;
  expect_dims(view({t, h, d}, {width, d, 1}), t * h, d, {h, t}, {d, width});
  // k, a slice further into the same buffer: the same layout.
  expect_dims(view({t, 2, d}, {width, d, 1}), t * 2, d, {2, t}, {d, width});
  // One token: the heads are contiguous rows.
  expect_rows(view({1, h, d}, {width, d, 1}), h, d, d);
}

TEST(RowsOf, TransposedHeads) {
  // x.transpose(1, 2) of a contiguous [B, S, H, D] buffer: [B, H, S, D].
  const int64_t b = 2, s = 3, h = 4, d = 64;
  expect_dims(view({b, h, s, d}, {s * h * d, d, h * d, 1}), b * h * s, d, {s, h, b},
              {h * d, d, s * h * d});
  // One batch: two dimensions.
  expect_dims(view({1, h, s, d}, {s * h * d, d, h * d, 1}), h * s, d, {s, h}, {h * d, d});
}

TEST(RowsOf, BlocksWithAGap) {
  // A [2, 3, N] slice of a [2, 4, N] buffer: a gap of one row between the two blocks of 3.
  const int64_t n = 64;
  expect_dims(view({2, 3, n}, {4 * n, n, 1}), 6, n, {3, 2}, {n, 4 * n});
}

TEST(RowsOf, TransposedLeadingDims) {
  const int64_t n = 64;
  expect_dims(view({3, 2, n}, {n, 3 * n, 1}), 6, n, {2, 3}, {3 * n, n});
}

TEST(RowsOf, DimsThatContinueEachOtherCoalesce) {
  const int64_t n = 16;
  expect_rows(view({2, 3, 4, n}, {12 * n, 4 * n, n, 1}), 24, n, n);
  // Only the outer two continue each other: [2 * 3, 4] (the 4 rows padded to 5).
  expect_dims(view({2, 3, 4, n}, {15 * n, 5 * n, n, 1}), 24, n, {4, 6}, {n, 5 * n});
  // Only the inner two continue each other.
  expect_dims(view({2, 3, 4, n}, {13 * n, 4 * n, n, 1}), 24, n, {12, 2}, {n, 13 * n});
  // Padded rows continue each other too.
  expect_rows(view({2, 3, 4, n}, {12 * 20, 4 * 20, 20, 1}), 24, n, 20);
}

// Strides of a non-overlapping layout of `sizes` (leading dims, then N) where the leading dim d
// continues dim d + 1 unless breaks[d] (then one row of gap; the innermost's entry is unused);
// rows are `ld` apart.
Ints strides_with_breaks(const Ints& sizes, const std::vector<bool>& breaks, int64_t ld) {
  Ints strides(sizes.size(), 1);
  const int lead = static_cast<int>(sizes.size()) - 1;
  int64_t next = ld;  // the stride dim d would have if it continued dim d + 1
  for (int d = lead - 1; d >= 0; --d) {
    strides[d] = next + (d + 1 < lead && breaks[d] ? ld : 0);
    next = strides[d] * sizes[d];
  }
  return strides;
}

TEST(RowsOf, AtMostMaxRowDims) {
  const int64_t n = 8;
  static_assert(kMaxRowDims == 4, "the layouts below assume 4");
  // Four leading dims, none continuing the next: accepted as four.
  const Ints four = {2, 3, 2, 3, n};
  const Ints four_strides = strides_with_breaks(four, {true, true, true, true}, n);
  expect_dims(view(four, four_strides), 36, n, {3, 2, 3, 2},
              {four_strides[3], four_strides[2], four_strides[1], four_strides[0]});
  // Five that do not coalesce: rejected, with a message naming the limit.
  const Ints five = {2, 3, 2, 3, 2, n};
  const View v = view(five, strides_with_breaks(five, {true, true, true, true, true}, n));
  expect_rejected(v);
  EXPECT_NE(v.why.find(std::to_string(kMaxRowDims)), std::string::npos) << v.why;
  // Five that coalesce into four (or with a size-1 dimension in between): accepted.
  const Ints five_strides = strides_with_breaks(five, {false, true, true, true, true}, n);
  expect_dims(view(five, five_strides), 72, n, {2, 3, 2, 6},
              {five_strides[4], five_strides[3], five_strides[2], five_strides[1]});
  const Ints with_one = {2, 3, 1, 3, 2, n};
  const Ints with_one_strides = strides_with_breaks(with_one, {true, true, true, true, true}, n);
  const View with_one_view = view(with_one, with_one_strides);
  ASSERT_TRUE(with_one_view.view.has_value()) << with_one_view.why;
  EXPECT_EQ(with_one_view.view->dims.count, 4);
}

// joint_rows of tensors of one shape, each given by its strides.
struct Joint {
  std::optional<RowDims> dims;
  std::vector<RowStrides> strides;
  std::string why;
};

Joint joint(const Ints& sizes, const std::vector<Ints>& strides) {
  Joint j;
  std::vector<const int64_t*> ptrs;
  for (const Ints& s : strides) ptrs.push_back(s.data());
  j.strides.resize(strides.size());
  j.dims = joint_rows(sizes.data(), static_cast<int>(sizes.size()), ptrs.data(),
                      static_cast<int>(strides.size()), j.strides.data(), &j.why);
  return j;
}

void expect_joint(const Joint& j, const Ints& dims, const std::vector<Ints>& strides) {
  ASSERT_TRUE(j.dims.has_value()) << j.why;
  ASSERT_EQ(j.dims->count, static_cast<int>(dims.size()));
  for (size_t d = 0; d < dims.size(); ++d) {
    EXPECT_EQ(j.dims->size[d], dims[d]) << "dim " << d;
    for (size_t t = 0; t < strides.size(); ++t) {
      EXPECT_EQ(j.strides[t].s[d], strides[t][d]) << "tensor " << t << " dim " << d;
    }
  }
}

TEST(RowsJoint, BothContiguous) {
  expect_joint(joint({2, 3, 4, 16}, {{192, 64, 16, 1}, {192, 64, 16, 1}}), {24}, {{16}, {16}});
  // Padded x, contiguous out: both merge, each with its own row stride.
  expect_joint(joint({2, 3, 16}, {{60, 20, 1}, {48, 16, 1}}), {6}, {{20}, {16}});
}

TEST(RowsJoint, MergesOnlyWhereBothMerge) {
  // Contiguous x written into a head view of a fused QKV buffer: the head view's dims.
  const int64_t t = 5, h = 4, d = 128, width = (4 + 2 * 2) * 128;
  expect_joint(joint({t, h, d}, {{h * d, d, 1}, {width, d, 1}}), {h, t}, {{d, h * d}, {d, width}});
  // And the other way round.
  expect_joint(joint({t, h, d}, {{width, d, 1}, {h * d, d, 1}}), {h, t}, {{d, width}, {d, h * d}});
  // Each tensor breaks at a different place: both breaks stay.
  const int64_t n = 8;
  expect_joint(joint({2, 3, 4, n}, {{15 * n, 5 * n, n, 1}, {13 * n, 4 * n, n, 1}}), {4, 3, 2},
               {{n, 5 * n, 15 * n}, {n, 4 * n, 13 * n}});
}

TEST(RowsJoint, SizeOneDimsAndFewRows) {
  expect_joint(joint({4, 1, 16}, {{16, 5, 1}, {32, 99, 1}}), {4}, {{16}, {32}});
  // One row, or none: one dimension, strides N.
  expect_joint(joint({1, 1, 16}, {{7, 5, 1}, {32, 99, 1}}), {1}, {{16}, {16}});
  expect_joint(joint({0, 16}, {{16, 1}, {16, 1}}), {0}, {{16}, {16}});
}

TEST(RowsJoint, RejectsMoreThanMaxRowDims) {
  // Each tensor alone coalesces into 3 dimensions, but they break at different places: 5.
  const Ints sizes = {2, 3, 2, 3, 2, 8};
  const Ints a = strides_with_breaks(sizes, {false, true, false, true, false}, 8);
  const Ints b = strides_with_breaks(sizes, {true, false, true, false, false}, 8);
  ASSERT_TRUE(view(sizes, a).view.has_value());
  ASSERT_EQ(view(sizes, a).view->dims.count, 3);
  ASSERT_TRUE(view(sizes, b).view.has_value());
  ASSERT_EQ(view(sizes, b).view->dims.count, 3);
  const Joint j = joint(sizes, {a, b});
  EXPECT_FALSE(j.dims.has_value());
  EXPECT_FALSE(j.why.empty());
  EXPECT_TRUE(joint(sizes, {a, a}).dims.has_value());
}

// --- row offsets ---------------------------------------------------------------------------------

// Offset of row r of a layout by brute force: its multi-index over the original leading sizes
// (row-major, the last leading dimension fastest).
int64_t brute_offset(const Ints& sizes, const Ints& strides, int64_t r) {
  int64_t offset = 0;
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) {
    offset += (r % sizes[d]) * strides[d];
    r /= sizes[d];
  }
  return offset;
}

int64_t uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Random strides for `sizes` (leading dims, then N) that make a non-overlapping view of a larger
// buffer: the leading dims laid out in a random order of memory (often row-major), each either
// continuing the previous one or after a gap, rows padded or not; some size-1 dims get junk
// strides.
Ints random_strides(std::mt19937_64& rng, const Ints& sizes) {
  const int lead = static_cast<int>(sizes.size()) - 1;
  const int64_t n = sizes[lead];
  Ints strides(sizes.size(), 1);
  std::vector<int> order(lead);  // memory order, innermost first
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  if (uniform(rng, 0, 2) == 0) std::sort(order.rbegin(), order.rend());
  int64_t extent = n + (uniform(rng, 0, 1) ? 0 : uniform(rng, 1, 7));  // the innermost stride
  for (int d : order) {
    strides[d] = extent;
    extent = extent * sizes[d] + (uniform(rng, 0, 1) ? 0 : uniform(rng, 1, 3) * n);
    if (sizes[d] == 1 && uniform(rng, 0, 1)) strides[d] = uniform(rng, -100, 100);
  }
  return strides;
}

// Random sizes: `lead` leading dims of 1..5 (some 1), then N of 1..9.
Ints random_sizes(std::mt19937_64& rng, int lead) {
  Ints sizes(lead + 1, 1);
  for (int d = 0; d < lead; ++d) sizes[d] = uniform(rng, 0, 5) == 0 ? 1 : uniform(rng, 2, 5);
  sizes[lead] = uniform(rng, 1, 9);
  return sizes;
}

std::string text(const Ints& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return "(" + s + ")";
}

// row_offset over the coalesced dims is the offset of the row's original multi-index.
void expect_offsets(const RowDims& dims, const RowStrides& st, const Ints& sizes,
                    const Ints& strides, int64_t rows) {
  const RowIndexer ix(dims);
  ASSERT_EQ(ix.count, dims.count);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(row_offset(ix, split_row(ix, r), st), brute_offset(sizes, strides, r))
        << "row " << r << " of sizes " << text(sizes) << " strides " << text(strides)
        << ", coalesced into " << dims.count;
  }
}

TEST(RowOffsets, RandomViewsMatchTheOriginalIndex) {
  std::mt19937_64 rng(12345);
  int multi = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const int lead = 1 + iter % kMaxRowDims;
    const Ints sizes = random_sizes(rng, lead), strides = random_strides(rng, sizes);
    const View v = view(sizes, strides);
    ASSERT_TRUE(v.view.has_value())
        << v.why << " sizes " << text(sizes) << " strides " << text(strides);
    int64_t rows = 1;
    for (int d = 0; d < lead; ++d) rows *= sizes[d];
    ASSERT_EQ(v.view->rows, rows);
    ASSERT_LE(v.view->dims.count, lead);
    if (!v.view->one_row_stride()) ++multi;
    expect_offsets(v.view->dims, v.view->strides, sizes, strides, rows);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(multi, 5000);  // the random layouts do reach the multi-dimensional paths
}

TEST(RowOffsets, RandomPairsOverJointRows) {
  std::mt19937_64 rng(777);
  for (int iter = 0; iter < 20000; ++iter) {
    const int lead = 1 + iter % (kMaxRowDims + 1);  // up to 5: may or may not coalesce into 4
    const Ints sizes = random_sizes(rng, lead);
    const Ints a = random_strides(rng, sizes), b = random_strides(rng, sizes);
    const Joint j = joint(sizes, {a, b});
    if (!j.dims.has_value()) {
      ASSERT_GT(lead, kMaxRowDims) << j.why;
      EXPECT_FALSE(j.why.empty());
      continue;
    }
    int64_t rows = 1;
    for (int d = 0; d < lead; ++d) rows *= sizes[d];
    int64_t product = 1;
    for (int d = 0; d < j.dims->count; ++d) product *= j.dims->size[d];
    ASSERT_EQ(product, rows);
    expect_offsets(*j.dims, j.strides[0], sizes, a, rows);
    expect_offsets(*j.dims, j.strides[1], sizes, b, rows);
    if (HasFatalFailure()) return;
  }
}

TEST(RowOffsets, LargeStridesAndRowCounts) {
  // Strides past 2^32 elements keep 64 bits.
  const int64_t big = int64_t{1} << 33;
  const Ints sizes = {3, 2, 4, 16}, strides = {3 * big, big, 16, 1};
  const View v = view(sizes, strides);
  ASSERT_TRUE(v.view.has_value()) << v.why;
  EXPECT_EQ(v.view->dims.count, 3);
  expect_offsets(v.view->dims, v.view->strides, sizes, strides, 24);
  // Row counts up to 2^31 - 1: split over dimensions with inner sizes near 2^16 and 2^31.
  for (const Ints& lead : {Ints{46341, 46340}, Ints{1, 2147483647}, Ints{2147483647, 1},
                           Ints{3, 5, 143165576}, Ints{2, 1073741823}}) {
    RowDims dims;
    dims.count = static_cast<int>(lead.size());
    RowStrides st;
    int64_t rows = 1, stride = 1;
    Ints full_sizes(lead.rbegin(), lead.rend()), full_strides;
    for (size_t d = 0; d < lead.size(); ++d) {
      dims.size[d] = lead[d];
      st.s[d] = stride;
      rows *= lead[d];
      full_strides.insert(full_strides.begin(), stride);
      stride = stride * lead[d] + 1;  // not contiguous: every dimension counts
    }
    full_sizes.push_back(1);
    full_strides.push_back(1);
    ASSERT_LT(rows, int64_t{1} << 31);
    const RowIndexer ix(dims);
    std::mt19937_64 rng(rows);
    std::vector<int64_t> samples = {0, 1, rows - 1, rows - 2, rows / 2};
    for (int k = 0; k < 20000; ++k) samples.push_back(static_cast<int64_t>(rng() % rows));
    for (int64_t r : samples) {
      if (r < 0) continue;
      ASSERT_EQ(row_offset(ix, split_row(ix, r), st), brute_offset(full_sizes, full_strides, r))
          << "row " << r << " of " << text(lead);
    }
  }
}

TEST(RowOffsets, OneDimensionIsRowTimesStride) {
  RowDims dims;
  dims.size[0] = int64_t{1} << 40;  // one stride: no 32-bit limit on rows
  RowStrides st;
  st.s[0] = 4096 + 64;
  const RowIndexer ix(dims);
  for (int64_t r : {int64_t{0}, int64_t{1}, int64_t{1} << 31, (int64_t{1} << 40) - 1}) {
    EXPECT_EQ(row_offset(ix, split_row(ix, r), st), r * st.s[0]) << r;
  }
}

// --- FastDivmod ----------------------------------------------------------------------------------

void expect_divides(const FastDivmod& f, uint32_t d, uint32_t n) {
  uint32_t q = 0, r = 0;
  f.divmod(n, q, r);
  ASSERT_EQ(f.quotient(n), n / d) << n << " / " << d;
  ASSERT_EQ(q, n / d) << n << " / " << d;
  ASSERT_EQ(r, n % d) << n << " % " << d;
}

constexpr uint32_t kMaxN = 0x7fffffffu;  // 2^31 - 1

std::vector<uint32_t> numerators(uint32_t d, std::mt19937_64& rng, int random_count) {
  std::vector<uint32_t> ns = {0,         1,     2,         d - 1, d,        d + 1,
                              2 * d - 1, 2 * d, 2 * d + 1, kMaxN, kMaxN - 1};
  const uint32_t last = kMaxN / d * d;  // the largest multiple of d below 2^31
  for (uint32_t n : {last, last - 1, last + (d - 1 < kMaxN - last ? d - 1 : kMaxN - last)}) {
    ns.push_back(n);
  }
  for (uint32_t k : {3u, 7u, 1000u, 65535u, 65536u, 65537u}) {
    if (uint64_t{k} * d + 1 <= kMaxN) {
      ns.push_back(k * d - 1);
      ns.push_back(k * d);
      ns.push_back(k * d + 1);
    }
  }
  for (int i = 0; i < random_count; ++i) ns.push_back(static_cast<uint32_t>(rng() % (kMaxN + 1u)));
  for (int i = 0; i < random_count; ++i) {  // near multiples: where rounding would go wrong
    const uint32_t n = static_cast<uint32_t>(rng() % (kMaxN + 1u)) / d * d;
    ns.push_back(n);
    if (n > 0) ns.push_back(n - 1);
  }
  return ns;
}

TEST(FastDivmod, SmallDivisorsExhaustively) {
  std::mt19937_64 rng(1);
  for (uint32_t d = 1; d <= 5000; ++d) {
    const FastDivmod f(d);
    EXPECT_EQ(f.divisor, d);
    for (uint32_t n : numerators(d, rng, 40)) {
      if (n > kMaxN) continue;
      expect_divides(f, d, n);
      if (HasFatalFailure()) return;
    }
    for (uint32_t n = 0; n < 3 * d && n < 4096; ++n) {
      expect_divides(f, d, n);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(FastDivmod, LargeAndSpecialDivisors) {
  std::mt19937_64 rng(2);
  std::vector<uint32_t> divisors = {kMaxN, kMaxN - 1, 1u << 30, (1u << 30) + 1, (1u << 30) - 1,
                                    46340, 46341,     65535,    65536,          65537};
  for (int k = 0; k <= 30; ++k) {
    divisors.push_back(1u << k);
    divisors.push_back((1u << k) + 1);
    if (k > 1) divisors.push_back((1u << k) - 1);
  }
  for (int i = 0; i < 3000; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % kMaxN));
  for (int i = 0; i < 1000; ++i) {  // spread over magnitudes
    divisors.push_back(1 + static_cast<uint32_t>(rng() % (uint64_t{1} << (1 + rng() % 31))));
  }
  for (uint32_t d : divisors) {
    ASSERT_GE(d, 1u);
    ASSERT_LE(d, kMaxN);
    const FastDivmod f(d);
    for (uint32_t n : numerators(d, rng, 100)) {
      if (n > kMaxN) continue;
      expect_divides(f, d, n);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(FastDivmod, DefaultDividesByOne) {
  const FastDivmod f;
  for (uint32_t n : {0u, 1u, 12345u, kMaxN}) expect_divides(f, 1, n);
}

// --- rows_may_overlap ----------------------------------------------------------------------------

RowView rows(int64_t m, int64_t n, int64_t ld) {
  RowView v;
  v.rows = m;
  v.cols = n;
  v.dims.size[0] = m;
  v.strides.s[0] = ld;
  return v;
}

constexpr uintptr_t kBase = 0x100000;

TEST(RowsMayOverlap, DisjointRanges) {
  const RowView l = rows(8, 100, 128);
  const uintptr_t end = kBase + (7 * 128 + 100) * 2;  // one past the last byte of the first set
  EXPECT_FALSE(rows_may_overlap(kBase, l, end, l, 2));
  EXPECT_FALSE(rows_may_overlap(end, l, kBase, l, 2));
  EXPECT_FALSE(rows_may_overlap(kBase, l, end + 4096, rows(3, 5, 7), 2));
  // A head view [5, 4, 128] (strides (1024, 128, 1)) and rows just past its last element.
  const View heads = view({5, 4, 128}, {1024, 128, 1});
  ASSERT_TRUE(heads.view.has_value()) << heads.why;
  const uintptr_t heads_end = kBase + (4 * 1024 + 3 * 128 + 128) * 2;
  EXPECT_FALSE(rows_may_overlap(kBase, *heads.view, heads_end, l, 2));
  EXPECT_FALSE(rows_may_overlap(heads_end, l, kBase, *heads.view, 2));
  EXPECT_TRUE(rows_may_overlap(kBase, *heads.view, heads_end - 2, l, 2));
}

TEST(RowsMayOverlap, SameBuffer) {
  const RowView l = rows(8, 100, 128);
  EXPECT_TRUE(rows_may_overlap(kBase, l, kBase, l, 2));
  EXPECT_TRUE(rows_may_overlap(kBase, rows(1, 100, 100), kBase, rows(1, 100, 100), 4));
}

TEST(RowsMayOverlap, InterleavedHalvesOfOneBuffer) {
  // x = buf[:, :N], residual = buf[:, N:2N] with ld = 2N: the ranges interleave, elements never
  // meet.
  for (int64_t n : {1, 7, 4096}) {
    const RowView l = rows(17, n, 2 * n);
    const uintptr_t r = kBase + static_cast<uintptr_t>(n) * 2;
    EXPECT_FALSE(rows_may_overlap(kBase, l, r, l, 2)) << n;
    EXPECT_FALSE(rows_may_overlap(r, l, kBase, l, 2)) << n;
    // One element further: residual row i now reaches the first element of x's row i + 1.
    EXPECT_TRUE(rows_may_overlap(kBase, l, r + 2, l, 2)) << n;
  }
}

TEST(RowsMayOverlap, ShiftedByLessThanARow) {
  const RowView l = rows(4, 64, 64);
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

// A layout by its original sizes and strides (leading dims, then N with stride 1).
struct Layout {
  Ints sizes, strides;
  RowView view;  // rows_of of it
};

// The byte offsets of the elements of `l` from its first, by brute force over its original index.
std::vector<size_t> bytes_of(const Layout& l, int elem) {
  const int lead = static_cast<int>(l.sizes.size()) - 1;
  int64_t rows = 1;
  for (int d = 0; d < lead; ++d) rows *= l.sizes[d];
  std::vector<size_t> bytes;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = brute_offset(l.sizes, l.strides, r);
    for (int64_t j = 0; j < l.sizes[lead] * elem; ++j) {
      bytes.push_back(static_cast<size_t>(row * elem + j));
    }
  }
  return bytes;
}

bool really_overlap(size_t a, const Layout& la, size_t b, const Layout& lb, int elem) {
  std::vector<char> map;
  for (size_t x : bytes_of(la, elem)) {
    if (a + x >= map.size()) map.resize(a + x + 1, 0);
    map[a + x] = 1;
  }
  for (size_t x : bytes_of(lb, elem)) {
    if (b + x < map.size() && map[b + x]) return true;
  }
  return false;
}

Layout layout(const Ints& sizes, const Ints& strides) {
  const View v = view(sizes, strides);
  EXPECT_TRUE(v.view.has_value()) << v.why;
  return Layout{sizes, strides, v.view.value_or(RowView{})};
}

// Small layouts with one row stride, every offset: never "no overlap" when bytes are shared (a
// false negative would let the fused op corrupt memory), and exact when both sets have the same N
// and stride (the documented exact case, which the interleaved x/residual buffers of vLLM rely on).
TEST(RowsMayOverlap, AgreesWithBruteForce) {
  const int elem = 2;
  for (int64_t n = 1; n <= 4; ++n) {
    for (int64_t ld = n; ld <= 3 * n + 1; ++ld) {
      for (int64_t ma = 1; ma <= 3; ++ma) {
        for (int64_t mb = 1; mb <= 3; ++mb) {
          for (int64_t nb : {n, n + 1}) {
            for (int64_t ldb : {ld, ld + 1}) {
              const Layout la{{ma, n}, {ld, 1}, rows(ma, n, ld)};
              const Layout lb{{mb, nb}, {ldb, 1}, rows(mb, nb, ldb)};
              for (size_t off = 0; off < static_cast<size_t>(4 * ld * elem); ++off) {
                for (bool swap : {false, true}) {
                  const size_t a = swap ? off : 0, b = swap ? 0 : off;
                  const bool real = really_overlap(a, la, b, lb, elem);
                  const bool may = rows_may_overlap(kBase + a, la.view, kBase + b, lb.view, elem);
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

// The same with views over two leading dimensions (head views, gaps, transposed), against each
// other and against one-stride rows: never a false "no overlap".
TEST(RowsMayOverlap, TwoLeadingDimsNeverMissAnOverlap) {
  const int elem = 2;
  std::vector<Layout> layouts;
  for (int64_t n = 1; n <= 3; ++n) {
    for (int64_t m1 : {2, 3}) {
      for (int64_t m0 : {2, 3}) {
        for (int64_t s0 : {n, n + 1, 2 * n + 1}) {
          // Row-major with or without a gap, and transposed (dim 1 inside dim 0).
          for (int64_t s1 : {s0 * m0, s0 * m0 + n, s0 * m0 + 2 * n + 1}) {
            layouts.push_back(layout({m1, m0, n}, {s1, s0, 1}));
          }
          layouts.push_back(layout({m1, m0, n}, {s0, s0 * m1, 1}));
          layouts.push_back(layout({m1, m0, n}, {s0, s0 * m1 + n, 1}));
        }
      }
      layouts.push_back(layout({m1, n}, {n, 1}));
      layouts.push_back(layout({m1, n}, {2 * n, 1}));
    }
  }
  std::vector<std::vector<size_t>> bytes;
  for (const Layout& l : layouts) bytes.push_back(bytes_of(l, elem));
  int multi = 0, said_no = 0;
  for (size_t ia = 0; ia < layouts.size(); ++ia) {
    const Layout& la = layouts[ia];
    std::vector<char> in_a;  // la's bytes, from its first
    for (size_t x : bytes[ia]) {
      if (x >= in_a.size()) in_a.resize(x + 1, 0);
      in_a[x] = 1;
    }
    for (size_t ib = 0; ib < layouts.size(); ++ib) {
      const Layout& lb = layouts[ib];
      if (la.view.one_row_stride() && lb.view.one_row_stride()) continue;  // the test above
      ++multi;
      const size_t span = std::max(in_a.size(), bytes[ib].back() + 1);
      for (size_t off = 0; off <= span; ++off) {
        for (bool swap : {false, true}) {  // b `off` bytes after a, or a after b
          bool real = false;
          for (size_t y : bytes[ib]) {
            if (swap && y < off) continue;
            const size_t x = swap ? y - off : y + off;
            real = real || (x < in_a.size() && in_a[x]);
          }
          const size_t a = swap ? off : 0, b = swap ? 0 : off;
          const bool may = rows_may_overlap(kBase + a, la.view, kBase + b, lb.view, elem);
          said_no += !may;
          ASSERT_TRUE(may || !real)
              << "missed overlap: a " << text(la.sizes) << text(la.strides) << " b "
              << text(lb.sizes) << text(lb.strides) << " off=" << off << " swap=" << swap;
        }
      }
    }
  }
  EXPECT_GT(multi, 100);
  EXPECT_GT(said_no, 0);  // the check is not trivially "may overlap"
}

}  // namespace
}  // namespace oink
