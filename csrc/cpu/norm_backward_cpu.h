// RMSNorm's backward pass on the CPU: dx row by row, and dweight as per-block partial sums added
// in block order, so that its bits depend on the inputs and M alone (never on the thread count).
#pragma once

#include <cstdint>

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

// Rows per dweight partial: a function of M alone (at most kMaxWeightGradBlocks blocks).
int64_t weight_grad_block_rows(int64_t rows);

// dx for the rows of block `block` (weight_grad_block_rows rows each), and that block's dweight
// partial: the sum over its rows, in row order, of dy * x * rstd (float64).
void norm_backward_block_cpu(const NormBackwardProblem& problem, const NormBackwardArgs& args,
                             int64_t block);

// dweight[col] for col in [begin, end): the blocks' partials added in block order, rounded once
// to the weight's dtype.
void reduce_weight_grad_cpu(const NormBackwardProblem& problem, const double* partials,
                            int64_t blocks, void* dweight, int64_t begin, int64_t end);

}  // namespace oink
