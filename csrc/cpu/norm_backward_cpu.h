// RMSNorm's backward pass on the CPU: dx row by row, and dweight as per-block partial sums added
// in block order, so that its bits depend on the inputs alone (never on the thread count): the
// CUDA plan's blocks, weight_grad_blocks_for(M, N, dtype) (core/backward_plan.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/backward_plan.h"
#include "core/problem.h"
#include "core/rows.h"

namespace oink {

struct NormBackwardArgs {
  const void* dy = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;  // [N] or nullptr
  const void* rstd = nullptr;    // [M]: float32, or float64 for float64 rows
  void* dx = nullptr;
  double* dweight_partials = nullptr;  // [blocks][N], or nullptr without a weight
};

// Calls f(row, x, dy, dx) for the rows of block `block` (weight_grad_blocks_for(M, N, dtype)'s
// block_rows rows each), with the row's elements of x, dy and dx (element type XS).
template <typename XS, typename F>
inline void for_each_block_row(const NormBackwardProblem& bp, const void* x, const void* dy,
                               void* dx, int64_t block, F&& f) {
  const NormProblem& p = bp.rows;
  const int64_t block_rows = weight_grad_blocks_for(p.rows, p.cols, p.x_dtype).block_rows;
  const int64_t begin = block * block_rows, end = std::min(p.rows, begin + block_rows);
  const RowIndexer rows(p.row_dims);
  for (int64_t row = begin; row < end; ++row) {
    const RowIndex at = split_row(rows, row);
    f(row, static_cast<const XS*>(x) + row_offset(rows, at, p.x_strides),
      static_cast<const XS*>(dy) + row_offset(rows, at, bp.dy_strides),
      static_cast<XS*>(dx) + row_offset(rows, at, bp.dx_strides));
  }
}

// dx for the rows of block `block` (for_each_block_row's), and that block's dweight
// partial: the sum over its rows, in row order, of dy * x * rstd (float64).
void norm_backward_block_cpu(const NormBackwardProblem& problem, const NormBackwardArgs& args,
                             int64_t block);

// out[col] for col in [begin, end): the blocks' partials ([blocks][n]) added in block order,
// rounded once to `dtype` (dweight, dbias).
void reduce_partials_cpu(DType dtype, const double* partials, int64_t blocks, int64_t n, void* out,
                         int64_t begin, int64_t end);

// `n` elements of `dtype` widened to float64 (a weight or bias, once per call).
void widen_cpu(DType dtype, const void* src, int64_t n, double* dst);

}  // namespace oink
