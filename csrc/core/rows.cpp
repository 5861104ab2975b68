#include "core/rows.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace oink {
namespace {

constexpr int kMaxJointTensors = 3;  // x, out and residual at most

struct Dim {
  int64_t size;
  int64_t stride[kMaxJointTensors];
};

// The leading dimensions of `tensors` same-shaped tensors, innermost first, size-1 dimensions
// dropped (their strides carry no information) and each dimension merged into the next inner one
// where every tensor continues it (stride == inner stride * inner size).
std::vector<Dim> coalesce(const int64_t* sizes, int ndim, const int64_t* const* strides,
                          int tensors) {
  std::vector<Dim> dims;
  for (int d = ndim - 2; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    Dim dim{sizes[d], {0, 0, 0}};
    for (int t = 0; t < tensors; ++t) dim.stride[t] = strides[t][d];
    bool merges = !dims.empty();
    for (int t = 0; merges && t < tensors; ++t) {
      merges = dim.stride[t] == dims.back().stride[t] * dims.back().size;
    }
    if (merges) {
      dims.back().size *= dim.size;
    } else {
      dims.push_back(dim);
    }
  }
  return dims;
}

std::string dims_text(const std::vector<Dim>& dims, int t) {
  std::string s;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    s += (s.empty() ? "" : ", ") + std::to_string(it->size) + " (stride " +
         std::to_string(it->stride[t]) + ")";
  }
  return s;
}

}  // namespace

std::optional<RowView> rows_of(const int64_t* sizes, const int64_t* strides, int ndim,
                               std::string* why) {
  RowView view;
  view.cols = sizes[ndim - 1];
  view.rows = 1;
  for (int d = 0; d < ndim - 1; ++d) view.rows *= sizes[d];
  view.dims.size[0] = view.rows;
  view.strides.s[0] = view.cols;
  if (view.rows <= 1 || view.cols == 0) return view;

  const std::vector<Dim> dims = coalesce(sizes, ndim, &strides, 1);
  // No two rows may share an element: sorted by stride, each dimension must step past the whole
  // extent of the smaller ones (a sufficient condition; a zero stride, a broadcast, fails it).
  std::vector<std::pair<int64_t, int64_t>> by_stride;  // (stride, size)
  for (const Dim& d : dims) by_stride.emplace_back(d.stride[0], d.size);
  std::sort(by_stride.begin(), by_stride.end());
  int64_t extent = view.cols;  // elements spanned by one row, then by the dims walked so far
  for (const auto& [stride, size] : by_stride) {
    if (stride < extent) {
      *why =
          "rows must not overlap (no broadcast or overlapping views), but its leading "
          "dimensions, outermost first, are " +
          dims_text(dims, 0) + " for rows of N=" + std::to_string(view.cols);
      return std::nullopt;
    }
    extent = stride * (size - 1) + extent;
  }
  if (static_cast<int>(dims.size()) > kMaxRowDims) {
    *why = "its leading dimensions must coalesce into at most " + std::to_string(kMaxRowDims) +
           " dimensions, but they are " + dims_text(dims, 0);
    return std::nullopt;
  }
  view.dims.count = static_cast<int>(dims.size());
  for (int d = 0; d < view.dims.count; ++d) {
    view.dims.size[d] = dims[d].size;
    view.strides.s[d] = dims[d].stride[0];
  }
  return view;
}

std::optional<RowDims> joint_rows(const int64_t* sizes, int ndim, const int64_t* const* strides,
                                  int tensors, RowStrides* out_strides, std::string* why) {
  if (tensors < 1 || tensors > kMaxJointTensors) {
    throw std::invalid_argument("joint_rows walks 1 to 3 tensors");
  }
  int64_t rows = 1;
  for (int d = 0; d < ndim - 1; ++d) rows *= sizes[d];
  RowDims result;
  result.size[0] = rows;
  if (rows <= 1) {
    for (int t = 0; t < tensors; ++t) out_strides[t] = RowStrides{{sizes[ndim - 1]}};
    return result;
  }
  const std::vector<Dim> dims = coalesce(sizes, ndim, strides, tensors);
  if (static_cast<int>(dims.size()) > kMaxRowDims) {
    *why = "their leading dimensions together must coalesce into at most " +
           std::to_string(kMaxRowDims) + " dimensions, but there are " +
           std::to_string(dims.size());
    return std::nullopt;
  }
  result.count = static_cast<int>(dims.size());
  for (int d = 0; d < result.count; ++d) {
    result.size[d] = dims[d].size;
    for (int t = 0; t < tensors; ++t) out_strides[t].s[d] = dims[d].stride[t];
  }
  return result;
}

bool rows_may_overlap(uintptr_t a, const RowView& va, uintptr_t b, const RowView& vb,
                      int elem_bytes) {
  if (va.rows == 0 || vb.rows == 0 || va.cols == 0 || vb.cols == 0) return false;
  auto span = [](const RowView& v) {  // elements from the first to one past the last
    int64_t s = v.cols;
    for (int d = 0; d < v.dims.count; ++d) s += (v.dims.size[d] - 1) * v.strides.s[d];
    return s;
  };
  const uintptr_t a_end = a + static_cast<uintptr_t>(span(va) * elem_bytes);
  const uintptr_t b_end = b + static_cast<uintptr_t>(span(vb) * elem_bytes);
  if (a_end <= b || b_end <= a) return false;  // disjoint byte ranges
  const int64_t ld = va.strides.s[0];
  if (!va.one_row_stride() || !vb.one_row_stride() || vb.strides.s[0] != ld || va.cols != vb.cols ||
      va.rows < 2) {
    return true;
  }
  // Same row stride: element i*ld + j of one set and offset + i'*ld + j' of the other coincide
  // only if offset ≡ (j - j') (mod ld) with |j - j'| < N.
  const uintptr_t lo = std::min(a, b), hi = std::max(a, b);
  if ((hi - lo) % elem_bytes != 0) return true;
  const int64_t offset = static_cast<int64_t>((hi - lo) / elem_bytes);
  const int64_t r = offset % ld;
  return !(r >= va.cols && r <= ld - va.cols);
}

}  // namespace oink
