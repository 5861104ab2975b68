// Viewing an N-d tensor as M rows of N elements with one row stride, and deciding whether two
// such row sets can share memory. Pure functions on sizes and strides (in elements).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace oink {

struct RowLayout {
  int64_t rows = 0;  // M: product of the leading dimensions
  int64_t cols = 0;  // N: the last dimension
  int64_t ld = 0;    // row stride in elements; == cols when there is at most one row
};

// The row view of a tensor of rank >= 1 whose last dimension has stride 1, or nullopt with the
// reason in `why` when the leading dimensions cannot be expressed as rows with one stride >= N.
std::optional<RowLayout> rows_of(const int64_t* sizes, const int64_t* strides, int ndim,
                                 std::string* why);

// True if the elements of two row sets (byte addresses, element size `elem_bytes`) may coincide.
// Exact for the common cases: disjoint byte ranges, or rows interleaved in one buffer with the same
// row stride (x = buf[:, :N], residual = buf[:, N:2N]); conservative (true) otherwise.
bool rows_may_overlap(uintptr_t a, const RowLayout& la, uintptr_t b, const RowLayout& lb,
                      int elem_bytes);

}  // namespace oink
