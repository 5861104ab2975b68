#include "core/rows.h"

#include <algorithm>
#include <string>

namespace oink {

std::optional<RowLayout> rows_of(const int64_t* sizes, const int64_t* strides, int ndim,
                                 std::string* why) {
  RowLayout layout;
  layout.cols = sizes[ndim - 1];
  layout.rows = 1;
  for (int d = 0; d < ndim - 1; ++d) layout.rows *= sizes[d];
  layout.ld = layout.cols;
  if (layout.rows <= 1 || layout.cols == 0) return layout;

  // Walk the leading dims from the innermost out; dims of size 1 carry no stride information.
  // The innermost non-trivial dim gives ld; each outer one must continue it densely.
  int64_t expected = -1;  // stride the next outer non-trivial dim must have
  for (int d = ndim - 2; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (expected < 0) {
      layout.ld = strides[d];
    } else if (strides[d] != expected) {
      *why = "the leading dimensions must collapse to rows with one stride, but dim " +
             std::to_string(d) + " has stride " + std::to_string(strides[d]) + " where " +
             std::to_string(expected) + " was needed";
      return std::nullopt;
    }
    expected = strides[d] * sizes[d];
  }
  if (layout.ld < layout.cols) {
    *why = "rows must not overlap: row stride " + std::to_string(layout.ld) +
           " is smaller than N=" + std::to_string(layout.cols);
    return std::nullopt;
  }
  return layout;
}

bool rows_may_overlap(uintptr_t a, const RowLayout& la, uintptr_t b, const RowLayout& lb,
                      int elem_bytes) {
  if (la.rows == 0 || lb.rows == 0 || la.cols == 0 || lb.cols == 0) return false;
  const uintptr_t a_end =
      a + static_cast<uintptr_t>(((la.rows - 1) * la.ld + la.cols) * elem_bytes);
  const uintptr_t b_end =
      b + static_cast<uintptr_t>(((lb.rows - 1) * lb.ld + lb.cols) * elem_bytes);
  if (a_end <= b || b_end <= a) return false;  // disjoint byte ranges
  if (la.ld != lb.ld || la.cols != lb.cols || la.rows < 2) return true;

  // Same row stride: element i*ld + j of one set and offset + i'*ld + j' of the other coincide
  // only if offset ≡ (j - j') (mod ld) with |j - j'| < N.
  const uintptr_t lo = std::min(a, b), hi = std::max(a, b);
  if ((hi - lo) % elem_bytes != 0) return true;
  const int64_t offset = static_cast<int64_t>((hi - lo) / elem_bytes);
  const int64_t r = offset % la.ld;
  return !(r >= la.cols && r <= la.ld - la.cols);
}

}  // namespace oink
