// LayerNorm on the CPU, forward and backward: y = (x - mean) * rstd * weight + bias with
// rstd = 1 / sqrt(var + eps), the mean and the (biased) variance over the row in float64, two
// passes (the variance sums squared deviations from the mean, not x^2 - mean^2); every output
// rounded once. dweight and dbias, like RMSNorm's dweight, add per-block partials in block order.
#pragma once

#include <cstdint>

#include "core/problem.h"

namespace oink {

// Pointers of one call. The weight and bias arrive widened to float64 (N values each, converted
// once per call), so the row loops are instantiated for x's dtype alone.
struct LayerNormArgs {
  const void* x = nullptr;
  void* out = nullptr;             // forward: y
  const double* weight = nullptr;  // [N] or nullptr (1)
  const double* bias = nullptr;    // [N] or nullptr (0)
  void* mean = nullptr;            // [M]: float32, or float64 for float64 rows; or nullptr
  void* rstd = nullptr;            // the same
  double eps = 0.0;
};

struct LayerNormBackwardArgs {
  const void* dy = nullptr;
  const void* x = nullptr;
  const double* weight = nullptr;  // [N] or nullptr
  const void* mean = nullptr;      // layernorm_forward's
  const void* rstd = nullptr;
  void* dx = nullptr;
  double* dweight_partials = nullptr;  // [blocks][N] or nullptr
  double* dbias_partials = nullptr;    // [blocks][N] or nullptr
};

// Rows [begin, end) of the forward pass (problem.x_strides, problem.out_strides).
void layernorm_rows_cpu(const NormProblem& problem, const LayerNormArgs& args, int64_t begin,
                        int64_t end);

// dx for block `block` (weight_grad_blocks_for's rows, cpu/norm_backward_cpu.h) and its partials:
// sum over its rows, in row order, of dy * xhat (dweight) and dy (dbias).
void layernorm_backward_block_cpu(const NormBackwardProblem& problem,
                                  const LayerNormBackwardArgs& args, int64_t block);

}  // namespace oink
