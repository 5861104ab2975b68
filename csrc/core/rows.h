// An N-d tensor as M rows of N contiguous elements: its leading dimensions (all but the last),
// coalesced where they continue each other, give every row's offset. One stride per row set
// (contiguous or padded rows) is the common case; head views of a fused QKV buffer ([T, H, D],
// strides (qkv_width, D, 1)) and transposed views ([B, H, S, D] of a [B, S, H, D] buffer) keep
// two or three leading dimensions. Pure functions on sizes and strides (in elements), shared by
// the binding, the planner, the CPU kernels and the CUDA kernels.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/fast_divmod.h"
#include "core/host_device.h"

namespace oink {

// Leading dimensions a kernel walks after coalescing: any tensor of rank <= 5 fits.
inline constexpr int kMaxRowDims = 4;

// The leading dimensions of one row set (or of several same-shaped ones, coalesced together),
// innermost first: row r = i0 + size[0] * (i1 + size[1] * (i2 + ...)).
struct RowDims {
  int count = 1;                   // 1 .. kMaxRowDims; 1: rows with one stride
  int64_t size[kMaxRowDims] = {};  // size[count - 1] (the outermost) is M / (the others)
};

// One tensor's stride (elements) for each dimension of a RowDims.
struct RowStrides {
  int64_t s[kMaxRowDims] = {};
};

// One tensor viewed as rows, its leading dimensions coalesced on their own.
struct RowView {
  int64_t rows = 0;  // M: product of the leading dimensions
  int64_t cols = 0;  // N: the last dimension
  RowDims dims;
  RowStrides strides;  // with one dimension, strides.s[0] is the row stride (N when M <= 1)

  bool one_row_stride() const { return dims.count == 1; }
};

// The row view of a tensor of rank >= 1, or nullopt with the reason in `why` when its rows
// overlap each other (a zero or too small stride: a broadcast view) or its leading dimensions do
// not coalesce into kMaxRowDims. The caller checks that the last dimension has stride 1.
std::optional<RowView> rows_of(const int64_t* sizes, const int64_t* strides, int ndim,
                               std::string* why);

// Several tensors of one shape `sizes` walked together (x and out, or x and residual): a
// dimension merges into the next inner one only where it does in every tensor. `strides[t]` are
// tensor t's strides (ndim of them); out_strides[t] receives its strides over the result. nullopt
// with `why` when the common dimensions exceed kMaxRowDims. 1 <= tensors <= 3.
std::optional<RowDims> joint_rows(const int64_t* sizes, int ndim, const int64_t* const* strides,
                                  int tensors, RowStrides* out_strides, std::string* why);

// True if the elements of two row views (byte addresses, element size `elem_bytes`) may coincide.
// Exact for disjoint byte ranges and for rows interleaved in one buffer with the same row stride
// (x = buf[:, :N], residual = buf[:, N:2N]); conservative (true) otherwise.
bool rows_may_overlap(uintptr_t a, const RowView& va, uintptr_t b, const RowView& vb,
                      int elem_bytes);

// Every stride of every leading dimension a multiple of `elems`: each row starts as aligned as
// the first (the planners' condition for chunked vector I/O).
inline bool strides_multiple_of(const RowStrides& st, const RowDims& dims, int elems) {
  for (int d = 0; d < dims.count; ++d) {
    if (st.s[d] % elems != 0) return false;
  }
  return true;
}

// The kernels' form of a RowDims: the divisors of its inner dimensions, built on the host.
struct RowIndexer {
  int count = 1;
  FastDivmod inner[kMaxRowDims];  // inner[0 .. count - 2]; the outermost needs no divisor

  RowIndexer() = default;
  explicit RowIndexer(const RowDims& dims) : count(dims.count) {
    for (int d = 0; d + 1 < count; ++d) inner[d] = FastDivmod(static_cast<uint32_t>(dims.size[d]));
  }
};

// Row `row`'s indices over the dimensions, innermost first (rows < 2^31 when count > 1: the
// binding's limit on M).
struct RowIndex {
  int64_t row = 0;               // count == 1: the row itself
  uint32_t i[kMaxRowDims] = {};  // count > 1
};

OINK_HOST_DEVICE RowIndex split_row(const RowIndexer& ix, int64_t row) {
  RowIndex r;
  r.row = row;
  if (ix.count > 1) {
    uint32_t rest = static_cast<uint32_t>(row);
    OINK_UNROLL
    for (int d = 0; d < kMaxRowDims; ++d) {
      if (d + 1 < ix.count) {
        uint32_t q = 0;
        ix.inner[d].divmod(rest, q, r.i[d]);
        rest = q;
      } else if (d + 1 == ix.count) {
        r.i[d] = rest;  // the outermost dimension takes what is left
      }
    }
  }
  return r;
}

// Element offset of a row split by split_row, for a tensor with strides `st`.
OINK_HOST_DEVICE int64_t row_offset(const RowIndexer& ix, const RowIndex& r, const RowStrides& st) {
  if (ix.count == 1) return r.row * st.s[0];
  int64_t offset = 0;
  OINK_UNROLL
  for (int d = 0; d < kMaxRowDims; ++d) {
    if (d < ix.count) offset += int64_t{r.i[d]} * st.s[d];
  }
  return offset;
}

}  // namespace oink
